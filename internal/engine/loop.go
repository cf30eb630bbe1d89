package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/durable"
	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/service"
	"github.com/conveyorq/conveyor/stream"
)

// Loop is a worker's run loop: it waits for Redis, starts the completer and the history,
// reads its queues' partitions in sessions (one per partition layout), admits, runs and
// settles each message, and shuts down. The job's public side is Handler's. Set the fields,
// then call Run once.
type Loop struct {
	Rdb   redis.UniversalClient
	Store jobstate.Backend
	Log   zerolog.Logger
	// RouterLog and SubscriberLog are the Watermill loggers of the router and the subscriber.
	RouterLog, SubscriberLog watermill.LoggerAdapter

	Prefix, Name   string
	Queues         []string
	QueueWeights   map[string]int
	StrictPriority bool
	Concurrency    int
	ReadBatch      int
	// VisibilityTimeout, ShutdownTimeout, FlushInterval, Retention, MinRetention,
	// HistoryInterval, PauseCheckInterval, MaxResultBytes and MaxSnoozes are the worker's config.
	VisibilityTimeout, ShutdownTimeout, FlushInterval time.Duration
	Retention, MinRetention                           time.Duration
	HistoryInterval, PauseCheckInterval               time.Duration
	DisableHistory                                    bool
	MaxResultBytes, MaxSnoozes                        int
	Now                                               func() time.Time
	Delay                                             func(attempt int) time.Duration // the retry backoff
	Unmarshaller                                      stream.Unmarshaller
	Middleware                                        []message.HandlerMiddleware
	Replicas                                          *durable.Outcomes
	Cancels                                           *Cancels
	Handler                                           Handler
	// SealResult, when set, is applied to a completed attempt's result once it passed
	// MaxResultBytes, before it is written: encryption at rest (pipeline's WorkerConfig.Keys),
	// so that the limit bounds the plaintext.
	SealResult func(a *Attempt, result []byte) []byte
	// SealLogs, when set, seals an attempt's log lines (what follows the count of lines cut)
	// each time they are sent, with a progress report or the outcome: encryption at rest
	// (pipeline's WorkerConfig.Keys), since a handler may log what its payload holds. The
	// count stays plain, as do the attempt, outcome and end the scripts write beside it.
	SealLogs func(id string, lines []byte) []byte
	// Invalid wraps the errors of an unusable stored count (the caller's ErrInvalid).
	Invalid error
	// OnWritten tells the attempts whose outcomes were written (nil: nobody).
	OnWritten func(ts []jobstate.Transition, codes []script.Code, at time.Time)
	// Services are the session's services after the lease book and the settings watcher (the
	// heartbeat, the scheduler, the recoverers), over parts (partition names).
	Services func(parts []string) ([]service.Service, error)
	// Ready is closed once the loop reads and hears cancels (see Run).
	Ready chan struct{}

	readyOnce sync.Once
	// queues maps a stream key to its partition, for every partition read since Run began. It
	// only grows, so a message of an earlier session, or its release, still finds its queue.
	// Replaced whole, never changed in place.
	queues atomic.Pointer[map[string]*keys.Queue]
	parts  []string // the partitions read now (q, or q#i), in config order; Run's goroutine only
	counts []int    // the partition count of each of Queues that parts follows
	comp   *Completer
	evw    *events.Watcher

	mu sync.Mutex
	// troubled is the completer's last report, under mu: a new session's subscriber starts
	// paused while it holds.
	troubled bool
	sub      *stream.Subscriber // the current session's, under mu

	// Leases are the current session's leases of its queues' limits; limited names the
	// limited queues by stream key (admit.go).
	Leases  atomic.Pointer[LeaseBook]
	limited atomic.Pointer[map[string]bool]
	// ProgressWrites counts the progress reports written, for tests.
	ProgressWrites atomic.Int64
}

// eventsReadyWait bounds how long readiness waits for the events subscriptions.
const eventsReadyWait = 2 * time.Second

