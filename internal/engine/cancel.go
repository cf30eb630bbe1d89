package engine

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/status"
	"github.com/conveyorq/conveyor/stream"
)

// ErrJobCanceled is the cause of the context of a handler whose job was canceled while it ran;
// package pipeline exports it.
var ErrJobCanceled = errors.New("pipeline: job canceled")

// Cancel's path to a running handler.
//
// cancel.lua marks the job canceled, deletes its stream entry and announces "canceled" on the
// queue's events channel. Each worker listens on the channels of the partitions it reads, one
// subscription per channel (events.Watcher), and keeps its running jobs by id (Register, in
// Loop.settleAfter). A canceled event of a running job is checked against the job's record (one
// HGET). A message on the channel is untrusted, and a replayed job may run under the same id.
// Then the job's delivery is revoked (stream.Subscriber.Revoke). That cancels the handler's
// context with ErrJobCanceled, and the outcome writes nothing.
//
// Missed events are made up for by the lease renewal: the canceled job's entry is gone, so
// the renewal cancels the context with stream.ErrLeaseLost. It runs every third of the
// visibility timeout, and at once after the subscription was made again (ListenGaps), since
// that is when events were lost. A cancel's event may come before its job is registered (it
// was read, not yet handed to its handler). Such an event is kept for a lease interval in
// recent, which Register looks at.

// recentMax bounds the canceled events kept of jobs that do not run here (most cancels are of
// queued or scheduled jobs, which no worker runs).
const recentMax = 4096

// runKey names a job of a partition: its events channel and its id.
type runKey struct{ channel, id string }

// RunJob is a running job's delivery, for Revoke.
type RunJob struct {
	id       string
	q        *keys.Queue // its partition (at the level it was read from)
	sub      *stream.Subscriber
	stream   string
	entry    string
	next     *RunJob // another running job of the same id, in another queue (rare)
	typ      string  // its type, and when it was handed to its handler: for the heartbeat
	start    time.Time
	checking bool // a check of its record is under way (cancels.mu)
	// again: an event came while a check was under way. That check may have read the record
	// before the cancel was written, so another follows it (cancels.mu).
	again bool
}

// Cancels is a worker's running jobs and recent cancels.
type Cancels struct {
	store jobstate.Backend
	log   zerolog.Logger
	now   func() time.Time // the worker's wall clock, for the heartbeat's start times
	// keep is how long a canceled event of a job not running here is kept: a lease
	// interval. After that a renewal has found the job's entry gone anyway.
	keep time.Duration

	mu sync.Mutex
	// running is keyed by job id alone, which spares every job the making of its channel's
	// name. Ids are unique within a queue, and jobs of one id in several queues chain.
	running map[string]*RunJob
	recent  map[runKey]time.Time // canceled events of jobs not running here, by arrival
	order   []runKey             // recent's keys, oldest first
}

// NewCancels returns the running jobs of a worker whose leases are renewed every
// leaseInterval; now is its wall clock.
func NewCancels(store jobstate.Backend, log zerolog.Logger, leaseInterval time.Duration, now func() time.Time) *Cancels {
	return &Cancels{store: store, log: log, now: now, keep: leaseInterval, running: map[string]*RunJob{}, recent: map[runKey]time.Time{}}
}

// keepRecent is how long a canceled event of a job not running here is kept.
func (c *Cancels) keepRecent() time.Duration { return c.keep }

// Register notes msg's job, of type typ, as running until Done; a cancel heard just before is acted on now.
func (c *Cancels) Register(q *keys.Queue, sub *stream.Subscriber, msg *message.Message, typ string) *RunJob {
	rj := &RunJob{id: msg.UUID, q: q, sub: sub, stream: msg.Metadata[stream.StreamKey], entry: msg.Metadata[stream.EntryIDKey],
		typ: typ, start: c.now()} // the heartbeat lists it
	c.mu.Lock()
	rj.next = c.running[rj.id]
	c.running[rj.id] = rj
	if len(c.recent) > 0 {
		k := runKey{q.Events(), rj.id}
		if at, ok := c.recent[k]; ok && time.Since(at) < c.keepRecent() {
			delete(c.recent, k)
			rj.checking = true
			go c.check(rj)
		}
	}
	c.mu.Unlock()
	return rj
}

