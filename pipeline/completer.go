package pipeline

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

// Transition ops of finish.lua.
const (
	opStart  = "start"
	opDone   = "done"
	opRetry  = "retry"
	opFail   = "fail"
	opPoison = "poison"
)

// transition is one state change a worker asks for; finish.lua applies it, fenced by entry.
type transition struct {
	q        keys.Queue
	op       string
	id       string
	entry    string
	attempt  int
	started  int64 // unix ms
	finished int64 // unix ms
	data     string
	extra    string
	tries    int
}

// completer writes job transitions off the handlers' path: it collects them and flushes every
// FlushInterval (or at once when a batch is full) as one finish.lua call per queue and batch,
// all pipelined in one round trip. A job's "started" mark waits one interval before it is
// written and is dropped when the job finishes first, so short jobs cost one write, not two.
//
// Nothing is lost when a flush fails: transitions are retried; those that cannot be written
// leave their entries pending, and recovery runs those jobs again after the visibility timeout.
type completer struct {
	rdb       redis.UniversalClient
	worker    string
	retention int64 // default retention ms for finish.lua
	interval  time.Duration
	maxBatch  int
	log       zerolog.Logger

	mu     sync.Mutex
	items  []transition
	starts map[string]transition // pending "started" marks by entry
	arm    chan struct{}
	full   chan struct{}
	stop   chan struct{}
	done   chan struct{}

	applied atomic.Int64
	refused atomic.Int64
	dropped atomic.Int64
}

func newCompleter(rdb redis.UniversalClient, worker string, retention int64, interval time.Duration, maxBatch int, log zerolog.Logger) *completer {
	return &completer{
		rdb: rdb, worker: worker, retention: retention, interval: interval, maxBatch: maxBatch,
		log:    log.With().Str("component", "completer").Logger(),
		starts: make(map[string]transition),
		arm:    make(chan struct{}, 1),
		full:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// started records that an attempt began.
func (c *completer) started(t transition) {
	t.op = opStart
	c.mu.Lock()
	c.starts[t.entry] = t
	c.mu.Unlock()
	signal(c.arm)
}

// finish records an attempt's outcome; it replaces the attempt's start mark if that was not
// written yet (finish.lua writes started_at with the outcome).
func (c *completer) finish(t transition) {
	c.mu.Lock()
	delete(c.starts, t.entry)
	c.items = append(c.items, t)
	n := len(c.items)
	c.mu.Unlock()
	if n >= c.maxBatch {
		signal(c.full)
	} else {
		signal(c.arm)
	}
}

// forget drops an attempt's unwritten start mark (the attempt was abandoned: lease lost or
// shutdown).
func (c *completer) forget(entry string) {
	c.mu.Lock()
	delete(c.starts, entry)
	c.mu.Unlock()
}

func (c *completer) run() {
	defer close(c.done)
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-c.arm:
			t := time.NewTimer(c.interval)
			select {
			case <-t.C:
			case <-c.full:
			case <-c.stop:
			}
			t.Stop()
		case <-c.full:
		case <-c.stop:
			c.final()
			return
		}
		if c.flush(context.Background(), false) {
			backoff = 50 * time.Millisecond
		} else {
			select {
			case <-time.After(backoff):
			case <-c.stop:
			}
			backoff = min(2*backoff, 2*time.Second)
		}
		c.mu.Lock()
		pending := len(c.items) + len(c.starts)
		c.mu.Unlock()
		if pending > 0 {
			signal(c.arm)
		}
	}
}

// final flushes what is left at shutdown, retrying for a few seconds.
func (c *completer) final() {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		ok := c.flush(ctx, true)
		cancel()
		c.mu.Lock()
		left := len(c.items)
		c.mu.Unlock()
		if ok || left == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.log.Error().Int("transitions", left).Msg("could not write job transitions before shutdown; their jobs will be recovered")
			c.dropped.Add(int64(left))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// close flushes and stops the completer; it is safe to call once.
func (c *completer) close() {
	close(c.stop)
	<-c.done
}

// flush writes pending transitions and reports whether every write went through. Start marks
// younger than one interval wait for the next flush unless all is true.
func (c *completer) flush(ctx context.Context, all bool) bool {
	c.mu.Lock()
	items := c.items
	c.items = nil
	cutoff := time.Now().Add(-c.interval).UnixMilli()
	var batch []transition
	for e, s := range c.starts {
		if all || s.started <= cutoff {
			batch = append(batch, s)
			delete(c.starts, e)
		}
	}
	c.mu.Unlock()
	batch = append(batch, items...)
	if len(batch) == 0 {
		return true
	}

	// One finish.lua call per queue and chunk, all in one pipeline.
	byQueue := map[string][]transition{}
	var order []string
	for _, t := range batch {
		name := t.q.Name()
		if _, ok := byQueue[name]; !ok {
			order = append(order, name)
		}
		byQueue[name] = append(byQueue[name], t)
	}
	var calls []script.Call
	var groups [][]transition
	for _, name := range order {
		ts := byQueue[name]
		for len(ts) > 0 {
			n := min(len(ts), c.maxBatch)
			calls = append(calls, c.call(ts[:n]))
			groups = append(groups, ts[:n])
			ts = ts[n:]
		}
	}
	cmds, _ := script.Pipelined(ctx, c.rdb, calls)

	ok := true
	var retry []transition
	for i, cmd := range cmds {
		codes, err := cmd.Int64Slice()
		if err != nil {
			ok = false
			for _, t := range groups[i] {
				t.tries++
				if transient(err) || t.tries < 5 {
					retry = append(retry, t)
				} else {
					c.dropped.Add(1)
					c.log.Error().Err(err).Str("job_id", t.id).Str("op", t.op).Msg("giving up on a job transition; the job will be recovered")
				}
			}
			c.log.Warn().Err(err).Int("transitions", len(groups[i])).Msg("write job transitions")
			continue
		}
		for k, code := range codes {
			t := groups[i][k]
			if code == 0 {
				c.refused.Add(1)
				c.log.Info().Str("job_id", t.id).Str("entry", t.entry).Str("op", t.op).
					Msg("transition refused: the job moved on (recovered, canceled or finished elsewhere)")
				continue
			}
			c.applied.Add(1)
		}
	}
	if len(retry) > 0 {
		c.mu.Lock()
		for _, t := range retry {
			// A start mark is only informational (the outcome carries started_at): one that
			// failed is not written again, so it can never land after the job's outcome.
			if t.op != opStart {
				c.items = append(c.items, t)
			}
		}
		c.mu.Unlock()
	}
	return ok
}

func (c *completer) call(ts []transition) script.Call {
	q := ts[0].q
	ks := make([]string, 0, 4+len(ts))
	ks = append(ks, q.Stream(), q.Scheduled(), q.Dead(), q.Stats())
	args := make([]any, 0, 4+8*len(ts))
	args = append(args, keys.Group, c.worker, c.retention, q.Wake())
	for _, t := range ts {
		ks = append(ks, q.Job(t.id))
		args = append(args, t.op, t.id, t.entry, strconv.Itoa(t.attempt), t.started, t.finished, t.data, t.extra)
	}
	return script.Call{Script: finishScript, Keys: ks, Args: args}
}

// transient reports whether err may pass by itself (a network error, a failover, a busy or
// loading server) rather than being a fault in the request.
func transient(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // network errors, timeouts
	}
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "NOSCRIPT", "MOVED", "ASK"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
