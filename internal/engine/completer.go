package engine

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/durable"
	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
)

// Completer writes job transitions in batches. A handler's outcome joins the current chunk
// (up to maxBatch outcomes). Chunks are written one finish.lua call per queue. A chunk is
// written as soon as it is full, every slot of the worker waits, or FlushInterval passed. A
// job's "started" mark waits one interval before it is written. It is dropped when the job
// finishes first, so short jobs cost one write, not two.
//
// A handler waits for the chunk that carries its outcome to be written before its message is
// acked. So a job keeps its worker slot until its outcome is in Redis. A worker never holds
// more unfinished entries than its concurrency, which bounds what a crash makes run again.
// Chunks are released one at a time. So the worker reads new jobs for the slots of one chunk
// while the next is being written. The completer writes finishWriters chunks at once. So
// Redis has the next chunk in hand while the reply to the last one travels back.
//
// Nothing is lost when a write fails: transitions are retried. Those that cannot be written
// leave their entries pending. Recovery runs those jobs again after the visibility timeout.
type Completer struct {
	store    jobstate.Backend
	cfg      jobstate.FinishConfig
	interval time.Duration
	maxBatch int
	slots    int // the worker's concurrency: write at once when this many wait
	log      zerolog.Logger

	mu sync.Mutex
	// chunks holds outcomes in arrival order; all but the last are full, except a retried
	// chunk that a failed write put back at the head.
	chunks  []*chunk
	pending int // outcomes in chunks
	// starts are the "started" marks in the order noted, so the oldest first. A mark dropped
	// (its outcome came, or its attempt was abandoned) stays until it reaches the head: a
	// slice costs a job less than a map's insert and delete. live counts the others.
	starts []*StartMark
	live   int
	// Now is the worker's wall clock: the start marks' times are its, and the hooks and the
	// history measure from them. Deadlines and backoffs stay monotonic.
	Now     func() time.Time
	arm     chan struct{}
	full    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	closed  bool           // close was called: outcomes arriving now cannot be written
	refused map[string]int // by entry: writes Redis refused as malformed (rare; see write)

	refusedMu sync.Mutex // the writers (finishWriters) share refused

	// outage is the current spell of writes that Redis refused or that did not reach it. The
	// writers share its backoff, so a spell logs one line per backoff step however many
	// writers retry.
	outage outage.Spell

	// Replicas, when set, makes each write wait for replicas.
	Replicas *durable.Outcomes

	// OnTrouble, when set, is told when writes start failing (true) and when they go through
	// again (false): the worker stops reading new jobs meanwhile.
	OnTrouble func(bool)

	// OnWritten, when set, is told of the outcomes written (with finish.lua's codes) or given
	// up (nil codes), for the worker's hooks. They come in chunks, so telling them costs a
	// clock read per chunk, not per job.
	OnWritten func(ts []jobstate.Transition, codes []script.Code, at time.Time)

	// History, when set, counts the outcomes written for the queues' history in Redis
	// (history.go), a chunk at a time like OnWritten.
	History *History
}

// Bounds of the writers' shared backoff while writes fail.
const (
	minWriteBackoff = 50 * time.Millisecond
	maxWriteBackoff = 2 * time.Second
	// maxPermanentTries bounds the resends of a transition after an error that says
	// the request itself is wrong (a script error, a key of the wrong type, an ACL refusal).
	// Another try cannot fix those, and the job is left to recovery.
	maxPermanentTries = 5
)

// chunk is a batch of outcomes whose handlers wait for done.
type chunk struct {
	items []jobstate.Transition
	done  chan struct{}
}

