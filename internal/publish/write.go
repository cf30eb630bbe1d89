package publish

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/status"
)

// batchChunk bounds the jobs one enqueue script call creates, and batchBytes the payload bytes
// it carries, so a huge batch does not block Redis in one long script.
const (
	batchChunk = 100
	batchBytes = 4 << 20
)

// ClosedRetryFor bounds how long a publish writes again jobs that a closed layout refused. A
// change of the partition count keeps the old layout closed and the new one not yet open for
// a few round trips. Longer means a change stopped half-way (CreateQueue again repairs it).
const ClosedRetryFor = 5 * time.Second

// Settle is how the caller of Publish takes what the scripts answered, job by job in the
// order written. Each function gets the job's index in the caller's njs.
type Settle struct {
	// Created takes enqueue.lua's row for job i (or enqueue1.lua's, as one row). It returns
	// the error of a row of script.Conflict, nil for any other.
	Created func(i int, row jobstate.Created) error
	// Debounced takes debounce.lua's answer for job i, which has a debounce key.
	Debounced func(i int, d jobstate.Debounced)
	// Done ends a try whose calls all answered, before the jobs a closed layout refused are
	// sent again. The caller reads there the jobs that existed (script.Exists, UniqueHeld). Its
	// error ends the publish.
	Done func() error
	// Bound is the queue's bound on its waiting jobs, MaxWaiting and MaxWaitingPerKey of the
	// whole queue: each partition's is its share (Defaults.PerPartition, PerKeyPerPartition).
	// Nil, or both 0: none.
	Bound *jobstate.Bound
}

// partitionBound is s.Bound for each of n partitions, nil when there is none.
func (s *Settle) partitionBound(n int) *jobstate.Bound {
	if s.Bound == nil || (s.Bound.MaxWaiting <= 0 && s.Bound.MaxWaitingPerKey <= 0) {
		return nil
	}
	b := *s.Bound
	d := Defaults{MaxWaiting: b.MaxWaiting, MaxWaitingPerKey: b.MaxWaitingPerKey}
	b.MaxWaiting, b.MaxWaitingPerKey = d.PerPartition(n), d.PerKeyPerPartition(n)
	return &b
}

// One writes plain job nj (jobstate.NewJob.Plain) to queue of n partitions, n as the caller
// read it (Route). It is the most common publish, without Publish's slices: the one-job
// script, sent again like Publish does when a closed layout refuses it. Under bound (nil:
// none; it must not drop, OneBounded) its partition's share applies.
func (p *Publisher) One(ctx context.Context, js jobstate.Backend, queue string, n int, nj *jobstate.NewJob, now time.Time, bound *jobstate.Bound) (jobstate.Created, error) {
	start := time.Now()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		row, err := p.enqueue1(ctx, js, p.Partition(queue, nj, n), nj, now, (&Settle{Bound: bound}).partitionBound(n))
		if !errors.Is(err, jobstate.ErrClosed) {
			return row, err
		}
		if err := p.ClosedWait(ctx, queue, start, wait, 1); err != nil {
			return jobstate.Created{}, err
		}
		if n, err = p.Partitions(ctx, queue, true); err != nil {
			return jobstate.Created{}, err
		}
	}
}

// OneBounded reports whether a plain job may go with the one-job script under bound (nil:
// none): the script refuses at a bound, but only enqueue.lua drops.
func OneBounded(bound *jobstate.Bound) bool {
	return bound == nil || bound.MaxWaiting <= 0 || !bound.DropOldest
}

// enqueue1 creates a plain job with Store.Enqueue1 in q, the queue or the partition it goes
// to, under q's bound (nil: none).
func (p *Publisher) enqueue1(ctx context.Context, js jobstate.Backend, q keys.Queue, nj *jobstate.NewJob, now time.Time, bound *jobstate.Bound) (jobstate.Created, error) {
	queue := q.Name()
	if err := p.Register(ctx, queue); err != nil {
		return jobstate.Created{}, err
	}
	var row jobstate.Created
	var err error
	// A plain job has no limit key: only the queue's bound applies to it.
	if bound != nil && bound.MaxWaiting > 0 {
		row, err = js.Enqueue1Bounded(ctx, q, now, nj, bound.MaxWaiting)
	} else {
		row, err = js.Enqueue1(ctx, q, now, nj)
	}
	if err != nil {
		return row, fmt.Errorf("enqueue to %s: %w", queue, err)
	}
	return row, nil
}

