package pipeline

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/stream"
)

// ErrJobCanceled is the cause (context.Cause) of a handler's context when its job is canceled
// while it runs (Client.Cancel, Inspector.Cancel, `conveyor cancel`,
// DELETE /v1/queues/{queue}/jobs/{id}). The worker learns it from the queue's job events, in
// milliseconds. When the worker missed that event (its subscription was down), its next lease
// renewal finds the job's entry gone and the cause is stream.ErrLeaseLost instead. Either way
// the job stays canceled: whatever the handler returns afterwards is discarded, never retried
// nor failed.
var ErrJobCanceled = errors.New("pipeline: job canceled")

// Cancel's path to a running handler.
//
// cancel.lua marks the job canceled, deletes its stream entry and announces "canceled" on the
// queue's events channel. Each worker listens on the channels of the partitions it reads, one
// subscription per channel (events.Watcher), and keeps its running jobs by id (register, in
// settleAfter). A canceled event of a running job is checked against the job's record (one
// HGET). A message on the channel is untrusted, and a replayed job may run under the same id.
// Then the job's delivery is revoked (stream.Subscriber.Revoke). That cancels the handler's
// context with ErrJobCanceled, and outcome writes nothing.
//
// Missed events are made up for by the lease renewal: the canceled job's entry is gone, so
// the renewal cancels the context with stream.ErrLeaseLost. It runs every third of the
// visibility timeout, and at once after the subscription was made again (ListenGaps), since
// that is when events were lost. A cancel's event may come before its job is registered (it
// was read, not yet handed to its handler). Such an event is kept for a lease interval in
// recent, which register looks at.

// recentMax bounds the canceled events kept of jobs that do not run here (most cancels are of
// queued or scheduled jobs, which no worker runs).
const recentMax = 4096

// runKey names a job of a partition: its events channel and its id.
type runKey struct{ channel, id string }

// runJob is a running job's delivery, for Revoke.
type runJob struct {
	id       string
	q        *keys.Queue // its partition (at the level it was read from)
	sub      *stream.Subscriber
	stream   string
	entry    string
	next     *runJob // another running job of the same id, in another queue (rare)
	typ      string  // its type, and when it was handed to its handler: for the heartbeat
	start    time.Time
	checking bool // a check of its record is under way (cancels.mu)
}

// cancels is a worker's running jobs and recent cancels.
type cancels struct {
	w *Worker

	mu sync.Mutex
	// running is keyed by job id alone, which spares every job the making of its channel's
	// name. Ids are unique within a queue, and jobs of one id in several queues chain.
	running map[string]*runJob
	recent  map[runKey]time.Time // canceled events of jobs not running here, by arrival
	order   []runKey             // recent's keys, oldest first
}

func newCancels(w *Worker) *cancels {
	return &cancels{w: w, running: map[string]*runJob{}, recent: map[runKey]time.Time{}}
}

// keepRecent is how long a canceled event of a job not running here is kept: a lease
// interval. After that a renewal has found the job's entry gone anyway.
func (c *cancels) keepRecent() time.Duration { return c.w.cfg.VisibilityTimeout / 3 }

// register notes msg's job as running until done; a cancel heard just before is acted on now.
func (c *cancels) register(q *keys.Queue, sub *stream.Subscriber, msg *message.Message) *runJob {
	rj := &runJob{id: msg.UUID, q: q, sub: sub, stream: msg.Metadata[stream.StreamKey], entry: msg.Metadata[stream.EntryIDKey],
		typ: msg.Metadata[MetaType], start: c.w.cfg.Now()} // the heartbeat lists it
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

// done forgets a job register noted, once its attempt has ended.
func (c *cancels) done(rj *runJob) {
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

// heard returns the events function of a partition's channel: it runs on the channel's
// receiving goroutine, so the checks go on their own.
func (c *cancels) heard(channel string) func([]events.Event) {
	return func(evs []events.Event) {
		c.mu.Lock()
		defer c.mu.Unlock()
		now := time.Now()
		for _, e := range evs {
			if e.Status != string(StatusCanceled) {
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
				}
			}
			if !found {
				c.rememberLocked(runKey{channel, e.ID}, now)
			}
		}
	}
}

// rememberLocked keeps k's cancel for keepRecent, dropping the oldest past recentMax.
func (c *cancels) rememberLocked(k runKey, now time.Time) {
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
func (c *cancels) check(rj *runJob) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.w.store.Status(ctx, *rj.q, rj.id)
	c.mu.Lock()
	rj.checking = false
	c.mu.Unlock()
	switch {
	case err != nil:
		c.w.log.Warn().Err(err).Str("queue", rj.q.Name()).Str("job_id", rj.id).
			Msg("could not read a job announced canceled; its handler is stopped at the next lease renewal")
	case Status(st) == StatusCanceled:
		if rj.sub.Revoke(rj.stream, rj.entry, ErrJobCanceled) {
			c.w.log.Debug().Str("queue", rj.q.Name()).Str("job_id", rj.id).Msg("job canceled while it ran; its handler's context is cancelled")
		}
	}
}