// NewCompleter returns a completer that writes through store; start it with Run.
func NewCompleter(store jobstate.Backend, cfg jobstate.FinishConfig, interval time.Duration, maxBatch, slots int, log zerolog.Logger) *Completer {
	return &Completer{
		store: store, cfg: cfg, interval: interval, maxBatch: maxBatch,
		slots:  max(1, slots),
		log:    log.With().Str("component", "completer").Logger(),
		Now:    time.Now,
		outage: outage.Spell{Min: minWriteBackoff, Max: maxWriteBackoff},
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

// finishWriters is how many chunks are written at once, each by its own goroutine on its own
// connection. So Redis has the next chunk in hand while the reply to the last one travels
// back. Two beat one and three (docs/BENCHMARKS.md, "What each change bought"). Chunks are
// independent (each job's outcome is in exactly one), so their order does not matter. Only a
// start mark may now land after its job's outcome, and finish.lua then ignores it.
const finishWriters = 2

// StartMark is an attempt's "started" mark, a field of its Attempt: no allocation of its own.
type StartMark struct {
	Q         *keys.Queue
	ID, Entry string
	Attempt   int
	At        int64     // unix ms, by the worker's clock: what is stored
	noted     time.Time // when it was noted, for its wait before the write: monotonic, not at
	state     markState // under the completer's mu
}

// markState is where a StartMark is: not noted, waiting in Completer.starts, or dropped
// (written, or no longer to be written).
type markState uint8

const (
	markNone markState = iota
	markQueued
	markDropped
)

// Started records that m's attempt began; m must not change until its outcome (Finish) or
// Forget.
func (c *Completer) Started(m *StartMark) {
	c.mu.Lock()
	idle := c.idleLocked()
	m.noted = time.Now() // under mu: the marks are in the order noted
	m.state = markQueued
	c.starts = append(c.starts, m)
	c.live++
	c.mu.Unlock()
	if idle {
		signal(c.arm)
	}
}

// idleLocked reports whether nothing waits to be written. Only then does a writer need arming:
// while something waits, a writer is armed or is writing, and checks again after its write
// (writeLoop). So a job costs no signal, which wakes a writer.
func (c *Completer) idleLocked() bool { return c.pending+c.live == 0 }

// dropLocked drops m, if it waits to be written. A dropped mark still in starts holds its
// whole Attempt (the message, the job, its contexts): starts is compacted once the dropped
// outnumber the live by compactSlack, so that they stay a bounded few. Behind a live mark at
// the head that is not due yet, a worker draining at 70,000 jobs a second dropped hundreds,
// and its heap's peak grew by half (docs/BENCHMARKS.md, "Issue 34").
func (c *Completer) dropLocked(m *StartMark) {
	if m != nil && m.state == markQueued {
		m.state = markDropped
		c.live--
		if len(c.starts)-c.live > c.live+compactSlack {
			c.compactLocked()
		}
	}
}

// compactSlack: see dropLocked. Each compaction removes at least this many marks, so its cost
// per job stays a fraction of a live mark's copy.
const compactSlack = 64

// compactLocked keeps only the marks that wait to be written, in order.
func (c *Completer) compactLocked() {
	k := 0
	for _, m := range c.starts {
		if m != nil && m.state == markQueued {
			c.starts[k] = m
			k++
		}
	}
	clear(c.starts[k:])
	c.starts = c.starts[:k]
}

// Finish records an attempt's outcome; it replaces the attempt's start mark m (nil: none) if
// that was not written yet (finish.lua writes started_at with the outcome). The returned
// channel closes once the chunk that carries it was written (or the write was tried and will
// be retried).
func (c *Completer) Finish(t jobstate.Transition, m *StartMark) <-chan struct{} {
	c.mu.Lock()
	if c.closed {
		// A handler that outlived shutdown: its entry was put back or will be recovered, and
		// nobody writes any more, so there is nothing to wait for.
		c.mu.Unlock()
		transitionEvent(c.log.Warn(), t).
			Msg("job outcome arrived after the worker shut down; it is not written and the job will run again")
		c.told([]jobstate.Transition{t}, nil, c.Now())
		return closedChan
	}
	idle := c.idleLocked()
	c.dropLocked(m)
	n := len(c.chunks)
	if n == 0 || len(c.chunks[n-1].items) >= c.maxBatch {
		c.chunks = append(c.chunks, &chunk{items: make([]jobstate.Transition, 0, c.maxBatch), done: make(chan struct{})})
		n++
	}
	ch := c.chunks[n-1]
	ch.items = append(ch.items, t)
	c.pending++
	ready := n > 1 || len(ch.items) >= c.maxBatch || c.pending >= c.slots
	c.mu.Unlock()
	if ready {
		signal(c.full)
	} else if idle {
		signal(c.arm)
	}
	return ch.done
}

// closedChan is returned for outcomes that need no wait.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Forget drops an attempt's unwritten start mark (the attempt was abandoned: lease lost or
// shutdown).
func (c *Completer) Forget(m *StartMark) {
	c.mu.Lock()
	c.dropLocked(m)
	c.mu.Unlock()
}

// Run writes until Close.
func (c *Completer) Run() {
	defer close(c.done)
	var wg sync.WaitGroup
	for range finishWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.writeLoop()
		}()
	}
	wg.Wait()
	c.final()
	c.mu.Lock()
	c.closed = true
	late := c.chunks // joined after the last write: nobody writes them now
	c.chunks, c.pending = nil, 0
	c.mu.Unlock()
	for _, ch := range late {
		c.log.Warn().Int("transitions", len(ch.items)).
			Msg("job outcomes arrived as the worker shut down; they are not written and their jobs will run again")
		c.told(ch.items, nil, c.Now())
		close(ch.done)
	}
}

