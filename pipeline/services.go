package pipeline

import (
	"context"
	"errors"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/conveyorq/conveyor/delayed"
	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/service"
	"github.com/conveyorq/conveyor/recovery"
)

// services lists the background services of one reading session over w.parts, in start order
// (Run stops them in reverse). First the settings watcher (engine.SettingsWatcher), which applies
// the paused queues to the session's subscriber before anything is read. Then the heartbeat
// (engine.Heartbeat), the delayed scheduler and a recoverer per partition, unless disabled. A new
// service is a type with Name, Start and Stop (internal/service) and one entry here.
func (w *Worker) services(watcher *engine.PartitionWatcher, levels *engine.LevelsWatcher, router *message.Router) ([]service.Service, error) {
	// The settings watcher first: its Start reads the paused queues, the limits and the
	// queues' priority levels before the reading begins. The session's leases of the limits
	// are kept by a service of their own, which gives them back as it stops.
	book := newLeaseBook(w)
	w.leases.Store(book)
	parts := slices.Clone(w.parts)
	w.mu.Lock()
	list := []service.Service{book, &engine.SettingsWatcher{Store: w.store, Queues: w.cfg.Queues,
		PollEvery: w.cfg.PauseCheckInterval, Log: w.log,
		Pause:      engine.NewPauseWatcher(w.rdb, w.cfg.Prefix, w.cfg.Name, parts, w.cfg.Queues, w.sub, w.log),
		ReadLimits: func(ctx context.Context) { w.readLimits(ctx, book, parts) },
		Levels:     levels, Router: router, Parts: watcher,
		Counts: slices.Clone(w.counts), ReadCounts: w.readCounts}}
	w.mu.Unlock()
	if !w.cfg.DisableHeartbeat {
		list = append(list, w.heartbeat())
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
	return list, nil
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
