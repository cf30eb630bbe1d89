package jobtest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Commands is a go-redis hook that counts the commands a client sends, pipelined ones
// included, for tests that bound what code costs Redis or that wait for it to have done
// something (a script call, a read). CountCommands adds one to a client.
type Commands struct {
	all, trips, scripts atomic.Int64
	mu                  sync.Mutex
	named               map[string]int64 // lower-case command name -> count
	observe             atomic.Pointer[func(redis.Cmder)]
}

// Observe has f called with each single (not pipelined) command once it has returned, on the
// goroutine that sent it: a test's way to see a client's background work as events.
func (c *Commands) Observe(f func(cmd redis.Cmder)) { c.observe.Store(&f) }

// CountCommands adds a Commands hook to rdb and returns it.
func CountCommands(rdb interface{ AddHook(redis.Hook) }) *Commands {
	c := &Commands{named: map[string]int64{}}
	rdb.AddHook(c)
	return c
}

// All is how many commands the client sent, each command of a pipeline counted.
func (c *Commands) All() int64 { return c.all.Load() }

// RoundTrips is how many round trips the client made (a command, or a whole pipeline), but for
// those that set a new connection up (HELLO, CLIENT SETNAME...).
func (c *Commands) RoundTrips() int64 { return c.trips.Load() }

// Scripts is how many script calls (EVAL, EVALSHA) have returned.
func (c *Commands) Scripts() int64 { return c.scripts.Load() }

// Named is how many commands called name (any case) the client sent.
func (c *Commands) Named(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.named[strings.ToLower(name)]
}

func (c *Commands) count(cmds []redis.Cmder) {
	c.all.Add(int64(len(cmds)))
	c.mu.Lock()
	for _, cmd := range cmds {
		c.named[strings.ToLower(cmd.Name())]++
	}
	c.mu.Unlock()
	if name := strings.ToLower(cmds[0].Name()); name != "hello" && name != "client" {
		c.trips.Add(1)
	}
}

func (c *Commands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *Commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count([]redis.Cmder{cmd})
		err := next(ctx, cmd)
		if n := strings.ToLower(cmd.Name()); n == "evalsha" || n == "eval" {
			c.scripts.Add(1)
		}
		if f := c.observe.Load(); f != nil {
			(*f)(cmd)
		}
		return err
	}
}

func (c *Commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(cmds)
		return next(ctx, cmds)
	}
}