// writeLoop is one writer: it waits for a full chunk, the flush interval or stop, and writes.
func (c *Completer) writeLoop() {
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
			return
		}
		if wait := c.flush(context.Background(), false); wait > 0 {
			select {
			case <-time.After(wait):
			case <-c.stop:
			}
		}
		c.mu.Lock()
		idle := c.idleLocked()
		c.mu.Unlock()
		if !idle {
			signal(c.arm)
		}
	}
}

// final writes what is left at shutdown, retrying for a few seconds. What it cannot write is
// given up: the handlers waiting for it are released, and their jobs, whose entries stay
// pending, are recovered after the visibility timeout.
func (c *Completer) final() {
	deadline := time.Now().Add(finalWriteTime)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		wait := c.flush(ctx, true)
		cancel()
		c.mu.Lock()
		left := c.pending
		c.mu.Unlock()
		if wait == 0 || left == 0 {
			return
		}
		if time.Now().Add(wait).After(deadline) {
			c.log.Error().Int("transitions", left).Msg("could not write job outcomes before shutdown; their jobs will be recovered")
			c.mu.Lock()
			chunks := c.chunks
			c.chunks, c.pending = nil, 0
			c.mu.Unlock()
			for _, ch := range chunks {
				c.told(ch.items, nil, c.Now())
				close(ch.done)
			}
			return
		}
		time.Sleep(wait)
	}
}

// finalWriteTime bounds how long a worker that shuts down keeps trying to write outcomes.
const finalWriteTime = 5 * time.Second

// Close writes what is left and stops the completer; it is safe to call once. Outcomes that
// arrive later are not written (see Finish).
func (c *Completer) Close() {
	close(c.stop)
	<-c.done
}

// flush writes the queued chunks one after another, and the start marks older than one
// interval (all of them when all is true). It releases each chunk's handlers as soon as all
// of its outcomes are written. When a write fails it stops and returns how long to wait
// before the next try. The chunk goes back to the head with its handlers still waiting. So
// their entries stay held and their leases renewed until their outcomes are in Redis.
func (c *Completer) flush(ctx context.Context, all bool) (wait time.Duration) {
	first := true
	for {
		c.mu.Lock()
		var ch *chunk
		if len(c.chunks) > 0 {
			ch = c.chunks[0]
			c.chunks = c.chunks[1:]
			c.pending -= len(ch.items)
			if len(c.chunks) > 1 || (len(c.chunks) == 1 && len(c.chunks[0].items) >= c.maxBatch) {
				signal(c.full) // another writer may take the next full chunk meanwhile
			}
		}
		var batch []jobstate.Transition
		if first {
			batch = c.dueStartsLocked(all)
		}
		c.mu.Unlock()
		first = false
		if ch == nil && len(batch) == 0 {
			return 0
		}
		if ch != nil {
			batch = append(batch, ch.items...)
		}
		retry, err := c.write(ctx, batch)
		if err == nil {
			c.wrote()
		}
		if len(retry) == 0 {
			if ch != nil {
				close(ch.done)
			}
			if err != nil {
				return c.failed(err, 0) // only start marks failed: they are not sent again
			}
			continue
		}
		c.mu.Lock()
		c.chunks = append([]*chunk{{items: retry, done: ch.done}}, c.chunks...)
		c.pending += len(retry)
		c.mu.Unlock()
		return c.failed(err, len(retry))
	}
}

