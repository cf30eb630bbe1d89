// Package cli is the conveyor command: every subcommand, the global flags, the Redis
// connection and what errors and output read like. cmd/conveyor's main only hands it the
// process's arguments, streams, environment and signals, and exits with the code Run returns.
//
// Commands hold wiring and output: they parse and check flags, call pipeline.Client,
// pipeline.Inspector or pipeline.Worker, and print. What a command computes that the HTTP API
// could also want (the doctor's checks, a purge dry run, whether a queue exists) is an
// Inspector method, so both get the same answer. Each subcommand is one file that adds itself
// to the root from its init function (addCommand).
package cli

import (
	"errors"

	"github.com/conveyorq/conveyor/pipeline"
)

// Exit codes besides 0, 1 and 2 (see exitCode).
const exitInterrupted = 130 // SIGINT or SIGTERM ended a command before it finished (128+SIGINT)

// exitCode maps a command's error to the process's exit code. It is 0 for no error.
//
// It is 2 for a usage error: the command line cannot run as written. Examples are an unknown
// command or flag, a missing required flag, and a wrong argument count. So are a malformed or
// out-of-range flag value, and flags that cannot go together. So is input the library refuses
// as invalid (pipeline.ErrInvalid), such as a bad queue name, job type or id.
//
// It is 1 for anything else, a refusal by the system. Examples are a job not found or not in
// the expected state, a payload over the limit, and a conflicting job. So are a busy queue,
// and Redis down or refusing. Run adds 130 for an interrupted command.
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
