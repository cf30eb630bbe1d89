package jobstate

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/script"
)

// runCalls runs calls (made by this package's *Call functions) in one round trip and returns
// their commands, in order, to be read by the matching *Reply: a single call as a plain
// EVALSHA (which falls back to EVAL by itself), several pipelined (script.Pipelined). The
// error is the first call's error, or the pipeline's.
func runCalls(ctx context.Context, rdb redis.UniversalClient, calls []script.Call) ([]*redis.Cmd, error) {
	if len(calls) == 1 {
		c := calls[0]
		cmd := c.Script.Run(ctx, rdb, c.Keys, c.Args...)
		return []*redis.Cmd{cmd}, cmd.Err()
	}
	return script.Pipelined(ctx, rdb, calls)
}

// pipelineErr is a pipeline's error when none of its commands carries it: go-redis leaves the
// commands of a pipeline whose connection could not be set up (a refused AUTH, a SELECT of a
// database that does not exist) without an error of their own, so a reader that looks only at
// its commands sees empty answers, and an empty system. nil when some command carries it.
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
