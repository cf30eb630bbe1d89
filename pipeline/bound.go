package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/publish"
)

// ErrQueueFull is wrapped by the error of a job that a bounded queue refused: the queue held
// its max_waiting jobs that are not running and not finished (QueueSettings.MaxWaiting) and
// its full policy is reject, or the job's limit key held its max_waiting_per_key unfinished
// jobs (QueueSettings.MaxWaitingPerKey; QueueFullError.Key). Nothing of that job was written. errors.As with a
// *QueueFullError gives the queue, the bound and when to try again (docs/OPERATIONS.md,
// "Bounded queues").
var ErrQueueFull = errors.New("pipeline: queue full")

// Full policies of a bounded queue (QueueSettings.FullPolicy).
const (
	// FullReject refuses a new job at the bound (ErrQueueFull). It is the default.
	FullReject = publish.PolicyReject
	// FullDropOldest cancels the oldest ready job at the bound and admits the new one.
	FullDropOldest = publish.PolicyDropOldest
)

// The bounds of the estimate a refused publish carries (QueueFullError.RetryAfter).
const (
	MinRetryAfter = time.Second
	MaxRetryAfter = time.Minute
)

// QueueFullError is the error of one job that a bounded queue refused. It wraps ErrQueueFull.
type QueueFullError struct {
	// Queue is the queue that refused.
	Queue string
	// Key is the refused job's limit key (WithLimitKey) when the bound that held is the one on
	// each key's unfinished jobs (QueueSettings.MaxWaitingPerKey); empty when it is the
	// queue's (QueueSettings.MaxWaiting).
	Key string
	// MaxWaiting is the bound that held: the queue's, or its partition's share of it in a
	// partitioned queue (ceil(max_waiting/partitions)); with Key, the key's bound
	// (max_waiting_per_key, or its partition's share).
	MaxWaiting int
	// Waiting is how many jobs waited where the job was refused; with Key, how many
	// unfinished jobs of the key there were.
	Waiting int64
	// RetryAfter is when a publish may find room: the jobs over the bound divided by the
	// queue's drain rate over the last minute, between MinRetryAfter and MaxRetryAfter.
	RetryAfter time.Duration
	// Task is the refused job's index in EnqueueBatch's tasks; 0 for Enqueue.
	Task int
}

func (e *QueueFullError) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("%s: %s holds %d unfinished jobs of limit key %q, its bound per key is %d; retry after %s",
			ErrQueueFull, e.Queue, e.Waiting, e.Key, e.MaxWaiting, e.RetryAfter)
	}
	return fmt.Sprintf("%s: %s holds %d waiting jobs, its bound is %d; retry after %s",
		ErrQueueFull, e.Queue, e.Waiting, e.MaxWaiting, e.RetryAfter)
}

// Unwrap makes errors.Is(err, ErrQueueFull) hold.
func (e *QueueFullError) Unwrap() error { return ErrQueueFull }

// QueueFullErrors returns the refusals err holds, in order: EnqueueBatch joins one per job a
// bounded queue refused, each with its task's index (QueueFullError.Task).
func QueueFullErrors(err error) []*QueueFullError {
	var out []*QueueFullError
	var walk func(error)
	walk = func(e error) {
		if qf, ok := e.(*QueueFullError); ok {
			out = append(out, qf)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// RetryAfter returns the shortest RetryAfter of the refusals err holds (QueueFullErrors), and
// whether it holds any.
func RetryAfter(err error) (time.Duration, bool) {
	fulls := QueueFullErrors(err)
	if len(fulls) == 0 {
		return 0, false
	}
	best := fulls[0].RetryAfter
	for _, f := range fulls[1:] {
		best = min(best, f.RetryAfter)
	}
	return best, true
}

// bound is the jobstate.Bound of a publish to a queue of defaults d (nil when unbounded):
// what a drop-oldest's cancel needs comes from the Client's settings, and the events mode only
// when it may drop.
func (c *Client) bound(ctx context.Context, d publish.Defaults) *jobstate.Bound {
	if !d.Bounded() {
		return nil
	}
	b := &jobstate.Bound{MaxWaiting: d.MaxWaiting, DropOldest: d.DropOldest, MaxWaitingPerKey: d.MaxWaitingPerKey}
	if d.DropOldest && d.MaxWaiting > 0 {
		b.Retention, b.MinRetention, b.Events = c.cfg.Retention, c.cfg.MinRetention, c.store.Events(ctx)
	}
	return b
}

// fullError is the refusal of task i, of limit key key, published to queue of p partitions
// under bound, that a script answered with row (script.Full). Its RetryAfter is
// fillRetryAfter's to set.
func fullError(queue, key string, row jobstate.Created, bound *jobstate.Bound, p, i int) *QueueFullError {
	d := publish.Defaults{MaxWaiting: bound.MaxWaiting, MaxWaitingPerKey: bound.MaxWaitingPerKey}
	if row.KeyFull {
		return &QueueFullError{Queue: queue, Key: key, Waiting: row.Waiting, Task: i, MaxWaiting: d.PerKeyPerPartition(p)}
	}
	return &QueueFullError{Queue: queue, Waiting: row.Waiting, Task: i, MaxWaiting: d.PerPartition(p)}
}

// full is fullError with its RetryAfter, for a publish of one job.
func (c *Client) full(ctx context.Context, queue, key string, row jobstate.Created, bound *jobstate.Bound, p, i int) error {
	f := fullError(queue, key, row, bound, p, i)
	c.fillRetryAfter(ctx, queue, []*QueueFullError{f})
	return f
}

// fillRetryAfter sets the RetryAfter of the refusals fulls, of queue, from its drain rate: the
// attempts its workers finished over the last minute (the history's fine buckets). One read
// for them all, made only when a job was refused. A failed read leaves the cap.
func (c *Client) fillRetryAfter(ctx context.Context, queue string, fulls []*QueueFullError) {
	if len(fulls) == 0 {
		return
	}
	var drained int64
	now := time.Now()
	r, _ := engine.ResolutionOf(HistoryStepFine)
	_, ks := engine.HistoryKeys(c.cfg.Prefix, queue, r, now.Add(-time.Minute), now)
	if rows, err := c.store.ReadHistory(ctx, ks); err == nil {
		for _, f := range rows {
			b := engine.ReadBucket(f)
			drained += b.Completed + b.Failed + b.Retried
		}
	}
	for _, f := range fulls {
		f.RetryAfter = retryAfter(f.Waiting-int64(f.MaxWaiting)+1, drained, time.Minute)
	}
}

// retryAfter is how long over jobs take to drain at drained jobs per window, rounded up to a
// second, within MinRetryAfter..MaxRetryAfter.
func retryAfter(over, drained int64, window time.Duration) time.Duration {
	if drained <= 0 {
		return MaxRetryAfter
	}
	d := time.Duration(max(1, over)) * window / time.Duration(drained)
	d = (d + time.Second - 1).Truncate(time.Second)
	return min(max(d, MinRetryAfter), MaxRetryAfter)
}