// dueStartsLocked takes the start marks noted at least an interval ago (all of them when all
// is true), and returns their transitions.
func (c *Completer) dueStartsLocked(all bool) []jobstate.Transition {
	var batch []jobstate.Transition
	now := time.Now()
	k := 0
	for ; k < len(c.starts); k++ {
		m := c.starts[k]
		if m.state == markQueued {
			if !all && now.Sub(m.noted) < c.interval {
				break // the rest were noted later
			}
			batch = append(batch, jobstate.Start(m.Q, jobstate.StartParams{ID: m.ID, Entry: m.Entry, Attempt: m.Attempt,
				At: time.UnixMilli(m.At)}))
			// Not dropLocked: its compaction would rewrite the list under this walk.
			m.state = markDropped
			c.live--
		}
		c.starts[k] = nil // the attempt's memory is not held here
	}
	c.starts = c.starts[k:]
	if len(c.starts) == 0 {
		c.starts = nil // the next append starts a fresh array, not behind the popped head
	}
	return batch
}

// failed records a failed write of n outcomes and returns how long to wait before the next try.
func (c *Completer) failed(err error, n int) time.Duration {
	step := c.outage.Failed(time.Now())
	if step.Log {
		c.log.Error().Err(err).Int("outcomes_waiting", n).Int("tries", step.Tries).
			Dur("failing_for", step.FailingFor.Round(time.Millisecond)).Dur("retry_in", step.Wait.Round(time.Millisecond)).
			Msg("cannot write job outcomes; their jobs stay held and new jobs wait until Redis takes writes again")
	}
	if step.Log && step.Tries == 1 && c.OnTrouble != nil {
		c.OnTrouble(true) // the spell begins
	}
	return step.Wait
}

// wrote records a write that went through, which ends a spell of failures.
func (c *Completer) wrote() {
	lasted, ended := c.outage.OK(time.Now())
	if !ended {
		return
	}
	lasted = lasted.Round(time.Millisecond)
	c.log.Info().Dur("after", lasted).
		Msg("reconnected to Redis after " + lasted.String() + "; job outcomes written again, reading new jobs")
	if c.OnTrouble != nil {
		c.OnTrouble(false)
	}
}

// refusedAgain counts one more refusal of entry's outcome and reports whether it was the
// last allowed (maxPermanentTries): the entry is then forgotten and its outcome given up.
func (c *Completer) refusedAgain(entry string) bool {
	c.refusedMu.Lock()
	defer c.refusedMu.Unlock()
	if c.refused == nil {
		c.refused = map[string]int{}
	}
	if c.refused[entry]++; c.refused[entry] < maxPermanentTries {
		return false
	}
	delete(c.refused, entry)
	return true
}