// Done forgets a job Register noted, once its attempt has ended.
func (c *Cancels) Done(rj *RunJob) {
	c.mu.Lock()
	defer c.mu.Unlock()
	head := c.running[rj.id]
	if head == rj {
		if rj.next == nil {
			delete(c.running, rj.id)
		} else {
			c.running[rj.id] = rj.next
		}
		return
	}
	for p := head; p != nil; p = p.next {
		if p.next == rj {
			p.next = rj.next
			return
		}
	}
}

// Heard returns the events function of a partition's channel: it runs on the channel's
// receiving goroutine, so the checks go on their own.
func (c *Cancels) Heard(channel string) func([]events.Event) {
	return func(evs []events.Event) {
		c.mu.Lock()
		defer c.mu.Unlock()
		now := time.Now()
		for _, e := range evs {
			if e.Status != string(status.Canceled) {
				continue
			}
			found := false
			for rj := c.running[e.ID]; rj != nil; rj = rj.next {
				if rj.q.Events() != channel {
					continue
				}
				found = true
				if !rj.checking {
					rj.checking = true
					go c.check(rj)
				} else {
					rj.again = true
				}
			}
			if !found {
				c.rememberLocked(runKey{channel, e.ID}, now)
			}
		}
	}
}

// rememberLocked keeps k's cancel for keepRecent, dropping the oldest past recentMax.
func (c *Cancels) rememberLocked(k runKey, now time.Time) {
	for len(c.order) > 0 {
		old := c.order[0]
		at, ok := c.recent[old]
		if ok && len(c.recent) < recentMax && now.Sub(at) < c.keepRecent() {
			break
		}
		c.order = c.order[1:]
		if ok {
			delete(c.recent, old)
		}
	}
	if _, ok := c.recent[k]; !ok {
		c.order = append(c.order, k)
	}
	c.recent[k] = now
}

// check reads the job's status and, when it is canceled, revokes its delivery. A failed read
// leaves the job to the lease renewal.
func (c *Cancels) check(rj *RunJob) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.store.Status(ctx, *rj.q, rj.id)
	c.mu.Lock()
	again := rj.again && status.Status(st) != status.Canceled
	rj.checking, rj.again = again, false
	c.mu.Unlock()
	if again {
		defer c.check(rj)
	}
	switch {
	case err != nil:
		c.log.Warn().Err(err).Str("queue", rj.q.Name()).Str("job_id", rj.id).
			Msg("could not read a job announced canceled; its handler is stopped at the next lease renewal")
	case status.Status(st) == status.Canceled:
		if rj.sub.Revoke(rj.stream, rj.entry, ErrJobCanceled) {
			c.log.Debug().Str("queue", rj.q.Name()).Str("job_id", rj.id).Msg("job canceled while it ran; its handler's context is cancelled")
		}
	}
}

// Running is a job that runs now, as the heartbeat lists it.
type Running struct {
	ID, Queue, Type string
	Started         time.Time
}

// Snapshot returns the running jobs, longest-running first, at most limit, and how many more run.
func (c *Cancels) Snapshot(limit int) ([]Running, int) {
	c.mu.Lock()
	all := make([]Running, 0, len(c.running))
	for _, head := range c.running {
		for rj := head; rj != nil; rj = rj.next {
			all = append(all, Running{ID: rj.id, Queue: rj.q.Name(), Type: rj.typ, Started: rj.start})
		}
	}
	c.mu.Unlock()
	slices.SortFunc(all, func(a, b Running) int {
		return cmp.Or(a.Started.Compare(b.Started), strings.Compare(a.Queue, b.Queue), strings.Compare(a.ID, b.ID))
	})
	if len(all) > limit {
		return all[:limit], len(all) - limit
	}
	return all, 0
}
