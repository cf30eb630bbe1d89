package pipeline

import (
	"errors"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/conveyorq/conveyor/delayed"
	"github.com/conveyorq/conveyor/internal/service"
	"github.com/conveyorq/conveyor/recovery"
)

// services lists the background services of one reading session over w.parts, in start order
// (Run stops them in reverse). First the settings watcher (settings_watch.go), which applies
// the paused queues to the session's subscriber before anything is read. Then the heartbeat
// (heartbeat.go), the delayed scheduler and a recoverer per partition, unless disabled. A new
// service is a type with Name, Start and Stop (internal/service) and one entry here.
func (w *Worker) services(watcher *partitionWatcher, levels *levelsWatcher, router *message.Router) ([]service.Service, error) {
	// The settings watcher first: its Start reads the paused queues, the limits and the
	// queues' priority levels before the reading begins. The session's leases of the limits
	// are kept by a service of their own, which gives them back as it stops.
	book := newLeaseBook(w)
	w.leases.Store(book)
	w.mu.Lock()
	list := []service.Service{book, &settingsWatcher{w: w, store: w.store,
		pause: &pauseWatcher{w: w, sub: w.sub, applied: map[string]bool{}}, book: book, limits: slices.Clone(w.parts),
		levels: levels, router: router, parts: watcher, revs: map[string]int64{}}}
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

// partitionWatcher is how the settings watcher ends a reading session when one of the
// worker's queues has a new partition count (see Worker.Run). It calls changed, and keeps the
// new counts in next. The session's caller reads them after the services stop.
type partitionWatcher struct {
	changed func()
	next    []int
	// logged is the last unusable count logged, so that one is logged once.
	logged string
}

// partitionsCheckEvery is how often a running worker reads its queues' limits and partition
// counts without a change announced. It is the lifetime of the producers' cached counts. So a
// worker follows a change about as soon as the last producer does.
const partitionsCheckEvery = 5 * time.Second
