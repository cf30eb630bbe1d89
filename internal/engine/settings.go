package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/service"
	"github.com/conveyorq/conveyor/stream"
)

// SettingsWatcher is the worker's one service that follows its queues' settings. It reads the
// settings records (pause and the per-queue controls), the limits and partition counts kept
// beside them, and the priority levels, which publishes add. It reads everything once at
// Start, before the session reads anything. A notice on jobstate.SettingsChannel wakes it at
// once. As a fallback it polls the records every PollEvery (the worker's PauseCheckInterval), in one round trip. It
// polls the levels every LevelsRefresh. It polls the limits and counts every
// PartitionsCheckEvery, or at once when a revision moved.
type SettingsWatcher struct {
	Store     jobstate.Backend
	Queues    []string // the worker's
	PollEvery time.Duration
	Log       zerolog.Logger
	Pause     *PauseWatcher
	// ReadLimits reads the limits of the session's partitions, for admission.
	ReadLimits func(ctx context.Context)
	Levels     *LevelsWatcher
	Router     *message.Router
	Parts      *PartitionWatcher
	// Counts are the partition counts the session reads; ReadCounts reads them anew.
	Counts     []int
	ReadCounts func(ctx context.Context) ([]int, error)
	// revs is each queue's last revision read; the loop's and Start's.
	revs  map[string]int64
	spell outage.Spell
	loop  service.Loop
}

// Name names the service.
func (s *SettingsWatcher) Name() string { return "settings watcher" }

