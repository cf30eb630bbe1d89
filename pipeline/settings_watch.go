package pipeline

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/service"
)

// settingsWatcher is the worker's one service that follows its queues' settings. It reads the
// settings records (pause and the per-queue controls), the limits and partition counts kept
// beside them, and the priority levels, which publishes add. It reads everything once at
// Start, before the session reads anything. A notice on jobstate.SettingsChannel wakes it at
// once. As a fallback it polls the records every PauseCheckInterval, in one round trip. It
// polls the levels every LevelsRefresh. It polls the limits and counts every
// partitionsCheckEvery, or at once when a revision moved.
type settingsWatcher struct {
	w      *Worker
	store  jobstate.Backend
	pause  *pauseWatcher
	book   *leaseBook
	limits []string // the session's partitions, whose limits admission follows
	levels *levelsWatcher
	router *message.Router
	parts  *partitionWatcher
	// revs is each queue's last revision read; the loop's and Start's.
	revs  map[string]int64
	spell outage.Spell
	loop  service.Loop
}

func (s *settingsWatcher) Name() string { return "settings watcher" }

func (s *settingsWatcher) Start(ctx context.Context) error {
	s.spell = outage.Spell{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	// Subscribed before the first read, so that no change between the two goes unheard. A
	// server that refuses SUBSCRIBE leaves the polls.
	var notices <-chan *redis.Message
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ps, err := s.store.SubscribeSettings(sctx)
	cancel()
	if err == nil {
		notices = ps.Channel()
	}
	s.read(ctx)
	s.w.readLimits(ctx, s.book, s.limits)
	s.levels.check(ctx)
	s.loop.Start(ctx, func(ctx context.Context) {
		if ps != nil {
			defer ps.Close()
		}
		poll := time.NewTicker(s.w.cfg.PauseCheckInterval)
		defer poll.Stop()
		levels := time.NewTicker(LevelsRefresh)
		defer levels.Stop()
		slow := time.NewTicker(partitionsCheckEvery)
		defer slow.Stop()
		for {
			var moved bool
			select {
			case <-ctx.Done():
				return
			case <-levels.C:
				s.readLevels(ctx)
				continue
			case <-slow.C:
				moved = true
			case <-poll.C:
				_, moved = s.read(ctx)
			case m, ok := <-notices:
				if !ok {
					notices = nil // the polls go on
					continue
				}
				moved = s.notice(ctx, m)
			}
			if moved && s.followRest(ctx) {
				return
			}
		}
	})
	return nil
}

func (s *settingsWatcher) Stop() { s.loop.Stop() }

// notice reads the records after the notice m and confirms the pause it announces, if any.
// It reports whether a revision moved.
func (s *settingsWatcher) notice(ctx context.Context, m *redis.Message) bool {
	paused, moved := s.read(ctx)
	queue, _, token, err := jobstate.SettingsNotice(m.Payload)
	if err == nil && token != "" && paused[queue] {
		s.pause.confirm(ctx, queue, token)
	}
	return moved
}

// read reads the worker's queues' records and applies their pauses. It returns the paused
// queues (nil when it could not read them) and whether a revision moved since the last read.
func (s *settingsWatcher) read(ctx context.Context) (map[string]bool, bool) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	sts, err := s.store.ReadSettings(cctx, s.w.cfg.Queues)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			if step := s.spell.Failed(time.Now()); step.Log {
				s.w.log.Warn().Err(err).Str("component", "settings watcher").Int("tries", step.Tries).
					Msg("cannot read the queues' settings; keeping them as they are")
			}
		}
		return nil, false
	}
	s.spell.OK(time.Now())
	paused := make(map[string]bool, len(sts))
	moved := false
	for _, st := range sts {
		paused[st.Queue] = st.Paused
		if old, ok := s.revs[st.Queue]; ok && old != st.Rev {
			moved = true
		}
		s.revs[st.Queue] = st.Rev
	}
	s.pause.apply(paused)
	return paused, moved
}

// followRest reads the limits and the partition counts. It reports whether a count changed,
// which ends the session (Worker.Run reads the partitions again).
func (s *settingsWatcher) followRest(ctx context.Context) bool {
	s.w.readLimits(ctx, s.book, s.limits)
	counts, err := s.w.readCounts(ctx)
	if errors.Is(err, ErrInvalid) {
		if err.Error() != s.parts.logged { // once per bad value, not every few seconds
			s.parts.logged = err.Error()
			s.w.log.Error().Err(err).Ints("partitions", s.w.counts).
				Msg("a queue's stored partition count is unusable; this worker keeps reading the partitions it has")
		}
		return false
	}
	if err != nil {
		return false // an outage is logged by the parts that need Redis
	}
	s.parts.logged = ""
	if slices.Equal(counts, s.w.counts) {
		return false
	}
	s.parts.next = counts
	s.parts.changed()
	return true
}

// readLevels starts reading the level streams found since the last read, once the router
// runs (before, Run starts the handlers added at Start itself).
func (s *settingsWatcher) readLevels(ctx context.Context) {
	select {
	case <-s.router.Running():
	default:
		return
	}
	if !s.levels.check(ctx) {
		return
	}
	// Subscribes only the handlers added since the router started.
	if err := s.router.RunHandlers(ctx); err != nil && ctx.Err() == nil {
		s.w.log.Error().Err(err).Msg("could not start reading a priority level's stream")
	}
}