// write runs finish.lua for batch (one call per queue or partition and maxBatch transitions,
// pipelined). It returns the transitions to try again and the first error of a call, if any.
// Every error is worth another try except one that says the request itself is wrong (see
// Permanent). A transition that met such an error maxPermanentTries times is given up. Its
// job is left to recovery. Start marks are never sent again. They are only informational (the
// outcome carries started_at), and one sent late must not land after the outcome.
func (c *Completer) write(ctx context.Context, batch []jobstate.Transition) ([]jobstate.Transition, error) {
	// Group by stream, keeping order; a batch usually has one, which needs no copy.
	groups := [][]jobstate.Transition{batch}
	for i := 1; i < len(batch); i++ {
		if batch[i].Queue.Stream() != batch[0].Queue.Stream() {
			groups = groupByQueue(batch)
			break
		}
	}
	var chunks [][]jobstate.Transition
	cfg := c.cfg
	if cfg.Events == events.None {
		// Known once per client. Until then (Redis unreachable at start) it is asked again at
		// most once a second. So a worker that starts before Redis still comes to publish
		// events.
		cfg.Events = c.store.Events(ctx)
	}
	for _, ts := range groups {
		for len(ts) > 0 {
			n := min(len(ts), c.maxBatch)
			chunks = append(chunks, ts[:n])
			ts = ts[n:]
		}
	}
	groups = chunks
	rdb := c.Replicas.Writer(c.store.Client())
	answers := c.store.Finish(ctx, jobstate.FinishParams{Config: cfg, Chunks: chunks, Via: rdb})
	var at time.Time
	if c.OnWritten != nil || c.History != nil {
		at = c.Now()
	}

	var retry, gaveUp []jobstate.Transition
	var first error
	for i, a := range answers {
		codes, err := a.Codes, a.Err
		if err != nil {
			first = cmp.Or(first, err)
			for _, t := range groups[i] {
				if t.Op == jobstate.OpStart {
					continue
				}
				if Permanent(err) && c.refusedAgain(t.Entry) {
					transitionEvent(c.log.Error().Err(err), t).
						Msg("giving up on a job outcome that cannot be written; the job will be recovered")
					gaveUp = append(gaveUp, t)
					continue
				}
				retry = append(retry, t)
			}
			continue
		}
		c.told(groups[i], codes, at)
		c.History.Written(groups[i], codes, at)
		for k, code := range codes {
			// Refusals are counted by finish.lua in the queue's stats (refused). A start
			// mark that came too late (the job finished or moved on) is not a refusal.
			if t := groups[i][k]; code == script.Refused && t.Op != jobstate.OpStart {
				transitionEvent(c.log.Info(), t).Str("entry", t.Entry).
					Msg("transition refused: the job moved on (recovered, canceled or finished elsewhere)")
			}
		}
	}
	c.told(gaveUp, nil, at)
	if first == nil {
		c.Replicas.Observe(rdb, len(batch), c.log)
	}
	return retry, first
}

// transitionEvent adds the fields of every job line (queue, job_id, type, attempt) and the
// transition's op.
func transitionEvent(e *zerolog.Event, t jobstate.Transition) *zerolog.Event {
	return e.Str("queue", t.Queue.Name()).Str("job_id", t.ID).Str("type", t.Type).Int("attempt", t.Attempt).
		Stringer("op", t.Op)
}

// groupByQueue splits transitions by the stream of their entries, keeping their order within
// each. The partitions of a queue are queues of their own here, as one script call touches
// one hash slot. So are its priority levels, as finish.lua acknowledges the entries of one
// stream (keys.Queue.AtLevel).
func groupByQueue(batch []jobstate.Transition) [][]jobstate.Transition {
	index := map[string]int{}
	var groups [][]jobstate.Transition
	for _, t := range batch {
		i, ok := index[t.Queue.Stream()]
		if !ok {
			i = len(groups)
			index[t.Queue.Stream()] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], t)
	}
	return groups
}

// Permanent reports whether err says the request itself is wrong, so that sending it again
// cannot help. Such errors are a key of the wrong type, an ACL that refuses a command, or the
// worker's own client closed. Every other error may pass by itself. Examples are a connection
// error or timeout, an out-of-memory refusal, and a server that is loading, busy or read-only
// after a failover. So is a cluster that is resharding. Redis's generic ERR replies (a
// script's error among them) are retried. The check this replaced listed "ERR". But it went
// through a go-redis prefix test that drops a leading "ERR " first, so they never matched.
func Permanent(err error) bool {
	switch rediserr.Classify(err) {
	case rediserr.Closed, rediserr.WrongType, rediserr.NoPerm:
		return true
	}
	return false
}

// told tells OnWritten, if set, about ts.
func (c *Completer) told(ts []jobstate.Transition, codes []script.Code, at time.Time) {
	if c.OnWritten != nil {
		c.OnWritten(ts, codes, at)
	}
}
