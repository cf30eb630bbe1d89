package pipeline

import (
	"errors"

	"github.com/conveyorq/conveyor/delayed"
	"github.com/conveyorq/conveyor/internal/service"
	"github.com/conveyorq/conveyor/recovery"
)

// services lists the background services of one reading session over parts (partition
// names), in start order; the engine's loop starts its lease book and settings watcher first
// (engine.Loop.Services). They are the heartbeat (engine.Heartbeat), the delayed scheduler,
// the periodic scheduler and a recoverer per partition, unless disabled. A new service is a
// type with Name, Start and Stop (internal/service) and one entry here.
func (w *Worker) services(parts []string) ([]service.Service, error) {
	var list []service.Service
	if !w.cfg.DisableHeartbeat {
		list = append(list, w.heartbeat())
	}
	if !w.cfg.DisableScheduler {
		s, err := delayed.New(w.rdb, w.cfg.scheduler(parts))
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
		for _, name := range parts {
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
