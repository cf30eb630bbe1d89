package events

import (
	"context"
	"errors"
	"time"

	"github.com/conveyorq/conveyor/status"
)

// Reads bounds the reads a waiter runs at once: a token per read in flight. So however many
// wait, they use few Redis connections.
type Reads chan struct{}

// Acquire takes a token, waiting for one until ctx ends.
func (r Reads) Acquire(ctx context.Context) error {
	select {
	case r <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release gives back a token Acquire took.
func (r Reads) Release() { <-r }

// Job is how Wait reads the job it waits for. Wait runs each read under its Reads.
type Job[J any] struct {
	// Read reads the whole job. With mark it also marks the job watched, in the same script:
	// the job-state scripts announce a job's outcome only when it is marked, and the mark
	// stays, so that the later reads need not make it again.
	Read func(ctx context.Context, mark bool) (*J, error)
	// Status reads the job's status alone ("" when there is no such job).
	Status func(ctx context.Context) (string, error)
	// StatusOf is a job's status as read.
	StatusOf func(*J) status.Status
	// NotFound is Read's error when there is no such job.
	NotFound error
}

// Wait waits on channel (the events channel of the partition that holds job id) until the job
// is final, reading it through job under reads. readyWait bounds the wait for the
// subscription before the first read. When ctx ends first, Wait returns ctx's error with the
// job as it last read it, nil when an event said it changed since.
func Wait[J any](ctx context.Context, w *Watcher, reads Reads, channel, id string, readyWait time.Duration, job Job[J]) (*J, error) {
	read := func(ctx context.Context, mark bool) (*J, error) { return readUnder(ctx, reads, job, mark) }
	// Watch before the read: an event sent between a read and the watch would be lost.
	wt := w.Watch(ctx, channel, id)
	defer wt.Close()
	// Read once the subscription is confirmed, so that a new subscription does not make every
	// wait that started with it read twice. But wait no longer than readyWait, so that a
	// server whose subscriptions fail still answers; the fallback's reads cover it then.
	wt.WaitReady(ctx, readyWait)
	// The read marks the job watched: its outcome is announced only then (finish.lua), and
	// the outcome is either in this read or announced after it.
	j, err := read(ctx, true)
	if err != nil || job.StatusOf(j).Final() {
		return j, err
	}
	for {
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-wt.C():
		}
		ev, recheck := wt.Take()
		if !Final(ev) {
			if !recheck {
				// It moved on but did not end (a retry, a promotion): nothing to read yet. The
				// job as last read is stale now.
				j = nil
				continue
			}
			// A recheck: most find the job as it was, so ask only its status (one command;
			// a whole read is three).
			now, err := func() (string, error) {
				if err := reads.Acquire(ctx); err != nil {
					return "", err
				}
				defer reads.Release()
				return job.Status(ctx)
			}()
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				continue // Redis unreachable: the next recheck tries again
			}
			if now != "" && !status.Status(now).Final() {
				if j != nil && job.StatusOf(j) != status.Status(now) {
					j = nil
				}
				continue
			}
		}
		got, err := read(ctx, false)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err == nil:
			if j = got; job.StatusOf(j).Final() {
				return j, nil
			}
		case errors.Is(err, job.NotFound):
			return nil, err // gone (its retention ended, deleted) while waited for
		default:
			// Redis unreachable: wait on, the next recheck reads again (the first read's
			// error was returned: a wait starts with the job as it is).
			j = nil
		}
	}
}

// Follow calls fn with the job as Wait first reads it, then again each time a read finds it
// changed (changed(last, now)), until it is final or fn returns an error. Every wake reads the
// whole job: a progress report is in the job's record, not in the event. It returns ctx's
// error when ctx ends, and job.NotFound when the job goes.
func Follow[J any](ctx context.Context, w *Watcher, reads Reads, channel, id string, readyWait time.Duration, job Job[J],
	changed func(last, now *J) bool, fn func(*J) error) error {
	read := func(ctx context.Context, mark bool) (*J, error) { return readUnder(ctx, reads, job, mark) }
	// As Wait: watch, then read (marking the job watched, so that its outcome is announced).
	wt := w.Watch(ctx, channel, id)
	defer wt.Close()
	wt.WaitReady(ctx, readyWait)
	j, err := read(ctx, true)
	if err != nil {
		return err
	}
	if err := fn(j); err != nil || job.StatusOf(j).Final() {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wt.C():
		}
		wt.Take() // every wake reads: a progress report is in the hash, not in the event
		got, err := read(ctx, false)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, job.NotFound):
			return err
		case err != nil:
			continue // Redis unreachable: the next wake (the fallback's at worst) reads again
		}
		if !changed(j, got) {
			continue
		}
		j = got
		if err := fn(j); err != nil || job.StatusOf(j).Final() {
			return err
		}
	}
}

// readUnder reads the job through job once reads admits it, so that waits share the bound on
// reads in flight.
func readUnder[J any](ctx context.Context, reads Reads, job Job[J], mark bool) (*J, error) {
	if err := reads.Acquire(ctx); err != nil {
		return nil, err
	}
	defer reads.Release()
	return job.Read(ctx, mark)
}
