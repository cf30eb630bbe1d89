package pipeline

import (
	"context"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/service"
	"github.com/conveyorq/conveyor/stream"
)

// LevelsRefresh is how often a worker reads which priority levels (WithPriority) its queues'
// jobs use, to start reading a level's stream: the first job of a new level in a queue waits
// at most this long (plus a read) for a worker that runs already.
const LevelsRefresh = time.Second

// levelsWatcher is the service that starts the reading of a queue's priority level streams
// (keys.Queue.LevelStream) once a job of that level was published: a worker reads a level's
// stream only while the queue's set of levels (keys.Queue.Levels, added to by every publish of
// a job above level 1) names it. A queue whose jobs never named a level so has its one stream,
// one reader and the slot an idle reader holds, as before levels existed; a queue with levels
// has one reader per level used, read in level order (stream.Config.Levels). The set is read
// at Start, before the session's reading begins, then every LevelsRefresh; levels are never
// dropped within a session (the set only grows while the queue exists).
type levelsWatcher struct {
	w      *Worker
	router *message.Router
	sub    *stream.Subscriber
	parts  []keys.Queue
	// subscribed: the level streams the session reads (by stream key); owned by the loop
	// after Start.
	subscribed map[string]bool
	spell      outage.Spell
	loop       service.Loop
}

func newLevelsWatcher(w *Worker, router *message.Router, sub *stream.Subscriber) *levelsWatcher {
	l := &levelsWatcher{w: w, router: router, sub: sub, subscribed: map[string]bool{},
		spell: outage.Spell{Min: time.Second, Max: time.Minute}}
	for _, name := range w.parts {
		l.parts = append(l.parts, keys.New(w.cfg.Prefix, name))
	}
	return l
}

func (l *levelsWatcher) Name() string { return "levels watcher" }

// Start reads the levels once, before the router runs, so that the session's first reads
// already follow them; later finds are subscribed while the router runs.
func (l *levelsWatcher) Start(ctx context.Context) error {
	l.check(ctx)
	l.loop.Start(ctx, func(ctx context.Context) {
		select {
		case <-ctx.Done():
			return
		case <-l.router.Running():
		}
		service.Every(ctx, LevelsRefresh, func(ctx context.Context) {
			if !l.check(ctx) {
				return
			}
			// Subscribes only the handlers added since the router started.
			if err := l.router.RunHandlers(ctx); err != nil && ctx.Err() == nil {
				l.w.log.Error().Err(err).Msg("could not start reading a priority level's stream")
			}
		})
	})
	return nil
}

func (l *levelsWatcher) Stop() { l.loop.Stop() }

// check reads the queues' levels and adds a router handler for each level stream not read
// yet. It reports whether it added one.
func (l *levelsWatcher) check(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	levels, err := jobstate.QueueLevels(cctx, l.w.rdb, l.parts)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			if step := l.spell.Failed(time.Now()); step.Log {
				l.w.log.Warn().Err(err).Str("component", "levels watcher").Int("tries", step.Tries).
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
			l.router.AddConsumerHandler("conveyor:"+q.Tag()+":p"+strconv.Itoa(level), s, l.sub, l.w.handleMessage)
		}
	}
	return added
}

// levels is the subscriber's stream.Config.Levels: the level streams of one queue (of one
// partition) are a family, read in level order.
func (w *Worker) levels(streamKey string) (string, int) {
	q, ok := w.queue(streamKey)
	if !ok {
		return "", 0
	}
	return q.LevelStream(keys.MinPriority), q.Level()
}

// levelViews adds to queues the views of q at every level above 1 (keys.Queue.AtLevel), by
// their stream keys, so that a message of a level stream finds its queue.
func levelViews(queues map[string]*keys.Queue, q keys.Queue) {
	for level := keys.MinPriority + 1; level <= keys.MaxPriority; level++ {
		v := q.AtLevel(level)
		queues[v.Stream()] = &v
	}
}
