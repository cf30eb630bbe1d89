#!/usr/bin/env bash
# The test command (README: "bash scripts/test.sh"). It needs Go; tests start private
# redis-server processes on free ports and never touch a server already running on 6379.
#
#   0. the Debian packages the tests need, installed when missing (as root or through a
#      password-less sudo; apt-get update once): redis-server, redis-tools, chromium for the
#      dashboard's browser test and postgresql for the outbox's (private servers, internal/pgtest)
#      (scripts/packages.sh; CONVEYOR_NO_INSTALL=1 installs nothing)
#   1. formatting, vet and staticcheck, for the main module and the e2e and bench modules
#   2. the race-enabled test suite of the main module: unit, integration (real Redis,
#      standalone and a 3-node cluster), end-to-end (the built binary; workers SIGKILLed,
#      SIGSTOPped and SIGTERMed) and runnable examples; then the e2e module's (its own go.mod,
#      so that the library does not require chromedp or compose-go): the dashboard in headless
#      Chromium and the docker-compose.yml test
#   3. a short side-by-side benchmark against asynq, watermill-redisstream and raw go-redis,
#      so the harness cannot rot (the full run: docs/BENCHMARKS.md)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "packages"
# shellcheck source=scripts/packages.sh
. scripts/packages.sh
need_test_packages
if ! install_needed; then
  echo "as root: apt-get update && apt-get install -y redis-server redis-tools chromium postgresql" \
    "(CONVEYOR_CHROMIUM names another Chromium; CONVEYOR_BROWSER_TEST=skip skips the browser test)"
  exit 1
fi

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './vendor/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...
(cd e2e && go vet ./...)
(cd bench && go vet ./...)

step "staticcheck"
# Pinned, run through the module proxy: nothing to install by hand. All checks on; none disabled.
staticcheck="honnef.co/go/tools/cmd/staticcheck@v0.8.2"
go run "$staticcheck" ./...
(cd e2e && go run "$staticcheck" ./...)
(cd bench && go run "$staticcheck" ./...)

step "go test -race ./..."
go test -race -count=1 -timeout 20m ./...

step "e2e module tests"
(cd e2e && go test -race -count=1 -timeout 10m ./...)

step "bench module tests"
(cd bench && go test -short -count=1 -timeout 10m ./...)

step "short peer comparison (bench/cmd/compare -jobs 5000 -rounds 1)"
(cd bench && go run ./cmd/compare -jobs 5000 -rounds 1)

step "all tests passed"