// Start reads everything once, then follows the notices and polls until Stop.
func (s *SettingsWatcher) Start(ctx context.Context) error {
	s.revs = map[string]int64{}
	s.spell = outage.Spell{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	// Subscribed before the first read, so that no change between the two goes unheard. A
	// server that refuses SUBSCRIBE leaves the polls.
	var notices <-chan *redis.Message
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ps, err := s.Store.SubscribeSettings(sctx)
	cancel()
	if err == nil {
		notices = ps.Channel()
	}
	s.read(ctx)
	s.ReadLimits(ctx)
	s.Levels.Check(ctx)
	s.loop.Start(ctx, func(ctx context.Context) {
		if ps != nil {
			defer ps.Close()
		}
		poll := time.NewTicker(s.PollEvery)
		defer poll.Stop()
		levels := time.NewTicker(LevelsRefresh)
		defer levels.Stop()
		slow := time.NewTicker(PartitionsCheckEvery)
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

// Stop ends the watching.
func (s *SettingsWatcher) Stop() { s.loop.Stop() }

// notice reads the records after the notice m and confirms the pause it announces, if any.
// It reports whether a revision moved.
func (s *SettingsWatcher) notice(ctx context.Context, m *redis.Message) bool {
	paused, moved := s.read(ctx)
	queue, _, token, err := jobstate.SettingsNotice(m.Payload)
	if err == nil && token != "" && paused[queue] {
		s.Pause.confirm(ctx, queue, token)
	}
	return moved
}

// read reads the worker's queues' records and applies their pauses. It returns the paused
// queues (nil when it could not read them) and whether a revision moved since the last read.
func (s *SettingsWatcher) read(ctx context.Context) (map[string]bool, bool) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	sts, err := s.Store.ReadSettings(cctx, s.Queues)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			if step := s.spell.Failed(time.Now()); step.Log {
				s.Log.Warn().Err(err).Str("component", "settings watcher").Int("tries", step.Tries).
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
	s.Pause.apply(paused)
	return paused, moved
}

// followRest reads the limits and the partition counts. It reports whether a count changed,
// which ends the session (pipeline's Worker.Run reads the partitions again).
func (s *SettingsWatcher) followRest(ctx context.Context) bool {
	s.ReadLimits(ctx)
	counts, err := s.ReadCounts(ctx)
	if errors.As(err, new(*jobstate.CountError)) {
		if err.Error() != s.Parts.logged { // once per bad value, not every few seconds
			s.Parts.logged = err.Error()
			s.Log.Error().Err(err).Ints("partitions", s.Counts).
				Msg("a queue's stored partition count is unusable; this worker keeps reading the partitions it has")
		}
		return false
	}
	if err != nil {
		return false // an outage is logged by the parts that need Redis
	}
	s.Parts.logged = ""
	if slices.Equal(counts, s.Counts) {
		return false
	}
	s.Parts.Next = counts
	s.Parts.Changed()
	return true
}

// readLevels starts reading the level streams found since the last read, once the router
// runs (before, Run starts the handlers added at Start itself).
func (s *SettingsWatcher) readLevels(ctx context.Context) {
	select {
	case <-s.Router.Running():
	default:
		return
	}
	if !s.Levels.Check(ctx) {
		return
	}
	// Subscribes only the handlers added since the router started.
	if err := s.Router.RunHandlers(ctx); err != nil && ctx.Err() == nil {
		s.Log.Error().Err(err).Msg("could not start reading a priority level's stream")
	}
}

// PauseWatcher applies the paused queues (pipeline's Inspector.Pause) to the session's subscriber, and
// confirms pauses; the settings watcher reads them.
type PauseWatcher struct {
	rdb            redis.UniversalClient
	prefix, worker string
	parts, queues  []string // the session's partitions and the worker's queues
	sub            *stream.Subscriber
	log            zerolog.Logger
	// applied is the worker's queues paused now, for the log lines; the settings watcher's.
	applied map[string]bool
}

// NewPauseWatcher returns the pause watcher of a session of worker that reads parts (of
// queues) through sub.
func NewPauseWatcher(rdb redis.UniversalClient, prefix, worker string, parts, queues []string, sub *stream.Subscriber,
	log zerolog.Logger) *PauseWatcher {
	return &PauseWatcher{rdb: rdb, prefix: prefix, worker: worker, parts: parts, queues: queues, sub: sub, log: log,
		applied: map[string]bool{}}
}

// confirm tells the pause of queue with token (pipeline's Inspector.PauseConfirmed) that this worker
// applied it. It waits until the reads of the queue's streams under way when it landed have
// ended (stream.Subscriber.WaitTopicReads, woken by the last read's end). A read sent before
// the pause may bring entries published after it, and they would start. A read lasts a
// BlockTime at most (250 ms), bar a slow Redis. Past 5 s the worker does not confirm, and
// Pause says so.
func (p *PauseWatcher) confirm(ctx context.Context, queue, token string) {
	var topics []string
	for _, part := range p.parts {
		q := keys.New(p.prefix, part)
		if q.Name() != queue {
			continue
		}
		for level := keys.MinPriority; level <= keys.MaxPriority; level++ {
			topics = append(topics, q.LevelStream(level))
		}
	}
	if len(topics) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := p.sub.WaitTopicReads(wctx, topics...)
	cancel()
	if err != nil {
		return
	}
	if err := jobstate.AckPause(ctx, p.rdb, p.prefix, queue, p.worker, token); err != nil && ctx.Err() == nil {
		p.log.Warn().Err(err).Str("component", "pause watcher").Str("queue", queue).
			Msg("cannot confirm the pause; the queue is paused here all the same")
	}
}

// apply pauses or resumes the subscriber's topics of each partition of the worker's queues to
// match paused.
func (p *PauseWatcher) apply(paused map[string]bool) {
	for _, part := range p.parts {
		q := keys.New(p.prefix, part)
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
	for _, name := range p.queues {
		if paused[name] != p.applied[name] {
			p.applied[name] = paused[name]
			msg := "queue paused: not reading it until it is resumed"
			if !paused[name] {
				msg = "queue resumed: reading it again"
			}
			p.log.Info().Str("queue", name).Msg(msg)
		}
	}
}

// PartitionWatcher is how the settings watcher ends a reading session when one of the
// worker's queues has a new partition count (see pipeline's Worker.Run). It calls Changed, and keeps
// the new counts in Next. The session's caller reads them after the services stop.
type PartitionWatcher struct {
	Changed func()
	Next    []int
	// logged is the last unusable count logged, so that one is logged once.
	logged string
}

// PartitionsCheckEvery is how often a running worker reads its queues' limits and partition
// counts without a change announced. It is the lifetime of the producers' cached counts. So a
// worker follows a change about as soon as the last producer does.
const PartitionsCheckEvery = 5 * time.Second
