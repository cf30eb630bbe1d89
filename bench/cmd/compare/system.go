package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// errNotApplicable is what a producer returns for a workload its system has no way to do.
var errNotApplicable = errors.New("not applicable")

// System is one system under test, in one configuration (a variant such as asynq_c10).
type System interface {
	// Name is the variant's name (conveyor, asynq_c10, watermill_s4, raw).
	Name() string
	// Delayed reports whether the system runs delayed jobs (the delayed workload).
	Delayed() bool
	// NewProducer connects a producer of queue (a queue or stream name) in the parent.
	NewProducer(ctx context.Context, addr, queue string) (Producer, error)
	// NewConsumer makes the consumer of queue; it runs in the child process.
	NewConsumer(addr, queue string) (Consumer, error)
}

// Producer publishes jobs. Every method publishes jobs of the same no-op type.
type Producer interface {
	// Preload publishes n jobs the fastest way the system offers (the e2e workload).
	Preload(ctx context.Context, n int, payload []byte) error
	// Live publishes n jobs from one producer at full speed while a consumer runs.
	Live(ctx context.Context, n int, payload []byte) error
	// EnqueueOne publishes one job with one call.
	EnqueueOne(ctx context.Context, payload []byte) error
	// EnqueueBatch publishes n jobs with the system's batch call, or returns errNotApplicable.
	EnqueueBatch(ctx context.Context, n int, payload []byte) error
	// EnqueueDelayed publishes one job due after delay; it is called only when Delayed().
	EnqueueDelayed(ctx context.Context, payload []byte, delay time.Duration) error
	// Inspect returns facts about the queue's keys: leftovers after a run, progress after a
	// timeout.
	Inspect(ctx context.Context) (map[string]int64, error)
	Close() error
}

// Consumer consumes one queue inside the child process.
type Consumer interface {
	// Start starts consuming and returns once the consumer is ready; handle is called with
	// each job's payload from the handler.
	Start(ctx context.Context, handle func(payload []byte)) error
	// Processed returns how many jobs are finished as the system itself records it (job state
	// written, message acknowledged).
	Processed(ctx context.Context) (int64, error)
	// Describe returns a one-line progress description for logs.
	Describe(ctx context.Context) string
	// Stop stops consuming and releases its connections.
	Stop() error
}

// variantsOf lists the variants to run, grouped by family in the order of o.systems.
func variantsOf(o options) map[string][]string {
	out := map[string][]string{}
	for _, f := range o.systems {
		switch f {
		case "asynq":
			for _, c := range o.asynqConc {
				out[f] = append(out[f], fmt.Sprintf("asynq_c%d", c))
			}
		case "watermill":
			for _, s := range o.watermillSubs {
				out[f] = append(out[f], fmt.Sprintf("watermill_s%d", s))
			}
		default:
			out[f] = []string{f}
		}
	}
	return out
}

// newSystem builds the variant named v.
func newSystem(v string, o options) (System, error) {
	num := func(prefix string) (int, error) {
		n, err := strconv.Atoi(strings.TrimPrefix(v, prefix))
		if err != nil || n < 1 {
			return 0, fmt.Errorf("bad variant %q", v)
		}
		return n, nil
	}
	switch {
	case v == "conveyor":
		return &conveyorSystem{concurrency: o.convConc, batch: o.convBatch}, nil
	case v == "conveyor_metrics":
		return &conveyorSystem{concurrency: o.convConc, batch: o.convBatch, metrics: true}, nil
	case v == "conveyor_bounded":
		return &conveyorSystem{concurrency: o.convConc, batch: o.convBatch, bound: 100_000_000}, nil
	case v == "conveyor_keys":
		return &conveyorSystem{concurrency: o.convConc, batch: o.convBatch, keys: benchKeyring()}, nil
	case v == "raw":
		return &rawSystem{}, nil
	case v == "idle":
		return idleSystem{}, nil
	case strings.HasPrefix(v, "asynq_c"):
		n, err := num("asynq_c")
		if err != nil {
			return nil, err
		}
		return &asynqSystem{concurrency: n}, nil
	case strings.HasPrefix(v, "watermill_s"):
		n, err := num("watermill_s")
		if err != nil {
			return nil, err
		}
		return &watermillSystem{subs: n}, nil
	}
	return nil, fmt.Errorf("unknown system variant %q", v)
}

// parallel runs n jobs over g goroutines calling one(ctx) each time, stopping at the first
// error.
func parallel(ctx context.Context, n, g int, one func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	per, extra := n/g, n%g
	for i := range g {
		k := per
		if i < extra {
			k++
		}
		wg.Go(func() {
			for range k {
				if err := one(ctx); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// chunks calls f with chunk sizes that add up to n, each at most size.
func chunks(ctx context.Context, n, size int, f func(ctx context.Context, k int) error) error {
	for done := 0; done < n; {
		k := min(size, n-done)
		if err := f(ctx, k); err != nil {
			return err
		}
		done += k
	}
	return nil
}

// idleSystem is a consumer that connects to nothing. Its process's peak RSS is the harness
// binary's own baseline. Every consumer child runs the same binary, with every system's packages
// initialised.
type idleSystem struct{}

func (idleSystem) Name() string  { return "idle" }
func (idleSystem) Delayed() bool { return false }
func (idleSystem) NewProducer(context.Context, string, string) (Producer, error) {
	return nil, errNotApplicable
}
func (idleSystem) NewConsumer(string, string) (Consumer, error) { return idleConsumer{}, nil }

type idleConsumer struct{}

func (idleConsumer) Start(context.Context, func([]byte)) error { return nil }
func (idleConsumer) Processed(context.Context) (int64, error)  { return 0, nil }
func (idleConsumer) Describe(context.Context) string           { return "idle" }
func (idleConsumer) Stop() error                               { return nil }
