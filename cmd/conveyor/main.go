package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	conveyorcli "github.com/conveyorq/conveyor/cmd/conveyor/internal/cli"
)

func main() {
	// The first SIGINT or SIGTERM cancels ctx (a worker drains, a demo cleans up); stopping
	// the notification then makes a second one end the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	code := conveyorcli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