// Run consumes until ctx ends, then shuts down gracefully (see pipeline.Worker.Run).
func (l *Loop) Run(ctx context.Context) error {
	if err := l.waitForRedis(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // ctx ended while waiting: nothing ran, nothing to drain
		}
		return err
	}

	l.comp = NewCompleter(l.Store, jobstate.FinishConfig{Worker: l.Name, Retention: l.Retention,
		MinRetention: l.MinRetention}, l.FlushInterval, finishChunk, l.Concurrency, l.Log)
	l.comp.Replicas = l.Replicas
	l.comp.Now = l.Now
	l.comp.OnWritten = l.OnWritten
	if !l.DisableHistory {
		h := NewHistory(l.Store, l.HistoryInterval, l.Log)
		h.Now = l.Now
		l.comp.History = h
		go h.Run()
		// Deferred before the completer's close, so it runs after it: the last outcomes
		// the completer writes are counted and flushed too.
		defer h.Close()
	}
	// While Redis refuses the outcomes, new jobs are not read: they would run only to wait,
	// holding their slots, for writes that may not come back soon. The state outlives a
	// reading session, so the next one starts paused when the completer still has trouble.
	l.comp.OnTrouble = func(failing bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.troubled = failing
		if l.sub == nil {
			return
		}
		if failing {
			l.sub.Pause()
		} else {
			l.sub.Resume()
		}
	}
	go l.comp.Run()
	defer l.comp.Close() // after the last session closed its subscriber: every message is settled or released
	l.evw = events.NewWatcher(l.Rdb, events.Config{})
	defer l.evw.Close()

	l.partitionQueues()
	l.warnSharedName(ctx)
	started := l.Log.Info().Strs("queues", l.Queues)
	for _, n := range l.counts {
		if n > 1 { // the counts only say something when a queue is partitioned
			started = started.Ints("partitions", l.counts)
			break
		}
	}
	started.Int("concurrency", l.Concurrency).Msg("worker started")
	// A change of a queue's partition count ends the reading session as a shutdown would.
	// Running jobs finish or are put back, no attempt counted. A new session starts on the new
	// partitions. The old layout was closed and checked empty before the count changed, so
	// nothing is left behind in it.
	spell := outage.Spell{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for first := true; ; first = false {
		next, err := l.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			if first {
				return err
			}
			// Subscribing to the new partitions failed (Redis unreachable at that moment):
			// nothing runs, so try again rather than end a worker that was running.
			step := spell.Failed(time.Now())
			l.Log.Error().Err(err).Dur("retry_in", step.Wait.Round(time.Millisecond)).Int("tries", step.Tries).
				Msg("could not start reading the queues' partitions; trying again")
			select {
			case <-ctx.Done():
			case <-time.After(step.Wait):
			}
			continue
		}
		spell.OK(time.Now())
		for k, n := range next {
			if n != l.counts[k] {
				l.Log.Info().Str("queue", l.Queues[k]).Int("partitions", l.counts[k]).Int("partitions_now", n).
					Msg("following the queue's new partition count")
			}
		}
		l.counts = next
		l.partitionQueues()
	}
	l.Log.Info().Msg("worker stopped")
	return nil
}

// Running counts the jobs whose handlers run now; 0 between sessions.
func (l *Loop) Running() int {
	l.mu.Lock()
	sub := l.sub
	l.mu.Unlock()
	if sub == nil {
		return 0
	}
	return sub.Running()
}

// Troubled reports, for tests, whether the completer's writes fail, and whether the current
// session's subscriber has no read under way.
func (l *Loop) Troubled() (troubled, idle bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.troubled, l.sub != nil && l.sub.Reads() == 0
}

// PausedTopics reports, for tests, which queues the current session's subscriber has paused
// (every partition of the queue).
func (l *Loop) PausedTopics() map[string]bool {
	l.mu.Lock()
	sub := l.sub
	l.mu.Unlock()
	out := map[string]bool{}
	if sub == nil {
		return out
	}
	for _, part := range l.parts {
		q := keys.New(l.Prefix, part)
		if sub.TopicPaused(q.Stream()) {
			out[q.Name()] = true
		}
	}
	return out
}

// Finish chunks: transitions of one finish.lua call, entries of one release.lua call.
const (
	finishChunk  = 50
	releaseChunk = 100
)

