package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/publish"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/status"
)

// maxWaitReads bounds the reads a Waiter runs at once. So however many wait, they use few
// Redis connections: a burst of re-reads after a reconnect, or thousands of long polls
// starting together.
const maxWaitReads = 4

// readyWait bounds how long a wait waits for its subscription before its first read.
const readyWait = time.Second

// Waiter waits for jobs to end (Wait). A Waiter holds one subscription to job events per queue
// partition it waits on, shared by all of its waits. It ends it a while (a few tens of
// seconds) after the last. Client.Wait uses the Client's own Waiter. Make one of your own with
// NewWaiter to end its subscriptions with Close (a server shutting down). It is safe for
// concurrent use.
type Waiter struct {
	c     *Client
	w     *events.Watcher
	reads events.Reads // a token per read in flight
	nread atomic.Int64 // whole reads done, for tests
}

// NewWaiter returns a Waiter reading jobs through c.
func (c *Client) NewWaiter() *Waiter {
	return &Waiter{c: c, w: events.NewWatcher(c.rdb, events.Config{}), reads: make(events.Reads, maxWaitReads)}
}

// Close ends the Waiter's subscriptions; its waits still running return when their context
// ends, having read the job once more.
func (w *Waiter) Close() { w.w.Close() }

// clientWaiter is a Client's own Waiter, made on the first Wait.
type clientWaiter struct {
	once sync.Once
	w    *Waiter
}

// Wait returns the job once it is final (completed, failed or canceled), or ErrNotFound when
// there is no such job: see Waiter.Wait. It uses the Client's own Waiter, made on the first
// call, whose subscriptions end a while after its last wait, so the Client needs no Close.
func (c *Client) Wait(ctx context.Context, queue, id string) (*Job, error) {
	c.waiter.once.Do(func() { c.waiter.w = c.NewWaiter() })
	return c.waiter.w.Wait(ctx, queue, id)
}

// Wait returns the job once it is final (completed, failed or canceled), or ErrNotFound when
// there is no such job. It learns of the job's changes from the events the job-state scripts
// publish. That is one subscription per queue partition for all of the Waiter's waits. It
// reads the job when an event says it ended. So a wait costs Redis a read when it starts and
// one when the job ends, whatever it lasts. Events may be missed (a dropped connection, a
// worker of an older version). So it also reads the job again when its subscription is made
// again, and every few seconds. Those reads are at most events.DefaultFallbackRate a second
// for all of the Waiter's waits together. Each is an HGET of the job's status, and a whole
// read only when that says it ended. A Waiter runs at most 4 reads at once, so any number of
// waits use few Redis connections.
//
// When ctx ends first, Wait returns ctx's error with the job as it last read it. The job is
// nil when an event said the job changed since (read it again with Get).
func (w *Waiter) Wait(ctx context.Context, queue, id string) (*Job, error) {
	c := w.c
	if err := c.checkJob(queue, id); err != nil {
		return nil, err
	}
	if err := w.reads.Acquire(ctx); err != nil {
		return nil, err
	}
	p, err := c.pub.Partitions(ctx, queue, false)
	q := c.pub.Keys(queue)
	if err == nil && p > 1 {
		// Find the job's partition first: its events come on that partition's channel.
		var j *Job
		j, q, err = findJob(ctx, c.store, publish.LookupOrder(c.cfg.Prefix, queue, id, p), id)
		if err == nil && j.Status.Final() {
			w.reads.Release()
			return j, nil
		}
	}
	w.reads.Release()
	if err != nil {
		return nil, err
	}
	return w.waitOn(ctx, q, id)
}

// waitOn is Wait on the partition q that holds the job (events.Wait).
func (w *Waiter) waitOn(ctx context.Context, q keys.Queue, id string) (*Job, error) {
	return events.Wait(ctx, w.w, w.reads, q.Events(), id, readyWait, w.job(q, id))
}

// job is how a wait reads job id of q. The first read marks the job watched, so that the
// job-state scripts announce its outcome (getWatchedJob).
func (w *Waiter) job(q keys.Queue, id string) events.Job[Job] {
	return events.Job[Job]{
		Read: func(ctx context.Context, mark bool) (*Job, error) {
			defer w.nread.Add(1)
			if mark {
				return getWatchedJob(ctx, w.c.store, q, id)
			}
			return getJob(ctx, w.c.store, q, id)
		},
		Status: func(ctx context.Context) (string, error) {
			s, err := w.c.store.Status(ctx, q, id)
			if errors.Is(err, jobstate.ErrNoJob) {
				return "", nil
			}
			return s, rediserr.Wrap("get", err)
		},
		StatusOf: func(j *Job) status.Status { return j.Status },
		NotFound: ErrNotFound,
	}
}

// getWatchedJob is getJob that marks the job watched (jobstate.Store.GetWatched).
func getWatchedJob(ctx context.Context, js jobstate.Backend, q keys.Queue, id string) (*Job, error) {
	flat, found, err := js.GetWatched(ctx, q, id)
	return gotJob(q, id, flat, found, err)
}
