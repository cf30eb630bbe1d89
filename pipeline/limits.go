package pipeline

import (
	"context"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
)

// maxLimitRate bounds Limit.Rate, and maxLimitInterval Limit.Interval: far beyond what a queue
// runs, and small enough that the scripts' arithmetic in milliseconds stays exact.
const (
	maxLimitRate     = 1_000_000_000
	maxLimitInterval = 7 * 24 * time.Hour
)

// maxQueueLimits bounds how many limits (scopes) one queue may have. It is far more than the
// job types a queue runs. It is few enough that every worker's read of a queue's limits every
// second, and a listing, stay small. SetLimit refuses a new scope past it; a scope that
// has a limit may always be set again.
const maxQueueLimits = 1000

// Limit is a flow-control limit of a queue over a scope. It is stored in Redis, so every
// worker obeys the same one and an operator changes it live (Inspector.SetLimit). It is a
// rate, "at most Rate jobs started in any window of Interval", and/or a concurrency, "at most
// Concurrency jobs running at once". A rate lets Rate jobs start at once after a quiet
// Interval, then the next once the first of them started an Interval ago.
//
// The scope is the whole queue, or one job type (Type). It covers either all of its jobs
// together, or each limit key's jobs separately (PerKey). The limit key is the one a job was
// published with (WithLimitKey); jobs without a key are not held to per-key limits. A job is
// held to every limit whose scope it is in. A job over a limit is neither failed nor counted
// as an attempt: it waits, and runs when the limit frees.
type Limit struct {
	// Type limits one job type; empty means every type of the queue.
	Type string
	// PerKey applies the limit to each limit key separately.
	PerKey bool
	// Rate is how many jobs may start in any window of Interval; zero means no rate limit.
	// At most 1,000,000,000.
	Rate int
	// Interval is the rate's period, a whole number of milliseconds, at least one and at most
	// 7 days.
	Interval time.Duration
	// Concurrency is how many jobs may run at once; zero means no concurrency limit.
	Concurrency int
}

// validate checks l as given.
func (l Limit) validate() error {
	if l.Type != "" {
		if err := validateType(l.Type); err != nil {
			return err
		}
	}
	switch {
	case l.Rate < 0:
		return invalid("limit rate %d is negative", l.Rate)
	case l.Rate > maxLimitRate:
		return invalid("limit rate %d is over %d", l.Rate, maxLimitRate)
	case l.Concurrency < 0:
		return invalid("limit concurrency %d is negative", l.Concurrency)
	case l.Rate == 0 && l.Concurrency == 0:
		return invalid("a limit needs a rate or a concurrency")
	case l.Rate > 0 && (l.Interval < time.Millisecond || l.Interval%time.Millisecond != 0):
		return invalid("limit interval %v must be a whole number of milliseconds, at least 1ms", l.Interval)
	case l.Rate > 0 && l.Interval > maxLimitInterval:
		return invalid("limit interval %v is over %v", l.Interval, maxLimitInterval)
	case l.Rate == 0 && l.Interval != 0:
		return invalid("limit interval %v without a rate", l.Interval)
	}
	return nil
}

func (l Limit) stored() jobstate.Limit {
	return jobstate.Limit{Type: l.Type, PerKey: l.PerKey, Rate: int64(l.Rate), Interval: l.Interval, Concurrency: int64(l.Concurrency)}
}

// limitsOf converts the store's limits, in order.
func limitsOf(ls []jobstate.Limit) []Limit {
	out := make([]Limit, len(ls))
	for k, l := range ls {
		out[k] = Limit{Type: l.Type, PerKey: l.PerKey, Rate: int(l.Rate), Interval: l.Interval, Concurrency: int(l.Concurrency)}
	}
	return out
}

// limitQueue checks that queue can hold limits: a valid name, an existing queue, and not
// partitioned. A partitioned queue's partitions sit on different hash slots (each its own
// tag). So no one script could count a limit across them atomically with the job's move.
// Limits on partitioned queues are refused rather than enforced per partition behind the
// operator's back.
func (i *Inspector) limitQueue(ctx context.Context, queue string) error {
	qs, err := i.existingQueue(ctx, queue)
	if err == nil && len(qs) > 1 {
		return invalid("queue %q has %d partitions: limits are not supported on a partitioned queue", queue, len(qs))
	}
	return err
}

// SetLimit stores l as queue's limit for its scope (Type, PerKey), replacing the one there.
// Workers apply it at once (its notice), or within a second should they miss the notice. Jobs
// waiting for a concurrency slot of the scope are woken to be admitted again under the new
// limit. The queue must exist and must not be partitioned, and a new scope is refused (ErrInvalid)
// while the queue has 1,000 limits. It waits for a change of the
// queue's partition count that is running (CreateQueue) to end, for up to a few seconds, then
// refuses with ErrQueueBusy.
func (i *Inspector) SetLimit(ctx context.Context, queue string, l Limit) error {
	if err := l.validate(); err != nil {
		return err
	}
	if err := i.limitQueue(ctx, queue); err != nil {
		return err
	}
	unlock, err := i.store.HoldLayout(ctx, queue)
	if err != nil {
		return storeErr(err)
	}
	defer unlock()
	// Checked before the lock so that a refused queue writes nothing, and again under it so
	// that no change to more partitions passes its check of the limits before this write.
	if err := i.limitQueue(ctx, queue); err != nil {
		return err
	}
	err = i.store.PutLimit(ctx, jobstate.PutLimitParams{Queue: queue, Limit: l.stored(), Max: maxQueueLimits, Now: time.Now()})
	return storeErr(err)
}

// Limits returns queue's limits, the whole queue's first, then by type.
func (i *Inspector) Limits(ctx context.Context, queue string) ([]Limit, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	ls, err := jobstate.ReadLimits(ctx, i.rdb, i.keys(queue))
	return limitsOf(ls), err
}

// DeleteLimit removes queue's limit of the scope (typ, perKey) and reports whether there was
// one. Jobs waiting for one of its concurrency slots are woken at once and run as they would
// without it; jobs a rate deferred keep their due times.
func (i *Inspector) DeleteLimit(ctx context.Context, queue, typ string, perKey bool) (bool, error) {
	if err := i.check(queue, ""); err != nil {
		return false, err
	}
	if typ != "" {
		if err := validateType(typ); err != nil {
			return false, err
		}
	}
	return i.store.DropLimit(ctx, queue, typ, perKey, time.Now())
}
