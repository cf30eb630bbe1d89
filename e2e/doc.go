// Package e2e holds tests whose dependencies the library must not carry: the dashboard's
// browser test (chromedp, e2e/dashboard) and the docker-compose.yml test (compose-go,
// e2e/compose). It is its own module, as bench/ is, so that a program importing Conveyor's
// packages never downloads them; scripts/test.sh runs its tests with the main module's.
package e2e
