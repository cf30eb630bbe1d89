package pipeline

import (
	"context"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
)

// MaxLimitRate bounds Limit.Rate, and MaxLimitInterval Limit.Interval: far beyond what a queue
// runs, and small enough that the scripts' arithmetic in milliseconds stays exact.
const (
	MaxLimitRate     = 1_000_000_000
	MaxLimitInterval = 7 * 24 * time.Hour
)

// Limit is a flow-control limit of a queue, stored in Redis so that every worker obeys the same
// one and an operator changes it live (Inspector.SetLimit): a rate, "at most Rate jobs started
// in any window of Interval", and/or a concurrency, "at most Concurrency jobs running at once",
// over a scope. A rate lets Rate jobs start at once after a quiet Interval, then the next once
// the first of them started an Interval ago.
//
// The scope is the whole queue, or one job type (Type), and either all of its jobs together or
// each limit key's jobs separately (PerKey: the key a job was published with, WithLimitKey;
// jobs without a key are not held to per-key limits). A job is held to every limit whose scope
// it is in. A job over a limit is neither failed nor counted as an attempt: it waits, and runs
// when the limit frees.
type Limit struct {
	// Type limits one job type; empty means every type of the queue.
	Type string
	// PerKey applies the limit to each limit key separately.
	PerKey bool
	// Rate is how many jobs may start in any window of Interval; zero means no rate limit.
	Rate int
	// Interval is the rate's period, a whole number of milliseconds, at least one.
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
	case l.Rate > MaxLimitRate:
		return invalid("limit rate %d is over %d", l.Rate, MaxLimitRate)
	case l.Concurrency < 0:
		return invalid("limit concurrency %d is negative", l.Concurrency)
	case l.Rate == 0 && l.Concurrency == 0:
		return invalid("a limit needs a rate or a concurrency")
	case l.Rate > 0 && (l.Interval < time.Millisecond || l.Interval%time.Millisecond != 0):
		return invalid("limit interval %v must be a whole number of milliseconds, at least 1ms", l.Interval)
	case l.Rate > 0 && l.Interval > MaxLimitInterval:
		return invalid("limit interval %v is over %v", l.Interval, MaxLimitInterval)
	case l.Rate == 0 && l.Interval != 0:
		return invalid("limit interval %v without a rate", l.Interval)
	}
	return nil
}

func (l Limit) stored() jobstate.Limit {
	return jobstate.Limit{Type: l.Type, PerKey: l.PerKey, Rate: int64(l.Rate), Interval: l.Interval, Concurrency: int64(l.Concurrency)}
}

func limitOf(l jobstate.Limit) Limit {
	return Limit{Type: l.Type, PerKey: l.PerKey, Rate: int(l.Rate), Interval: l.Interval, Concurrency: int(l.Concurrency)}
}

// limitQueue checks that queue can hold limits: a valid name, an existing queue, and not
// partitioned. A partitioned queue's partitions sit on different hash slots (each its own
// tag), so no one script could count a limit across them atomically with the job's move;
// limits on partitioned queues are refused rather than enforced per partition behind the
// operator's back.
func (i *Inspector) limitQueue(ctx context.Context, queue string) error {
	if err := i.check(queue, ""); err != nil {
		return err
	}
	ok, err := i.QueueExists(ctx, queue)
	if err != nil {
		return err
	}
	if !ok {
		return ErrQueueNotFound
	}
	p, err := i.Partitions(ctx, queue)
	if err != nil {
		return err
	}
	if p > 1 {
		return invalid("queue %q has %d partitions: limits are not supported on a partitioned queue", queue, p)
	}
	return nil
}

// SetLimit stores l as queue's limit for its scope (Type, PerKey), replacing the one there.
// Workers apply a change of a queue that has limits at once (admission reads them); the first
// limit of a queue within LimitsRefresh (each worker's read of which queues have limits). Jobs
// waiting for a concurrency slot of the scope are woken to be admitted again under the new
// limit. The queue must exist and must not be partitioned.
func (i *Inspector) SetLimit(ctx context.Context, queue string, l Limit) error {
	if err := l.validate(); err != nil {
		return err
	}
	if err := i.limitQueue(ctx, queue); err != nil {
		return err
	}
	return jobstate.SetLimit(ctx, i.rdb, i.keys(queue), l.stored(), time.Now())
}

// Limits returns queue's limits, the whole queue's first, then by type.
func (i *Inspector) Limits(ctx context.Context, queue string) ([]Limit, error) {
	if err := i.check(queue, ""); err != nil {
		return nil, err
	}
	ls, err := jobstate.ReadLimits(ctx, i.rdb, i.keys(queue))
	if err != nil {
		return nil, err
	}
	out := make([]Limit, len(ls))
	for k, l := range ls {
		out[k] = limitOf(l)
	}
	return out, nil
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
	return jobstate.DeleteLimit(ctx, i.rdb, i.keys(queue), typ, perKey, time.Now())
}
