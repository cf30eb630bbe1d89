package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	conveyorcli "github.com/conveyorq/conveyor/cmd/conveyor/internal/cli"
)

func main() {
	ctx, stop := signalContext()
	code := conveyorcli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// signalContext returns a context the first SIGINT or SIGTERM cancels (a worker drains, a demo
// cleans up). A second signal ends the process at once: the notification is stopped before the
// context is canceled. Canceled first, a worker could print "signal again to stop now" while a
// second signal was still caught and dropped.
func signalContext() (context.Context, context.CancelFunc) {
	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	context.AfterFunc(sig, func() {
		stop()
		cancel()
	})
	return ctx, func() {
		stop()
		cancel()
	}
}