// Publish writes prepared jobs njs to queue in the layout of n partitions, n as the caller
// read it (Route), and hands what the scripts answered to s. Some jobs are refused because
// their partition is closed (its count changed: Inspector.CreateQueue). They are written
// again after the count is read again, with a short backoff, for up to ClosedRetryFor. So no
// job is written to a layout that no worker of the new count reads. The error is the first
// that ends the publish, or the conflicts that Settle.Created returned, joined (a try's
// together).
func (p *Publisher) Publish(ctx context.Context, js jobstate.Backend, queue string, n int, njs []jobstate.NewJob, now time.Time, s Settle) error {
	var idx []int // the indexes of the jobs still to write; nil: all of them
	var conflicts []error
	start := time.Now()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		sn := njs
		if idx != nil {
			sn = make([]jobstate.NewJob, len(idx))
			for k, i := range idx {
				sn[k] = njs[i]
			}
		}
		closed, conflict, err := p.publishOnce(ctx, js, queue, n, sn, idx, now, s)
		if err != nil {
			return err
		}
		if conflict != nil {
			conflicts = append(conflicts, conflict)
		}
		if len(closed) == 0 {
			return errors.Join(conflicts...)
		}
		if idx != nil {
			for k, i := range closed {
				closed[k] = idx[i]
			}
		}
		idx = closed
		if err := p.ClosedWait(ctx, queue, start, wait, len(idx)); err != nil {
			return err
		}
		if n, err = p.Partitions(ctx, queue, true); err != nil {
			return err
		}
	}
}

