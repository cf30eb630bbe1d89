package engine

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/stream"
)

// LevelsRefresh is how often a worker (its settings watcher) reads which priority levels
// (pipeline.WithPriority) its queues' jobs use, to start reading a level's stream. So the first job of
// a new level in a queue waits at most this long (plus a read) for a worker that runs already.
const LevelsRefresh = time.Second

// LevelsWatcher starts, driven by the settings watcher, the reading of a queue's priority
// level streams (keys.Queue.LevelStream) once a job of that level was published. A worker
// reads a level's stream only while the queue's set of levels (keys.Queue.Levels) names it.
// Every publish of a job above level 1 adds to that set. So a queue whose jobs never named a
// level has its one stream, one reader and the slot an idle reader holds, as before levels
// existed. A queue with levels has one reader per level used, read in level order
// (stream.Config.Levels). The set is read before the session's reading begins, then every
// LevelsRefresh. Levels are never dropped within a session; the set only grows while the queue
// exists.
type LevelsWatcher struct {
	rdb    redis.UniversalClient
	log    zerolog.Logger
	handle message.NoPublishHandlerFunc
	router *message.Router
	sub    *stream.Subscriber
	parts  []keys.Queue
	// subscribed: the level streams the session reads (by stream key); owned by the loop
	// after Start.
	subscribed map[string]bool
	spell      outage.Spell
}

// NewLevelsWatcher returns the levels watcher of a session that reads parts (partition
// names) through sub, handling each message of a level stream with handle.
func NewLevelsWatcher(rdb redis.UniversalClient, prefix string, parts []string, router *message.Router, sub *stream.Subscriber,
	handle message.NoPublishHandlerFunc, log zerolog.Logger) *LevelsWatcher {
	l := &LevelsWatcher{rdb: rdb, log: log, handle: handle, router: router, sub: sub, subscribed: map[string]bool{},
		spell: outage.Spell{Min: time.Second, Max: time.Minute}}
	for _, name := range parts {
		l.parts = append(l.parts, keys.New(prefix, name))
	}
	return l
}

// Check reads the queues' levels and adds a router handler for each level stream not read
// yet. It reports whether it added one.
func (l *LevelsWatcher) Check(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	levels, err := jobstate.QueueLevels(cctx, l.rdb, l.parts)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			if step := l.spell.Failed(time.Now()); step.Log {
				l.log.Warn().Err(err).Str("component", "levels watcher").Int("tries", step.Tries).
					Msg("cannot read the queues' priority levels; reading the levels found so far")
			}
		}
		return false
	}
	l.spell.OK(time.Now())
	added := false
	for k, q := range l.parts {
		for _, level := range levels[k] {
			s := q.LevelStream(level)
			if l.subscribed[s] {
				continue
			}
			l.subscribed[s] = true
			added = true
			l.router.AddConsumerHandler(handlerName(q.AtLevel(level)), s, l.sub, l.handle)
		}
	}
	return added
}