// session reads the partitions of l.parts until ctx ends or a queue's partition count
// changes. Then it shuts the reading down gracefully, as Run does. It returns the new counts
// after a change, nil when ctx ended.
func (l *Loop) session(ctx context.Context) ([]int, error) {
	// The subscriber runs each message through the chain on runners of its own; the router
	// only manages the subscriptions. Set before the first Subscribe. The message is acked or
	// nacked after as a router's handler does, for middleware that watches it.
	var chain message.HandlerFunc
	sub, err := stream.NewSubscriber(stream.Config{
		Run: func(msg *message.Message) {
			if _, err := chain(msg); err != nil {
				msg.Nack()
			} else {
				msg.Ack()
			}
		},
		RouterHandler: l.routerHandler,
		Client:        l.Rdb,
		Group:         keys.Group,
		Consumer:      l.Name,
		Unmarshaller:  l.Unmarshaller,
		Concurrency:   l.Concurrency,
		BatchSize:     l.ReadBatch,
		LeaseInterval: l.VisibilityTimeout / 3,
		ManualSettle:  true,
		CloseTimeout:  l.ShutdownTimeout,
		OnRelease:     l.release,
		Prepare:       l.admitRead,
		Logger:        l.SubscriberLog,
		// QueueWeights and StrictPriority: one class per queue, its partitions included.
		Priority:       l.priority(),
		StrictPriority: l.StrictPriority,
		// A queue's priority levels: its level streams are read in level order.
		Levels: l.levels,
	})
	if err != nil {
		return nil, err
	}
	defer sub.Close() // after the background parts stop; it settles or releases every message
	// The subscriber cancels what still runs after ShutdownTimeout; the router waits a little
	// longer for those handlers to return.
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: l.ShutdownTimeout + time.Second}, l.RouterLog)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.sub = sub
	if l.troubled {
		sub.Pause()
	}
	l.mu.Unlock()
	chain = l.chain(sub)
	// Cancels reach the handlers through the partitions' events; a confirmation of a
	// subscription after a drop renews the leases at once, which finds the jobs canceled
	// meanwhile (cancel.go). The worker is Ready once they are confirmed.
	confirmed := make(chan struct{}, len(l.parts))
	for _, name := range l.parts {
		q := keys.New(l.Prefix, name)
		router.AddConsumerHandler(handlerName(q), q.Stream(), sub, l.handle)
		var once sync.Once
		stop := l.evw.ListenGaps(ctx, q.Events(), l.Cancels.Heard(q.Events()), func() {
			sub.RenewNow()
			once.Do(func() { confirmed <- struct{}{} })
		})
		defer stop()
	}

	sctx, endSession := context.WithCancel(ctx)
	defer endSession()
	// The services run with the session: they end with it, and stopServices waits for them
	// once the reading has ended.
	watcher := &PartitionWatcher{Changed: endSession}
	levels := NewLevelsWatcher(l.Rdb, l.Prefix, l.parts, router, sub, l.handle, l.Log)
	services, err := l.services(sub, watcher, levels, router)
	if err != nil {
		return nil, err
	}
	stopServices, err := service.StartAll(sctx, services...)
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	defer stopServices()
	// Read here, not in the goroutine: it may outlive the session, and Run rewrites l.parts
	// for the next one.
	parts := len(l.parts)
	go func() {
		select {
		case <-router.Running():
		case <-sctx.Done():
			return
		}
		if l.Store.Events(sctx) != events.None {
			// Bounded: a server that refuses the subscriptions leaves cancels to the lease
			// renewal, and must not keep the worker from being ready.
			limit := time.NewTimer(eventsReadyWait)
			defer limit.Stop()
			for range parts {
				select {
				case <-confirmed:
				case <-limit.C:
					l.readyOnce.Do(func() { close(l.Ready) })
					return
				case <-sctx.Done():
					return
				}
			}
		}
		l.readyOnce.Do(func() { close(l.Ready) })
	}()
	err = router.Run(sctx)
	stopServices()
	if err != nil {
		return nil, fmt.Errorf("pipeline: router: %w", err)
	}
	return watcher.Next, nil // written before its Stop returned
}

// services lists the background services of one reading session over l.parts, in start
// order (stopped in reverse). First the lease book, then the settings watcher, which applies
// the paused queues to the session's subscriber before anything is read. Then the caller's.
func (l *Loop) services(sub *stream.Subscriber, watcher *PartitionWatcher, levels *LevelsWatcher, router *message.Router) ([]service.Service, error) {
	book := NewLeaseBook(l.Store, l.Log, l.Name, l.VisibilityTimeout, l.Concurrency, l.ReadBatch)
	l.Leases.Store(book)
	parts := append([]string(nil), l.parts...)
	list := []service.Service{book, &SettingsWatcher{Store: l.Store, Queues: l.Queues,
		PollEvery: l.PauseCheckInterval, Log: l.Log,
		Pause:      NewPauseWatcher(l.Rdb, l.Prefix, l.Name, parts, l.Queues, sub, l.Log),
		ReadLimits: func(ctx context.Context) { l.readLimits(ctx, book, parts) },
		Levels:     levels, Router: router, Parts: watcher,
		Counts: append([]int(nil), l.counts...), ReadCounts: l.readCounts}}
	more, err := l.Services(parts)
	if err != nil {
		return nil, err
	}
	return append(list, more...), nil
}