// ClosedWait is what a publish that a closed layout refused does before it tries again, from
// start on. It drops queue's cached count, so the next try reads it, and waits wait. It
// refuses with Config.ErrBusy once ClosedRetryFor has passed.
func (p *Publisher) ClosedWait(ctx context.Context, queue string, start time.Time, wait time.Duration, jobs int) error {
	p.Forget(queue)
	if time.Since(start) > ClosedRetryFor {
		return fmt.Errorf("enqueue to %s: %w: %d jobs refused for %s since its partition count is being changed; if no change runs now, one stopped half-way: run queues create with the count again",
			queue, p.cfg.ErrBusy, jobs, ClosedRetryFor)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// publishOnce is one try of Publish over n partitions, of njs, which are the caller's jobs
// idx (all of them when idx is nil). A single plain job goes with the one-job script: it
// costs Redis half, and a router's publish often is one job. Others go with
// enqueuePrepared. It returns the indexes in njs of the jobs refused by a closed partition,
// and the try's conflicts.
func (p *Publisher) publishOnce(ctx context.Context, js jobstate.Backend, queue string, n int, njs []jobstate.NewJob, idx []int, now time.Time, s Settle) (closed []int, conflict, err error) {
	if len(njs) == 1 && njs[0].Plain(now) && OneBounded(s.Bound) {
		row, err := p.enqueue1(ctx, js, p.Partition(queue, &njs[0], n), &njs[0], now, s.partitionBound(n))
		if errors.Is(err, jobstate.ErrClosed) {
			return []int{0}, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		conflict = s.Created(caller(idx, 0), row)
		return nil, conflict, s.Done()
	}
	return p.enqueuePrepared(ctx, js, queue, n, njs, idx, now, s)
}

// caller is the index in the caller's jobs of job k of a try over its jobs idx.
func caller(idx []int, k int) int {
	if idx == nil {
		return k
	}
	return idx[k]
}

// call is one script call of enqueuePrepared: njs[lo:hi] with enqueue.lua, or njs[lo] alone
// with debounce.lua.
type call struct {
	lo, hi   int
	created  *jobstate.Pending[[]jobstate.Created]
	debounce *jobstate.Pending[jobstate.Debounced]
}

// enqueuePrepared writes validated jobs with enqueue.lua, chunked and pipelined: jobs of n > 1
// partitions are grouped by partition, each group chunked, all chunks in one pipeline.
// It returns the indexes in njs of those a closed partition refused (see Publish).
func (p *Publisher) enqueuePrepared(ctx context.Context, js jobstate.Backend, queue string, n int, njs []jobstate.NewJob, idx []int, now time.Time, s Settle) ([]int, error, error) {
	if err := p.Register(ctx, queue); err != nil {
		return nil, nil, err
	}
	total := len(njs)
	// order[k] is the index in njs of the k-th job written; njs is reordered alike, so that
	// each partition's jobs are contiguous.
	var order, part []int // part[k]: the partition of njs[k], when n > 1
	if n > 1 {
		order, njs, part = byPartition(njs, n)
	}
	at := func(k int) int {
		if order == nil {
			return k
		}
		return order[k]
	}

	bound := s.partitionBound(n)
	b := js.Batch()
	var buf [4]call // most publishes make a call or a few: no allocation for them
	calls := buf[:0]
	for lo := 0; lo < len(njs); {
		q := p.Partition(queue, &njs[lo], n)
		if njs[lo].Debounce != "" {
			// One debounce.lua call per debounced job, in the batch's order. One key's calls
			// share a slot, so a pipeline keeps their order. A later task of the same key
			// joins the job of an earlier one.
			calls = append(calls, call{lo: lo, hi: lo + 1, debounce: b.Debounce(q, &njs[lo])})
			lo++
			continue
		}
		hi, bytes := lo, 0
		for hi < len(njs) && hi-lo < batchChunk && (hi == lo || bytes+len(njs[hi].Payload) <= batchBytes) &&
			(n <= 1 || part[hi] == part[lo]) && njs[hi].Debounce == "" {
			bytes += len(njs[hi].Payload)
			hi++
		}
		calls = append(calls, call{lo: lo, hi: hi, created: b.EnqueueBounded(q, now, njs[lo:hi], bound)})
		lo = hi
	}

	if err := b.Exec(ctx); err != nil {
		return nil, nil, fmt.Errorf("enqueue to %s: %w", queue, rediserr.Wrap("enqueue", err))
	}
	var closed []int
	var conflicts []error
	for _, c := range calls {
		if c.debounce != nil {
			d, err := c.debounce.Result()
			if errors.Is(err, jobstate.ErrClosed) {
				closed = append(closed, at(c.lo))
				continue
			}
			if err != nil {
				return nil, nil, fmt.Errorf("enqueue to %s: %w", queue, err)
			}
			s.Debounced(caller(idx, at(c.lo)), d)
			continue
		}
		rows, err := c.created.Result()
		if errors.Is(err, jobstate.ErrClosed) {
			for k := c.lo; k < c.hi; k++ {
				closed = append(closed, at(k))
			}
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("enqueue to %s: %w", queue, err)
		}
		for k, row := range rows {
			if err := s.Created(caller(idx, at(c.lo+k)), row); err != nil {
				if total > 1 {
					err = fmt.Errorf("task %d: %w", at(c.lo+k), err)
				}
				conflicts = append(conflicts, err)
			}
		}
	}
	if err := s.Done(); err != nil {
		return nil, nil, err
	}
	return closed, errors.Join(conflicts...), nil
}

// Workflow writes workflow nw to queue: to the partition its id routes to, under the count
// read at each try, sent again while a closed layout refuses it. It returns the partition
// written to, and whether the workflow existed. A zero partition says that the error came
// before any write was answered.
func (p *Publisher) Workflow(ctx context.Context, queue string, nw *jobstate.NewWorkflow, now time.Time) (keys.Queue, bool, error) {
	if err := p.Register(ctx, queue); err != nil {
		return keys.Queue{}, false, err
	}
	start := time.Now()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		n, err := p.Partitions(ctx, queue, true)
		if err != nil {
			return keys.Queue{}, false, err
		}
		q := jobstate.PartitionKeys(p.cfg.Prefix, queue, n)[keys.PartitionOf(nw.ID, n)]
		existed, _, err := p.cfg.Store.PublishWorkflow(ctx, q, now, nw)
		if errors.Is(err, jobstate.ErrClosed) {
			if err := p.ClosedWait(ctx, queue, start, wait, len(nw.Tasks)); err != nil {
				return keys.Queue{}, false, err
			}
			continue
		}
		return q, existed, err
	}
}

// Stored is where a job that enqueue.lua created (row.Code script.OK) is, and since when it is
// queued: queued in its stream entry; scheduled (no entry, no time); or queued without an
// entry while it waits for a place in its group's window.
func Stored(row jobstate.Created, nj *jobstate.NewJob, now time.Time) (status.Status, string, time.Time) {
	switch {
	case row.Entry != "":
		return status.Queued, row.Entry, now
	case nj.Group == "" || nj.RunAt.After(now):
		return status.Scheduled, "", time.Time{}
	}
	return status.Queued, "", now
}
