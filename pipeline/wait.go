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
	reads chan struct{} // a token per read in flight
	nread atomic.Int64  // whole reads done, for tests
}

// NewWaiter returns a Waiter reading jobs through c.
func (c *Client) NewWaiter() *Waiter {
	return &Waiter{c: c, w: events.NewWatcher(c.rdb, events.Config{}), reads: make(chan struct{}, maxWaitReads)}
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
	if err := w.acquire(ctx); err != nil {
		return nil, err
	}
	p, err := c.pub.Partitions(ctx, queue, false)
	q := c.pub.Keys(queue)
	if err == nil && p > 1 {
		// Find the job's partition first: its events come on that partition's channel.
		var j *Job
		j, q, err = findJob(ctx, c.store, publish.LookupOrder(c.cfg.Prefix, queue, id, p), id)
		if err == nil && j.Status.Final() {
			w.release()
			return j, nil
		}
	}
	w.release()
	if err != nil {
		return nil, err
	}
	return w.waitOn(ctx, q, id)
}

func (w *Waiter) acquire(ctx context.Context) error {
	select {
	case w.reads <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Waiter) release() { <-w.reads }

// read reads job id of q, maxWaitReads at a time. With mark it also marks the job watched, in
// the same script. The job-state scripts announce a job's outcome only when it is marked. The
// mark stays on the job's hash, so the later reads need not make it again.
func (w *Waiter) read(ctx context.Context, q keys.Queue, id string, mark bool) (*Job, error) {
	if err := w.acquire(ctx); err != nil {
		return nil, err
	}
	defer w.release()
	var j *Job
	var err error
	if mark {
		j, err = getWatchedJob(ctx, w.c.store, q, id)
	} else {
		j, err = getJob(ctx, w.c.store, q, id)
	}
	w.nread.Add(1)
	return j, err
}

// getWatchedJob is getJob that marks the job watched (jobstate.Store.GetWatched).
func getWatchedJob(ctx context.Context, js jobstate.Backend, q keys.Queue, id string) (*Job, error) {
	flat, found, err := js.GetWatched(ctx, q, id)
	return gotJob(q, id, flat, found, err)
}

// status reads the status of job id of q ("" when there is no such job), maxWaitReads at a
// time.
func (w *Waiter) status(ctx context.Context, q keys.Queue, id string) (string, error) {
	if err := w.acquire(ctx); err != nil {
		return "", err
	}
	defer w.release()
	s, err := w.c.store.Status(ctx, q, id)
	if errors.Is(err, jobstate.ErrNoJob) {
		return "", nil
	}
	return s, rediserr.Wrap("get", err)
}

// waitOn is Wait on the partition q that holds the job.
func (w *Waiter) waitOn(ctx context.Context, q keys.Queue, id string) (*Job, error) {
	// Watch before the read: an event sent between a read and the watch would be lost.
	wt := w.w.Watch(ctx, q.Events(), id)
	defer wt.Close()
	// Read once the subscription is confirmed, so that a new subscription does not make every
	// wait that started with it read twice. But wait no longer than readyWait, so that a
	// server whose subscriptions fail still answers; the fallback's reads cover it then.
	wt.WaitReady(ctx, readyWait)
	// The read marks the job watched: its outcome is announced only then (finish.lua), and
	// the outcome is either in this read or announced after it.
	j, err := w.read(ctx, q, id, true)
	if err != nil || j.Status.Final() {
		return j, err
	}
	for {
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-wt.C():
		}
		ev, recheck := wt.Take()
		if !events.Final(ev) {
			if !recheck {
				// It moved on but did not end (a retry, a promotion): nothing to read yet. The
				// job as last read is stale now.
				j = nil
				continue
			}
			// A recheck: most find the job as it was, so ask only its status (one command;
			// a whole read is three).
			now, err := w.status(ctx, q, id)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				continue // Redis unreachable: the next recheck tries again
			}
			if now != "" && !status.Status(now).Final() {
				if j != nil && j.Status != status.Status(now) {
					j = nil
				}
				continue
			}
		}
		got, err := w.read(ctx, q, id, false)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err == nil:
			if j = got; j.Status.Final() {
				return j, nil
			}
		case errors.Is(err, ErrNotFound):
			return nil, err // gone (its retention ended, deleted) while waited for
		default:
			// Redis unreachable: wait on, the next recheck reads again (the first read's
			// error was returned: a wait starts with the job as it is).
			j = nil
		}
	}
}
