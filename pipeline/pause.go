package pipeline

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/service"
	"github.com/conveyorq/conveyor/stream"
)

// DefaultPauseCheckInterval is how often a worker reads the paused queues
// (WorkerConfig.PauseCheckInterval).
const DefaultPauseCheckInterval = time.Second

// Pause pauses queue: every worker stops reading it (all its partitions) within one read of
// the change. Jobs running when the pause lands finish as usual; queued jobs stay queued;
// scheduled and retried jobs are still promoted when due and wait, queued, for Resume;
// recovery goes on. Nothing is lost. The state lives in Redis (the set keys.Paused), shared
// by every worker and kept across restarts: a worker started on a paused queue takes nothing
// from it. Workers learn of the change from a Pub/Sub notice at once, and by reading the set
// every PauseCheckInterval (1 s) should the notice be missed. Pausing a paused queue does
// nothing. A queue that does not exist (QueueExists) is ErrQueueNotFound.
func (i *Inspector) Pause(ctx context.Context, queue string) error {
	if err := i.mustExist(ctx, queue); err != nil {
		return err
	}
	if _, err := jobstate.PauseQueue(ctx, i.rdb, i.cfg.Prefix, queue); err != nil {
		return fmt.Errorf("pause queue %s: %w", queue, err)
	}
	return nil
}

// Resume undoes Pause: workers read queue again, within one read of the change. Resuming a
// queue that is not paused does nothing. A queue that does not exist is ErrQueueNotFound,
// unless it is paused (a queue deleted while paused can be resumed).
func (i *Inspector) Resume(ctx context.Context, queue string) error {
	if err := i.check(queue, ""); err != nil {
		return err
	}
	was, err := jobstate.ResumeQueue(ctx, i.rdb, i.cfg.Prefix, queue)
	if err != nil {
		return fmt.Errorf("resume queue %s: %w", queue, err)
	}
	if was {
		return nil
	}
	return i.mustExist(ctx, queue)
}

// Paused returns the names of the paused queues, sorted.
func (i *Inspector) Paused(ctx context.Context) ([]string, error) {
	set, err := jobstate.PausedQueues(ctx, i.rdb, i.cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("read the paused queues: %w", err)
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// mustExist returns ErrQueueNotFound (wrapped, naming queue) for a queue that does not exist.
func (i *Inspector) mustExist(ctx context.Context, queue string) error {
	ok, err := i.QueueExists(ctx, queue)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("queue %s: %w", queue, ErrQueueNotFound)
	}
	return nil
}

// pauseWatcher is the worker's service that follows the paused queues (Inspector.Pause): it
// reads the set keys.Paused once at Start, before the session reads anything, then every
// PauseCheckInterval and whenever a notice on keys.PausedChannel arrives, and pauses or
// resumes the subscriber's topics of each partition of the worker's queues to match. One
// SMEMBERS of one global key per check, whatever the number of queues; on a cluster the
// notice is a plain PUBLISH, which every node forwards.
type pauseWatcher struct {
	w    *Worker
	sub  *stream.Subscriber
	loop service.Loop
	// applied is the worker's queues paused now, for the log lines; the loop's and Start's.
	applied map[string]bool
	spell   outage.Spell
}

func (p *pauseWatcher) Name() string { return "pause watcher" }

func (p *pauseWatcher) Start(ctx context.Context) error {
	p.applied = map[string]bool{}
	p.spell = outage.Spell{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	// Subscribed before the first read, so that no change between the two is missed.
	ps := p.w.rdb.Subscribe(ctx, keys.PausedChannel(p.w.cfg.Prefix))
	p.check(ctx)
	p.loop.Start(ctx, func(ctx context.Context) {
		defer ps.Close()
		notices := ps.Channel()
		tick := time.NewTicker(p.w.cfg.PauseCheckInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-notices:
			}
			p.check(ctx)
		}
	})
	return nil
}

func (p *pauseWatcher) Stop() { p.loop.Stop() }

// check reads the paused queues and applies them to the subscriber.
func (p *pauseWatcher) check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	paused, err := jobstate.PausedQueues(cctx, p.w.rdb, p.w.cfg.Prefix)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			if step := p.spell.Failed(time.Now()); step.Log {
				p.w.log.Warn().Err(err).Str("component", "pause watcher").Int("tries", step.Tries).
					Msg("cannot read the paused queues; keeping the pauses as they are")
			}
		}
		return
	}
	p.spell.OK(time.Now())
	for _, part := range p.w.parts {
		q := keys.New(p.w.cfg.Prefix, part)
		// Every level's stream (pausing a topic not subscribed yet holds its reader when a
		// level is found later).
		for level := keys.MinPriority; level <= keys.MaxPriority; level++ {
			if paused[q.Name()] {
				p.sub.PauseTopic(q.LevelStream(level))
			} else {
				p.sub.ResumeTopic(q.LevelStream(level))
			}
		}
	}
	for _, name := range p.w.cfg.Queues {
		if paused[name] != p.applied[name] {
			p.applied[name] = paused[name]
			msg := "queue paused: not reading it until it is resumed"
			if !paused[name] {
				msg = "queue resumed: reading it again"
			}
			p.w.log.Info().Str("queue", name).Msg(msg)
		}
	}
}

// pausedTopics reports, for tests, which of w's queues the current session's subscriber has
// paused (every partition of the queue).
func (w *Worker) pausedTopics() map[string]bool {
	w.mu.Lock()
	sub := w.sub
	w.mu.Unlock()
	out := map[string]bool{}
	if sub == nil {
		return out
	}
	for _, part := range w.parts {
		q := keys.New(w.cfg.Prefix, part)
		if sub.TopicPaused(q.Stream()) {
			out[q.Name()] = true
		}
	}
	return out
}
