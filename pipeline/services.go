package pipeline

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/conveyorq/conveyor/delayed"
	"github.com/conveyorq/conveyor/internal/service"
	"github.com/conveyorq/conveyor/recovery"
)

// services lists the background services of one reading session over w.parts, in start order
// (Run stops them in reverse): the pause watcher (pause.go), which applies the paused queues
// to the session's subscriber before anything is read, the heartbeat (heartbeat.go), the
// delayed scheduler and a recoverer per partition, unless disabled, then watcher. A new service is a type with Name, Start and Stop
// (internal/service) and one entry here.
func (w *Worker) services(watcher *partitionWatcher, levels *levelsWatcher) ([]service.Service, error) {
	// The limits, pause and levels watchers first: their Start reads the limits, the paused
	// queues and the queues' priority levels before the reading begins. The session's leases
	// of the limits are kept by a service of their own, which gives them back as it stops.
	book := newLeaseBook(w)
	w.leases.Store(book)
	w.mu.Lock()
	list := []service.Service{book, &limitsWatcher{w: w, book: book, parts: slices.Clone(w.parts)},
		&pauseWatcher{w: w, sub: w.sub}, levels}
	w.mu.Unlock()
	if !w.cfg.DisableHeartbeat {
		list = append(list, &heartbeat{w: w})
	}
	if !w.cfg.DisableScheduler {
		s, err := delayed.New(w.rdb, w.cfg.scheduler(w.parts))
		if err != nil {
			return nil, err
		}
		list = append(list, s)
	}
	if !w.cfg.DisablePeriodic {
		s, err := w.cfg.periodicScheduler(w.rdb)
		if err != nil {
			return nil, err
		}
		list = append(list, s)
	}
	if !w.cfg.DisableRecovery {
		for _, name := range w.parts {
			r, err := recovery.NewRecoverer(w.rdb, w.cfg.recoverer(name))
			if err != nil {
				return nil, err
			}
			list = append(list, r)
		}
	}
	return append(list, watcher), nil
}

// validateServices checks the configs WorkerConfig gives its services, with the constructors'
// own rules, so that NewWorker refuses what a session could not start.
func (c WorkerConfig) validateServices() error {
	var errs []error
	if !c.DisableScheduler {
		_, err := delayed.New(nil, c.scheduler(c.Queues))
		errs = append(errs, err)
	}
	if !c.DisablePeriodic {
		_, err := c.periodicScheduler(nil)
		errs = append(errs, err)
	}
	if !c.DisableRecovery && len(c.Queues) > 0 {
		_, err := recovery.NewRecoverer(nil, c.recoverer(c.Queues[0]))
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// scheduler is the delayed scheduler's config for queues, which are queue or partition names.
func (c WorkerConfig) scheduler(queues []string) delayed.Config {
	return c.Hooks.scheduler(delayed.Config{Prefix: c.Prefix, Queues: queues, Logger: c.Logger.With().Str("worker", c.Name).Logger()})
}

// recoverer is the config of the recoverer of queue, a queue or partition name.
func (c WorkerConfig) recoverer(queue string) recovery.Config {
	return c.Hooks.recoverer(recovery.Config{Prefix: c.Prefix, Queue: queue, VisibilityTimeout: c.VisibilityTimeout,
		Interval: c.RecoveryInterval, LockTTL: c.RecoveryLockTTL, Logger: c.Logger.With().Str("worker", c.Name).Logger(),
		TracerProvider: c.TracerProvider})
}

// partitionWatcher is the service that ends a reading session when one of the worker's queues
// has a new partition count (see Worker.Run): it calls changed, and keeps the new counts in
// next for the session's caller, who reads them after Stop.
type partitionWatcher struct {
	w       *Worker
	changed func()
	next    []int
	loop    service.Loop
}

func (p *partitionWatcher) Name() string { return "partition watcher" }

func (p *partitionWatcher) Start(ctx context.Context) error {
	p.loop.Start(ctx, func(ctx context.Context) {
		if p.next = p.w.watchPartitions(ctx); p.next != nil {
			p.changed()
		}
	})
	return nil
}

func (p *partitionWatcher) Stop() { p.loop.Stop() }

// partitionsCheckEvery is how often a running worker reads its queues' partition counts again
// (one HMGET): the lifetime of the producers' cached counts, so that a worker follows a change
// about as soon as the last producer does.
const partitionsCheckEvery = 5 * time.Second

// watchPartitions reads the queues' partition counts every partitionsCheckEvery until ctx ends
// (it returns nil) or a count differs from w.counts (it returns the new counts). A count that
// cannot be used (not a number, 0, over MaxPartitions) is logged and otherwise ignored: the
// worker keeps reading the partitions it has.
func (w *Worker) watchPartitions(ctx context.Context) []int {
	t := time.NewTicker(partitionsCheckEvery)
	defer t.Stop()
	var logged string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		counts, err := w.readCounts(ctx)
		if errors.Is(err, ErrInvalid) {
			if err.Error() != logged { // once per bad value, not every few seconds
				logged = err.Error()
				w.log.Error().Err(err).Ints("partitions", w.counts).
					Msg("a queue's stored partition count is unusable; this worker keeps reading the partitions it has")
			}
			continue
		}
		if err != nil {
			continue // an outage is logged by the parts that need Redis
		}
		logged = ""
		if !slices.Equal(counts, w.counts) {
			return counts
		}
	}
}
