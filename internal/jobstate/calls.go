package jobstate

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/script"
)

// RunCalls runs calls (made by this package's *Call functions) in one round trip and returns
// their commands, in order, to be read by the matching *Reply: a single call as a plain
// EVALSHA (which falls back to EVAL by itself), several pipelined (script.Pipelined). The
// error is the first call's error, or the pipeline's.
func RunCalls(ctx context.Context, rdb redis.UniversalClient, calls []script.Call) ([]*redis.Cmd, error) {
	if len(calls) == 1 {
		c := calls[0]
		cmd := c.Script.Run(ctx, rdb, c.Keys, c.Args...)
		return []*redis.Cmd{cmd}, cmd.Err()
	}
	return script.Pipelined(ctx, rdb, calls)
}
