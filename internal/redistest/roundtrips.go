package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook (Client.AddHook) that counts round trips: each command sent
// alone and each pipeline, but not those that set a new connection up, which depend on the
// pool rather than on the code under test.
type RoundTrips struct{ n atomic.Int64 }

// connSetup are the commands go-redis sends on each new connection.
var connSetup = map[string]bool{"hello": true, "client": true, "auth": true, "select": true}

// Count returns the round trips so far.
func (r *RoundTrips) Count() int64 { return r.n.Load() }

// During runs f and returns the round trips it took (on a client no other goroutine uses).
func (r *RoundTrips) During(f func()) int64 {
	before := r.n.Load()
	f()
	return r.n.Load() - before
}

// DialHook is part of redis.Hook.
func (r *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is part of redis.Hook.
func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !connSetup[cmd.Name()] {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook is part of redis.Hook.
func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || !connSetup[cmds[0].Name()] {
			r.n.Add(1)
		}
		return next(ctx, cmds)
	}
}
