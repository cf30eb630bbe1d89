package pipeline

import (
	"context"

	"github.com/conveyorq/conveyor/internal/events"
)

// Follow calls fn with the job as it is, then again each time it changes (its status, attempt
// or progress: Job.Reported), until it is final. Then fn's last call has the final job, and
// Follow returns nil. It returns early with ctx's error when ctx ends, or fn's error when fn
// returns one. It returns ErrNotFound when there is no such job, or its record goes while
// followed.
//
// It learns of changes the way Wait does, from job events with a bounded fallback read. It
// reads the job once per event that names it. So a running job's progress costs a read per
// report written (at most one per 250 ms). Changes between two reads are seen
// together: fn gets the latest state, never a stale one. The start of an attempt is not
// announced. So fn sees in_progress with the attempt's first progress report or outcome. The
// calls of fn run on Follow's goroutine.
func (w *Waiter) Follow(ctx context.Context, queue, id string, fn func(*Job) error) error {
	if err := w.c.checkJob(queue, id); err != nil {
		return err
	}
	_, q, err := w.locate(ctx, queue, id)
	if err != nil {
		return err
	}
	return events.Follow(ctx, w.w, w.reads, q.Events(), id, readyWait, w.job(q, id), changed, fn)
}

// Follow is Waiter.Follow with the Client's own Waiter (see Client.Wait).
func (c *Client) Follow(ctx context.Context, queue, id string, fn func(*Job) error) error {
	c.waiter.once.Do(func() { c.waiter.w = c.NewWaiter() })
	return c.waiter.w.Follow(ctx, queue, id, fn)
}

// changed reports whether b differs from a in what Follow follows.
func changed(a, b *Job) bool {
	if a.Status != b.Status || a.Attempt != b.Attempt || a.Version != b.Version {
		return true
	}
	pa, pb := a.Reported, b.Reported
	if (pa == nil) != (pb == nil) {
		return true
	}
	return pa != nil && *pa != *pb
}
