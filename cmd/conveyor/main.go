package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/conveyorq/conveyor/pipeline"
)

func main() {
	// The first SIGINT or SIGTERM cancels ctx (a worker drains, a demo cleans up); stopping
	// the notification then makes a second one end the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// Exit codes besides 0, 1 and 2 (see exitCode).
const exitInterrupted = 130 // SIGINT or SIGTERM ended a command before it finished (128+SIGINT)

// exitCode maps a command's error to the process's exit code: 0 ok; 2 a usage error, the
// command line cannot run as written (an unknown command or flag, a missing required flag, a
// wrong argument count, a malformed or out-of-range flag value, flags that cannot go
// together, or input the library refuses as invalid: pipeline.ErrInvalid, such as a bad queue
// name, job type or id); 1 anything else, a refusal by the system (a job not found or not in
// the expected state, a payload over the limit, a conflicting job, a busy queue, Redis down
// or refusing). run adds 130 for an interrupted command.
func exitCode(err error) int {
	var usage usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage), errors.Is(err, pipeline.ErrInvalid):
		return 2
	default:
		return 1
	}
}
