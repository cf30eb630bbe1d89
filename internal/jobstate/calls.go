package jobstate

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/script"
)

// runCalls runs calls (made by this package's *Call functions) in one round trip. It returns
// their commands, in order, to be read by the matching *Reply. A single call runs as a plain
// EVALSHA, which falls back to EVAL by itself. Several run pipelined (script.Pipelined). The
// error is the first call's error, or the pipeline's.
func runCalls(ctx context.Context, rdb redis.UniversalClient, calls []script.Call) ([]*redis.Cmd, error) {
	if len(calls) == 1 {
		c := calls[0]
		cmd := c.Script.Run(ctx, rdb, c.Keys, c.Args...)
		return []*redis.Cmd{cmd}, cmd.Err()
	}
	return script.Pipelined(ctx, rdb, calls)
}

// pipelineErr is a pipeline's error when none of its commands carries it. Go-redis may fail to
// set up a pipeline's connection (a refused AUTH, a SELECT of a database that does not exist).
// Then it leaves the pipeline's commands without an error of their own. A reader that looks
// only at its commands would see empty answers, and an empty system. It is nil when some
// command carries the error.
func pipelineErr(err error, cmds ...redis.Cmder) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return nil
	}
	for _, c := range cmds {
		if c.Err() != nil {
			return nil
		}
	}
	return err
}
