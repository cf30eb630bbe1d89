package redistest

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The go-redis hooks of the tests: Commands counts and records what a client sends, LoseReplies
// loses replies the way a cut connection does. They live here, in a leaf that imports no
// package of Conveyor's, so that the tests of every package (stream's own among them) share
// one of each.

// Commands is a go-redis hook that counts the commands a client sends, pipelined ones included.
// It is for tests that bound what code costs Redis, or that wait for it to have done something
// (a script call, a read). CountCommands adds one to a client.
type Commands struct {
	all, trips, scripts atomic.Int64
	dials               atomic.Int64
	mu                  sync.Mutex
	named               map[string]int64 // lower-case command name -> count
	recording           bool
	recorded            [][]string // the command names of each round trip, while recording
	observe             atomic.Pointer[func(redis.Cmder)]
}

// connSetup are the commands go-redis sends on each new connection: the pool's cost, not the
// code's.
var connSetup = map[string]bool{"hello": true, "client": true, "auth": true, "select": true}

// CountCommands adds a Commands hook to rdb and returns it.
func CountCommands(rdb interface{ AddHook(redis.Hook) }) *Commands {
	c := &Commands{}
	rdb.AddHook(c)
	return c
}

// Observe has f called with each single (not pipelined) command once it has returned, on the
// goroutine that sent it. It is a test's way to see a client's background work as events.
func (c *Commands) Observe(f func(cmd redis.Cmder)) { c.observe.Store(&f) }

// All is how many commands the client sent, each command of a pipeline counted.
func (c *Commands) All() int64 { return c.all.Load() }

// RoundTrips is how many round trips the client made: a command, or a whole pipeline. Those that
// set a new connection up (HELLO, CLIENT SETINFO, AUTH, SELECT) are left out.
func (c *Commands) RoundTrips() int64 { return c.trips.Load() }

// During runs f and returns the round trips it took (on a client no other goroutine uses).
func (c *Commands) During(f func()) int64 {
	before := c.trips.Load()
	f()
	return c.trips.Load() - before
}

// Scripts is how many script calls (EVAL, EVALSHA) have returned.
func (c *Commands) Scripts() int64 { return c.scripts.Load() }

// Named is how many commands called name (any case) the client sent.
func (c *Commands) Named(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.named[strings.ToLower(name)]
}

// Record starts keeping the command names of each round trip for Take.
func (c *Commands) Record() *Commands {
	c.mu.Lock()
	c.recording = true
	c.mu.Unlock()
	return c
}

// Take returns the round trips recorded since Record or the last Take, each as its commands'
// names (lower case), and forgets them.
func (c *Commands) Take() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.recorded
	c.recorded = nil
	return t
}

func (c *Commands) count(cmds []redis.Cmder) {
	if len(cmds) == 0 {
		return
	}
	c.all.Add(int64(len(cmds)))
	setup := connSetup[strings.ToLower(cmds[0].Name())]
	if !setup {
		c.trips.Add(1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.named == nil {
		c.named = map[string]int64{}
	}
	var names []string
	if c.recording && !setup {
		names = make([]string, 0, len(cmds))
	}
	for _, cmd := range cmds {
		n := strings.ToLower(cmd.Name())
		c.named[n]++
		if names != nil {
			names = append(names, n)
		}
	}
	if names != nil {
		c.recorded = append(c.recorded, names)
	}
}

// Dials is how many connections the client opened.
func (c *Commands) Dials() int64 { return c.dials.Load() }

// DialHook is part of redis.Hook.
func (c *Commands) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.dials.Add(1)
		return next(ctx, network, addr)
	}
}

// ProcessHook is part of redis.Hook.
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

// ProcessPipelineHook is part of redis.Hook.
func (c *Commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(cmds)
		return next(ctx, cmds)
	}
}

// LoseReplies is a go-redis hook that lets an XREADGROUP run on the server and then loses its
// reply. It does so for reads that return at least Min entries, while Lose is positive. Each
// loss counts Lose down; negative means forever. When Every > 1, it loses every Every-th such
// read.
//
// With Resend it sends the read again and returns the second reply, as go-redis does after a
// lost reply. Without, it returns io.EOF, as go-redis does once its retries are used up. It also
// counts the XPENDING calls it sees (Sweeps): a subscriber's sweeps for orphaned entries.
type LoseReplies struct {
	Resend bool
	Min    int
	Every  int64
	Lose   atomic.Int64
	n      atomic.Int64
	mu     sync.Mutex
	lost   []string // ids of the lost replies
	sweeps atomic.Int64
}

// Lost returns the ids of the entries whose replies were lost.
func (l *LoseReplies) Lost() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lost...)
}

// Sweeps is how many XPENDING calls went through the hook.
func (l *LoseReplies) Sweeps() int64 { return l.sweeps.Load() }

// DialHook is part of redis.Hook.
func (*LoseReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook is part of redis.Hook.
func (*LoseReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook is part of redis.Hook.
func (l *LoseReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xpending" {
			l.sweeps.Add(1)
		}
		x, ok := cmd.(*redis.XStreamSliceCmd)
		if !ok || cmd.Name() != "xreadgroup" {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		if err != nil || len(x.Val()) == 0 || len(x.Val()[0].Messages) < l.Min || l.Lose.Load() == 0 {
			return err
		}
		if l.Every > 1 && l.n.Add(1)%l.Every != 0 {
			return err
		}
		if l.Lose.Add(-1) < 0 {
			l.Lose.Store(-1)
		}
		l.mu.Lock()
		for _, m := range x.Val()[0].Messages {
			l.lost = append(l.lost, m.ID)
		}
		l.mu.Unlock()
		if l.Resend {
			return next(ctx, cmd)
		}
		x.SetVal(nil)
		x.SetErr(io.EOF)
		return io.EOF
	}
}