// warnSharedName warns when this worker's name is the consumer name of a worker active in
// one of its queues within the visibility timeout. Two live workers sharing a name take each
// other's entries for orphans of their own lost reads (see package stream). Their renewals
// also keep each other's jobs alive. A worker that stopped within that time (a restart with a
// fixed name) looks the same, hence a warning and not a refusal. Errors (no group yet) are
// ignored: this is advice.
func (l *Loop) warnSharedName(ctx context.Context) {
	for _, name := range l.parts {
		q := keys.New(l.Prefix, name)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		consumers, err := l.Store.Consumers(cctx, q)
		cancel()
		if err != nil {
			continue
		}
		for _, c := range consumers {
			if c.Name == l.Name && c.Idle < l.VisibilityTimeout {
				l.Log.Warn().Str("queue", name).Dur("last_active", c.Idle.Round(time.Millisecond)).Int64("pending", c.Pending).
					Msg("another worker with this name was active in the queue just now; if it still runs, the two take each other's jobs: give every worker its own name")
			}
		}
	}
}

// waitForRedis pings until Redis answers and the scripts are loaded (pipelined EVALSHA needs
// them), or ctx ends. An outage is waited out; a refusal (wrong password, an ACL that lacks a
// command, a misconfigured server) is returned at once, since waiting cannot fix it.
func (l *Loop) waitForRedis(ctx context.Context) error {
	spell := outage.Spell{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		err := l.Rdb.Ping(ctx).Err()
		if err == nil {
			err = script.Load(ctx, l.Rdb, jobstate.WorkerScripts()...)
		}
		if err == nil {
			// Through the publishers' one door, with no bound: the bound is on queues made by
			// publishing (ClientConfig.MaxQueues), and a worker's queues are its operator's.
			for _, name := range l.Queues {
				if _, err = l.Store.AddQueue(ctx, jobstate.AddQueueParams{Queue: name, MaxQueues: math.MaxInt}); err != nil {
					break
				}
			}
		}
		if err == nil {
			l.counts, err = l.readCounts(ctx)
		}
		if err == nil {
			if lasted, waited := spell.OK(time.Now()); waited {
				lasted = lasted.Round(time.Millisecond)
				l.Log.Info().Dur("after", lasted).Msg("connected to Redis after " + lasted.String())
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if Permanent(err) || errors.Is(err, l.Invalid) || rediserr.IsAuth(err) || TLSRefused(err) {
			return fmt.Errorf("pipeline: redis refused the worker: %w", err)
		}
		step := spell.Failed(time.Now())
		l.Log.Warn().Err(err).Dur("retry_in", step.Wait.Round(time.Millisecond)).Int("tries", step.Tries).
			Dur("failing_for", step.FailingFor.Round(time.Millisecond)).Msg("cannot reach Redis; waiting for it")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(step.Wait):
		}
	}
}

// readCounts reads the partition count of each of the worker's queues in one round trip.
func (l *Loop) readCounts(ctx context.Context) ([]int, error) {
	counts, err := l.Store.PartitionCounts(ctx, l.Queues)
	if errors.As(err, new(*jobstate.CountError)) {
		return nil, fmt.Errorf("%w: %w", l.Invalid, err)
	}
	return counts, err
}

// partitionQueues names every partition the worker reads, from l.counts: one stream
// subscription, scheduler slot and recoverer each.
func (l *Loop) partitionQueues() {
	l.parts = nil
	queues := make(map[string]*keys.Queue)
	if old := l.queues.Load(); old != nil {
		maps.Copy(queues, *old)
	}
	for k, name := range l.Queues {
		for i := range l.counts[k] {
			tag := keys.PartitionName(name, i, l.counts[k])
			q := keys.New(l.Prefix, tag)
			l.parts = append(l.parts, tag)
			queues[q.Stream()] = &q
			levelViews(queues, q)
		}
	}
	l.queues.Store(&queues)
}

// Parts are the partitions the current session reads; Run's goroutine (and its services, built
// by Services) only.
func (l *Loop) Parts() []string { return l.parts }

// queue is the partition of a stream key the worker read since it started.
func (l *Loop) queue(streamKey string) (*keys.Queue, bool) {
	q, ok := (*l.queues.Load())[streamKey]
	return q, ok
}

// levels is the subscriber's stream.Config.Levels: the level streams of one queue (of one
// partition) are a family, read in level order.
func (l *Loop) levels(streamKey string) (string, int) {
	q, ok := l.queue(streamKey)
	if !ok {
		return "", 0
	}
	return q.LevelStream(keys.MinPriority), q.Level()
}

// levelViews adds to queues the views of q at every level above 1 (keys.Queue.AtLevel), by
// their stream keys. So a message of a level stream finds its queue.
func levelViews(queues map[string]*keys.Queue, q keys.Queue) {
	for level := keys.MinPriority + 1; level <= keys.MaxPriority; level++ {
		v := q.AtLevel(level)
		queues[v.Stream()] = &v
	}
}

// priority is the subscriber's stream.Config.Priority of QueueWeights and StrictPriority: a
// stream's class is its queue, weighted by QueueWeights (1 when missing). Nil when neither is
// set: first come, first served.
func (l *Loop) priority() func(string) (string, int) {
	if len(l.QueueWeights) == 0 && !l.StrictPriority {
		return nil
	}
	return func(streamKey string) (string, int) {
		q, ok := l.queue(streamKey)
		if !ok {
			return "", 1
		}
		return q.Name(), max(1, l.QueueWeights[q.Name()])
	}
}

// chain is what runs each message: settleAfter outermost, so that it sees whatever the chain
// did, then the middleware, first added outermost, as a router composes them, then handle.
func (l *Loop) chain(sub *stream.Subscriber) message.HandlerFunc {
	h := func(msg *message.Message) ([]*message.Message, error) { return nil, l.handle(msg) }
	for i := len(l.Middleware) - 1; i >= 0; i-- {
		h = l.Middleware[i](h)
	}
	return l.settleAfter(sub)(h)
}

// handlerName is the router handler's name for the reading of q's stream, as the middleware's
// message.HandlerNameFromCtx reads it: "conveyor:" and the partition, plus ":p" and the level
// for a level stream.
func handlerName(q keys.Queue) string {
	if level := q.Level(); level > keys.MinPriority {
		return "conveyor:" + q.Tag() + ":p" + strconv.Itoa(level)
	}
	return "conveyor:" + q.Tag()
}

// routerHandler is stream.Config.RouterHandler: the handlerName of a stream's partition.
func (l *Loop) routerHandler(streamKey string) string {
	if q, ok := l.queue(streamKey); ok {
		return handlerName(*q)
	}
	return ""
}

// settleAfter frees a job's slot once the whole middleware chain has returned. The subscriber
// runs in ManualSettle mode: the slot is held until the job's outcome is written, which
// handle waits for. It returns no error, so the router does nothing more with the message.
// An error that is not the Handler's (Handler.Ours) means a middleware refused the job before
// handle ran, or replaced its error. It is written as a failed attempt. Fencing refuses that
// if the handler's own outcome was written already.
//
// A message of another publisher is adopted first (adopt), so that the middleware sees a job.
// One that is not to run now (scheduled, or refused as a duplicate) never reaches it: it is
// no attempt.
func (l *Loop) settleAfter(sub *stream.Subscriber) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			defer sub.Settle(msg)
			if msg.Metadata[MetaForeign] != "" && !l.adopt(msg) {
				return nil, nil
			}
			if !l.admit(msg) {
				return nil, nil // deferred by a limit (no attempt), or not to run
			}
			// Its slots go back to the worker's lease once its outcome is written.
			defer GrantOf(msg.Context()).GiveBack()
			if q, ok := l.queue(msg.Metadata[stream.StreamKey]); ok {
				defer l.Cancels.Done(l.Cancels.Register(q, sub, msg, msg.Metadata[MetaType]))
			}
			if _, err := h(msg); err != nil && !l.Handler.Ours(err) {
				l.refused(msg, err)
			}
			return nil, nil
		}
	}
}

// release puts back the entries a closing subscription still holds (stream.Config.OnRelease).
func (l *Loop) release(ctx context.Context, streamKey string, ids []string) {
	q, ok := l.queue(streamKey)
	if !ok {
		return
	}
	released := 0
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), releaseChunk)]
		ids = ids[len(chunk):]
		rel, err := l.Store.Release(ctx, *q, jobstate.ReleaseParams{Now: l.Now(), Entries: chunk})
		if err != nil {
			l.Log.Error().Err(err).Str("queue", q.Name()).Int("jobs", len(chunk)).
				Msg("could not put back unfinished jobs; they will be recovered after the visibility timeout")
			continue
		}
		released += rel.Jobs
	}
	if released > 0 {
		l.Log.Info().Str("queue", q.Name()).Int("num_released", released).Msg("put back unfinished jobs")
	}
}
