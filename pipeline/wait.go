package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
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
	if err := w.c.checkJob(queue, id); err != nil {
		return nil, err
	}
	j, q, err := w.locate(ctx, queue, id)
	if err != nil || j != nil && j.Status.Final() {
		return j, err
	}
	return events.Wait(ctx, w.w, w.reads, q.Events(), id, readyWait, w.job(q, id))
}

// locate returns the partition of queue that holds job id: its events come on that
// partition's channel. In a partitioned queue that takes a read (under the Waiter's bound),
// whose job it returns too.
func (w *Waiter) locate(ctx context.Context, queue, id string) (*Job, keys.Queue, error) {
	if err := w.reads.Acquire(ctx); err != nil {
		return nil, keys.Queue{}, err
	}
	defer w.reads.Release()
	qs, err := w.c.lookup(ctx, queue, id)
	switch {
	case err != nil:
		return nil, keys.Queue{}, err
	case len(qs) == 1:
		return nil, qs[0], nil
	}
	return findJob(ctx, w.c.store, qs, id, w.c.readKeys())
}

// job is how a wait reads job id of q. The first read marks the job watched, so that the
// job-state scripts announce its outcome.
func (w *Waiter) job(q keys.Queue, id string) events.Job[Job] {
	return events.Job[Job]{
		Read: func(ctx context.Context, mark bool) (*Job, error) {
			defer w.nread.Add(1)
			if !mark {
				j, _, err := findJob(ctx, w.c.store, []keys.Queue{q}, id, w.c.readKeys())
				return j, err
			}
			flat, found, err := w.c.store.GetWatched(ctx, q, id)
			if err != nil {
				return nil, fmt.Errorf("get %s/%s: %w", q.Name(), id, err)
			}
			if !found {
				return nil, ErrNotFound
			}
			return jobFromRecord(q.Name(), id, jobstate.DecodeRecord(flat), w.c.readKeys())
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
