package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/durable"
	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/internal/service"
	"github.com/conveyorq/conveyor/internal/tracing"
	"github.com/conveyorq/conveyor/recovery"
	"github.com/conveyorq/conveyor/status"
	"github.com/conveyorq/conveyor/stream"
)

// Defaults of WorkerConfig.
const (
	DefaultQueue             = "default"
	DefaultConcurrency       = 10
	DefaultVisibilityTimeout = recovery.DefaultVisibilityTimeout
	DefaultRecoveryInterval  = recovery.DefaultInterval
	DefaultShutdownTimeout   = 30 * time.Second
	defaultFlushInterval     = 2 * time.Millisecond
	DefaultMaxResultBytes    = 1 << 20
	defaultMaxSnoozes        = 100
	maxErrorBytes            = 4 << 10
	// sendBackBytes bounds the payloads a worker sends back with a job's outcome. The finish
	// script then need not read the stream entry again; larger ones are read in Redis.
	sendBackBytes = 8 << 10
)

// WorkerConfig configures a Worker. Zero fields take the documented defaults.
type WorkerConfig struct {
	// Queues to consume. Defaults to ["default"].
	Queues []string
	// QueueWeights weighs the queues against each other when they compete for the worker's
	// slots (every slot taken, readers waiting). Each queue gets a share of the jobs started in
	// proportion to its weight. So a low queue under a flood of high work still gets its share.
	// A weight is at least 1; a queue of Queues missing here weighs 1. A queue's partitions
	// share its weight. While slots are free every queue is read at once; reads stay batched.
	// A slot that frees while a queue owed it is away reading waits for that queue's read, up
	// to 10 ms. See stream.Config.Priority. Empty: queues are served first come, first served.
	QueueWeights map[string]int
	// StrictPriority makes QueueWeights ranks. While a queue of a higher weight has work, no
	// queue of a lower weight is read. Having work means its last read filled what it asked
	// for, or it waits for slots. Equal weights are served first come, first served. See
	// stream.Config.StrictPriority.
	StrictPriority bool
	// Prefix starts every key. Defaults to "conveyor".
	Prefix string
	// Name is the worker's consumer name in each queue's group; it shows as a job's `worker`.
	// Two live workers must not share one. Defaults to hostname-pid-random.
	Name string
	// Concurrency bounds the jobs this worker runs at once, across its queues. Defaults to
	// DefaultConcurrency.
	Concurrency int
	// ReadBatch bounds the entries one stream read takes. Defaults to Concurrency, at most 500.
	ReadBatch int
	// Backoff is the retry delay policy. Zero fields take Backoff's defaults (1s doubling up
	// to 10m, with jitter).
	Backoff Backoff
	// Retention is how long a completed or canceled job's record is kept, unless the job was
	// enqueued WithRetention. Defaults to DefaultRetention (24h); RetainNone deletes records as
	// jobs finish. Dead jobs are kept until replayed or purged.
	Retention time.Duration
	// MinRetention is the shortest time any finished job's record is kept, whatever its
	// retention. With RetainNone what is kept is a small tombstone (status and completed_at).
	// A publish that go-redis sends again after its reply was lost finds the job by it, and
	// makes no second one. So MinRetention must exceed the producers' retry horizon. That is
	// about (MaxRetries+1) x (ReadTimeout + WriteTimeout + MaxRetryBackoff) of their go-redis
	// options: 26s with go-redis's defaults. Defaults to DefaultMinRetention (1m).
	MinRetention time.Duration
	// VisibilityTimeout is how long a job may go without a lease renewal before another worker
	// recovers it. The worker renews its jobs' leases every third of it. Defaults to
	// DefaultVisibilityTimeout (30s).
	VisibilityTimeout time.Duration
	// RecoveryInterval is the time between two recovery scans. Defaults to
	// DefaultRecoveryInterval (5s).
	RecoveryInterval time.Duration
	// RecoveryLockTTL is the TTL of a queue's recovery lock, which a worker holds while it
	// scans the queue. A worker that dies mid-scan leaves the lock behind, and no worker
	// recovers that queue's jobs until it expires. Defaults to recovery.DefaultLockTTLFor the
	// visibility timeout: a third of it, from 1s to 10s (10s with the default 30s timeout).
	RecoveryLockTTL time.Duration
	// ShutdownTimeout is how long Run waits, once its context ends, for running jobs to finish
	// before it cancels them and puts them back in the stream. Defaults to
	// DefaultShutdownTimeout (30s).
	ShutdownTimeout time.Duration
	// FlushInterval is how long finished jobs' transitions are collected before they are
	// written in one batch. Defaults to 2ms.
	FlushInterval time.Duration
	// MaxResultBytes bounds a handler's result; a larger one fails the job. Defaults to
	// DefaultMaxResultBytes (1 MiB).
	MaxResultBytes int
	// MaxSnoozes bounds the times a job may snooze (Snooze, RetryAt); the next snooze fails it.
	// Defaults to 100.
	MaxSnoozes int
	// DefaultType is the job type of a message without a metakey.Type metadata key that
	// another Watermill publisher (say, watermill-redisstream's) wrote into the worker's
	// queues. Such a message is adopted as a job on its first delivery (see Worker). Empty:
	// such messages go to the dead set, saying why.
	DefaultType string
	// DisableScheduler and DisableRecovery turn off this worker's delayed-job scheduler and
	// recoverer (another process must run them).
	DisableScheduler bool
	DisableRecovery  bool
	// Periodic are the worker's own periodic schedules. They are stored in Redis when the
	// worker starts, replacing definitions of their names but keeping their progress and
	// pause. Every worker that does not DisablePeriodic runs them, with every other stored
	// schedule. See Periodic.
	Periodic []Periodic
	// DisablePeriodic leaves the periodic scheduler off this worker: it neither registers
	// Periodic nor enqueues any schedule's ticks.
	DisablePeriodic bool
	// Replicas makes the worker wait, after writing job outcomes, until this many replicas
	// have them. ReplicaTimeout bounds the wait (default DefaultReplicaTimeout); zero waits for
	// none. Outcomes that fewer replicas confirm are not written again, since the master has
	// them. They are counted (UnreplicatedWrites) and logged. A failover before a replica has
	// one makes its job run again (docs/OPERATIONS.md "Durable publish").
	Replicas       int
	ReplicaTimeout time.Duration
	// Logger receives the worker's logs; the zero Logger discards them. Every line about a job
	// carries queue, job_id, type and attempt; the background parts add component
	// (subscriber, scheduler, recoverer, completer, router). Durations are zerolog Dur fields:
	// set zerolog.DurationFieldFormat to zerolog.DurationFormatString, as the conveyor
	// command does, to log them with their units (retry_in=756ms).
	Logger zerolog.Logger
	// PauseCheckInterval is how often the worker reads which queues are paused
	// (Inspector.Pause), besides when a notice says they changed. Defaults to 1s.
	PauseCheckInterval time.Duration
	// HistoryInterval is how often the worker adds its outcomes to its queues' history in
	// Redis (Inspector.History), in one pipelined call. It counts them in memory meanwhile, so
	// a job costs no call more. A worker that stops abruptly loses at most one interval of the
	// history (not of the counters). Defaults to 5s.
	HistoryInterval time.Duration
	// DisableHistory leaves the worker's outcomes out of the history.
	DisableHistory bool
	// HeartbeatInterval is how often the worker writes its heartbeat record, which
	// Inspector.Workers (`conveyor workers`, GET /v1/workers, the dashboard's Workers page)
	// lists: name, host, pid, version, queues, concurrency, running jobs. The record expires
	// after three intervals without a beat and is removed when the worker stops. Defaults to
	// DefaultHeartbeatInterval (5s).
	HeartbeatInterval time.Duration
	// DisableHeartbeat leaves the heartbeat off: the worker is not listed by Inspector.Workers,
	// and `queues delete` cannot warn that it reads the queue.
	DisableHeartbeat bool
	// Hooks are told about the worker's background work (promotions, recoveries, the recovery
	// lock), for metrics; see package metrics. The zero value tells nobody.
	Hooks WorkerHooks
	// TracerProvider records a span per attempt, child of the job's publish span, which the
	// handler's context carries, and the recoverer's spans (see "Tracing" in the README).
	// Defaults to OpenTelemetry's global provider (otel.GetTracerProvider) as it is at each
	// attempt. Until the application sets one, nothing is recorded. A job's trace context then
	// reaches its handler as a remote span context.
	TracerProvider trace.TracerProvider
	// Now is the worker's wall clock, read for the times it stores or sends to Redis. Those
	// are an attempt's start and end, a retry's or a snooze's due time, the history's buckets,
	// the heartbeat record, and the times given to release and adoption. Due times, promotion,
	// recovery's idle times and flow-control leases go by Redis's clock. Waits, timeouts and
	// intervals go by the monotonic clock. So a host clock that steps moves only what Now
	// stamps, and an attempt's Took in the hooks when a step falls inside it. Tests and the
	// torture suite step it here. Defaults to time.Now.
	Now func() time.Time
}

func (c WorkerConfig) withDefaults() WorkerConfig {
	if len(c.Queues) == 0 {
		c.Queues = []string{DefaultQueue}
	}
	c.Prefix = cmp.Or(c.Prefix, keys.DefaultPrefix)
	if c.Name == "" {
		c.Name = stream.DefaultConsumer()
	}
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.ReadBatch = cmp.Or(c.ReadBatch, min(c.Concurrency, 500))
	c.Backoff = c.Backoff.withDefaults()
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.MinRetention = cmp.Or(c.MinRetention, DefaultMinRetention)
	c.VisibilityTimeout = cmp.Or(c.VisibilityTimeout, DefaultVisibilityTimeout)
	c.RecoveryInterval = cmp.Or(c.RecoveryInterval, DefaultRecoveryInterval)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.FlushInterval = cmp.Or(c.FlushInterval, defaultFlushInterval)
	c.MaxResultBytes = cmp.Or(c.MaxResultBytes, DefaultMaxResultBytes)
	c.MaxSnoozes = cmp.Or(c.MaxSnoozes, defaultMaxSnoozes)
	c.PauseCheckInterval = cmp.Or(c.PauseCheckInterval, defaultPauseCheckInterval)
	c.HistoryInterval = cmp.Or(c.HistoryInterval, defaultHistoryInterval)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, DefaultHeartbeatInterval)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// validate checks a config that withDefaults filled in. The convention, for every config in
// Conveyor: zero means the documented default. A negative or otherwise unusable value is an
// error (wrapping ErrInvalid), never silently replaced. A feature is turned off by an explicit
// Disable field. RetainNone and NoRetries are the named exceptions. Every constructor that
// takes a config (NewWorker, NewClient, delayed.New, ...) returns that error. So an unusable
// config fails where it is built, not at some later call.
func (c WorkerConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, invalid(format, args...)) }
	for _, q := range c.Queues {
		if err := keys.ValidateQueue(q); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrInvalid, err))
		}
	}
	if err := keys.ValidateQueue(c.Name); err != nil {
		bad("invalid worker name: %v", err)
	}
	for q, wt := range c.QueueWeights {
		if !slices.Contains(c.Queues, q) {
			bad("queue weight for %q, which is not one of the worker's queues", q)
		}
		if wt < 1 {
			bad("queue weight %d of %q must be at least 1", wt, q)
		}
	}
	if c.Concurrency < 1 {
		bad("concurrency %d must be at least 1", c.Concurrency)
	}
	if c.ReadBatch < 1 || c.ReadBatch > maxReadBatch {
		bad("read batch %d outside 1..%d", c.ReadBatch, maxReadBatch)
	}
	if c.MaxResultBytes < 1 {
		bad("max result bytes %d must be at least 1", c.MaxResultBytes)
	}
	if c.Retention < 0 && c.Retention != RetainNone {
		bad("retention %s is negative (RetainNone keeps nothing)", c.Retention)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"shutdown timeout", c.ShutdownTimeout}, {"recovery interval", c.RecoveryInterval}, {"recovery lock TTL", c.RecoveryLockTTL},
		{"flush interval", c.FlushInterval}, {"min retention", c.MinRetention}, {"pause check interval", c.PauseCheckInterval},
		{"history interval", c.HistoryInterval},
		{"heartbeat interval", c.HeartbeatInterval},
		{"backoff base", c.Backoff.Base}, {"backoff max", c.Backoff.Max}} {
		if d.d < 0 {
			bad("%s %s is negative", d.name, d.d)
		}
	}
	if err := (replicas{n: c.Replicas, timeout: c.ReplicaTimeout}).check("worker"); err != nil {
		errs = append(errs, err)
	}
	if c.VisibilityTimeout < MinVisibilityTimeout {
		bad("visibility timeout %s is under %s (lease renewal runs every third of it)", c.VisibilityTimeout, MinVisibilityTimeout)
	}
	if err := c.validateServices(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalid, err))
	}
	return errors.Join(errs...)
}

// Bounds of WorkerConfig.
const (
	maxReadBatch = 1000
	// MinVisibilityTimeout bounds WorkerConfig.VisibilityTimeout from below.
	MinVisibilityTimeout = 300 * time.Millisecond
)

// transition is one state change a worker asks for (see jobstate for its constructors);
// finish.lua applies it, fenced by its entry.
type transition = jobstate.Transition

// Worker runs handlers for the jobs of its queues. Register handlers with Handle, then call
// Run. A batching Watermill Subscriber (package stream) reads jobs from each queue's stream in
// consumer group "conveyor". A Watermill router runs them, so middleware (Use) wraps every job.
type Worker struct {
	rdb   redis.UniversalClient
	store jobstate.Backend
	cfg   WorkerConfig
	log   zerolog.Logger

	mu         sync.Mutex
	handlers   map[string]HandlerFunc
	middleware []message.HandlerMiddleware

	running   atomic.Bool
	ready     chan struct{}
	readyOnce sync.Once
	// queues maps a stream key to its partition, for every partition read since the worker
	// started (partitionQueues). It only grows, so a message of an earlier session, or its
	// release, still finds its queue. Replaced whole, never changed in place.
	queues atomic.Pointer[map[string]*keys.Queue]
	parts  []string // the partitions read now (q, or q#i), in config order; Run's goroutine only
	counts []int    // the partition count of each of cfg.Queues that parts follows
	// troubled is the completer's last report (onTrouble), under mu: a new session's
	// subscriber starts paused while it holds.
	troubled bool
	comp     *engine.Completer
	attempts *attempts // tells WorkerHooks.Attempts (attempts.go)
	// replicas is the outcome writes' replica wait (WorkerConfig.Replicas; durable.go).
	replicas *durable.Outcomes
	sub      *stream.Subscriber // the current session's, under mu
	// leases are the current session's leases of its queues' limits, which limited names by
	// stream key (admit.go).
	leases  atomic.Pointer[engine.LeaseBook]
	limited atomic.Pointer[map[string]bool]
	// progressWrites counts the progress reports written (Job.Progress), for tests.
	progressWrites atomic.Int64
	// cancels stops the handlers of jobs canceled while they run (engine.Cancels); evw holds its
	// events subscriptions, one per partition read.
	cancels *engine.Cancels
	evw     *events.Watcher
	tracer  tracing.Tracer
	// startedAt is when Run began, for the heartbeat record.
	startedAt time.Time
}

// NewWorker returns a Worker over rdb (a standalone, cluster or failover client), or the error,
// wrapping ErrInvalid, of an unusable config.
func NewWorker(rdb redis.UniversalClient, cfg WorkerConfig) (*Worker, error) {
	if rdb == nil {
		panic("pipeline: NewWorker with a nil Redis client")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{
		rdb:      rdb,
		store:    jobstate.NewStore(rdb, cfg.Prefix),
		cfg:      cfg,
		log:      cfg.Logger.With().Str("worker", cfg.Name).Logger(),
		handlers: make(map[string]HandlerFunc),
		ready:    make(chan struct{}),
		tracer:   tracing.New(cfg.TracerProvider),
	}
	w.replicas = durable.NewOutcomes(cfg.Replicas, cfg.ReplicaTimeout)
	w.cancels = engine.NewCancels(w.store, w.log, cfg.VisibilityTimeout/3, cfg.Now)
	return w, nil
}

// Name is the worker's consumer name.
func (w *Worker) Name() string { return w.cfg.Name }

// Handle registers the handler of a job type. It panics on an empty type, a nil handler, a
// type registered twice, or a call after Run started: those are programming errors.
func (w *Worker) Handle(jobType string, h HandlerFunc) {
	if err := validateType(jobType); err != nil || h == nil {
		panic(fmt.Sprintf("pipeline: Handle(%q): invalid type or nil handler", jobType))
	}
	if w.running.Load() {
		panic("pipeline: Handle after Run")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.handlers[jobType]; dup {
		panic(fmt.Sprintf("pipeline: Handle(%q) registered twice", jobType))
	}
	w.handlers[jobType] = h
}

// Use adds Watermill middleware around every job's handling (outermost first). The message
// carries the job id as UUID, the payload, and metadata including metakey.EntryType (the
// job's type) and the job field (attempt, retries, timeout and type).
//
// The next handler returns nil when the job completed. When it did not, it returns a
// *JobError, only once the outcome is written (retry, dead) or known (canceled, lost,
// abandoned). So a metrics, tracing or logging middleware can count a failed job as a
// failure. Whatever a middleware returns, the job's slot is freed afterwards. Nothing is
// handed out again because of an error. A middleware that returns an error without calling
// the next handler refuses the job. That counts as a failed attempt with the middleware's
// error: retried with backoff, or dead when out of retries.
func (w *Worker) Use(mw ...message.HandlerMiddleware) {
	if w.running.Load() {
		panic("pipeline: Use after Run")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.middleware = append(w.middleware, mw...)
}

// Ready is closed once the worker is consuming and hears cancels. Its subscriptions to its
// queues' job events are then confirmed, or eventsReadyWait (2 s) passed without them. The
// lease renewal then stands in for them.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// Running counts the jobs whose handlers run now (their messages were handed to the router
// and have not settled): what a shutdown waits for, up to ShutdownTimeout. It is 0 before Run
// consumes and once it has returned.
func (w *Worker) Running() int {
	w.mu.Lock()
	sub := w.sub
	w.mu.Unlock()
	if sub == nil {
		return 0
	}
	return sub.Running()
}

// Run consumes until ctx ends, then shuts down gracefully. It stops reading, waits up to
// ShutdownTimeout for running jobs, and cancels and puts back those still running. It writes
// every pending transition and returns nil. Its background services run while it reads (see
// services.go). They are the delayed scheduler, a recoverer per queue unless disabled, and the
// partition watcher. They stop, in reverse order, once the reading has ended. While Redis is
// unreachable at start, Run waits for it (logging) until ctx ends. If Redis refuses it (a
// wrong password, an ACL without a needed command), Run returns that error at once. A Worker
// runs once.
//
// Run follows a change of its queues' partition counts (Inspector.CreateQueue) by itself. It
// reads the counts every 5 s. When one changed, it ends its reading as on a shutdown, without
// returning. Running jobs of every queue finish, or are put back after ShutdownTimeout on the
// same attempt. Then it reads the new partitions, with their scheduler and recoverers. A
// stored count it cannot use is logged, and the partitions it reads are kept.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	nHandlers := len(w.handlers)
	w.mu.Unlock()
	if nHandlers == 0 {
		return errors.New("pipeline: worker has no handlers")
	}
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("pipeline: worker already ran")
	}
	w.startedAt = w.cfg.Now()
	if err := w.waitForRedis(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // ctx ended while waiting: nothing ran, nothing to drain
		}
		return err
	}

	w.comp = engine.NewCompleter(w.store, jobstate.FinishConfig{Worker: w.cfg.Name, Retention: w.cfg.Retention,
		MinRetention: w.cfg.MinRetention}, w.cfg.FlushInterval, finishChunk, w.cfg.Concurrency, w.log)
	w.comp.Replicas = w.replicas
	w.comp.Now = w.cfg.Now
	if w.attempts = newAttempts(w.cfg.Hooks.Attempts); w.attempts != nil {
		w.comp.OnWritten = w.attempts.written
	}
	if !w.cfg.DisableHistory {
		h := engine.NewHistory(w.store, w.cfg.HistoryInterval, w.log)
		h.Now = w.cfg.Now
		w.comp.History = h
		go h.Run()
		// Deferred before the completer's close, so it runs after it: the last outcomes
		// the completer writes are counted and flushed too.
		defer h.Close()
	}
	// While Redis refuses the outcomes, new jobs are not read: they would run only to wait,
	// holding their slots, for writes that may not come back soon. The state outlives a
	// reading session, so the next one starts paused when the completer still has trouble.
	w.comp.OnTrouble = func(failing bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.troubled = failing
		if w.sub == nil {
			return
		}
		if failing {
			w.sub.Pause()
		} else {
			w.sub.Resume()
		}
	}
	go w.comp.Run()
	defer w.comp.Close() // after the last session closed its subscriber: every message is settled or released
	w.evw = events.NewWatcher(w.rdb, events.Config{})
	defer w.evw.Close()

	w.partitionQueues()
	w.warnSharedName(ctx)
	started := w.log.Info().Strs("queues", w.cfg.Queues)
	for _, n := range w.counts {
		if n > 1 { // the counts only say something when a queue is partitioned
			started = started.Ints("partitions", w.counts)
			break
		}
	}
	started.Int("concurrency", w.cfg.Concurrency).Msg("worker started")
	// A change of a queue's partition count ends the reading session as a shutdown would.
	// Running jobs finish or are put back, no attempt counted. A new session starts on the new
	// partitions. The old layout was closed and checked empty before the count changed, so
	// nothing is left behind in it.
	spell := outage.Spell{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for first := true; ; first = false {
		next, err := w.session(ctx)
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
			w.log.Error().Err(err).Dur("retry_in", step.Wait.Round(time.Millisecond)).Int("tries", step.Tries).
				Msg("could not start reading the queues' partitions; trying again")
			select {
			case <-ctx.Done():
			case <-time.After(step.Wait):
			}
			continue
		}
		spell.OK(time.Now())
		for k, n := range next {
			if n != w.counts[k] {
				w.log.Info().Str("queue", w.cfg.Queues[k]).Int("partitions", w.counts[k]).Int("partitions_now", n).
					Msg("following the queue's new partition count")
			}
		}
		w.counts = next
		w.partitionQueues()
	}
	w.log.Info().Msg("worker stopped")
	return nil
}

// session reads the partitions of w.parts until ctx ends or a queue's partition count
// changes. Then it shuts the reading down gracefully, as Run does. It returns the new counts
// after a change, nil when ctx ended.
func (w *Worker) session(ctx context.Context) ([]int, error) {
	wlog := WatermillLogger(w.log.With().Str("component", "router").Logger())
	sub, err := stream.NewSubscriber(stream.Config{
		Client:        w.rdb,
		Group:         keys.Group,
		Consumer:      w.cfg.Name,
		Unmarshaller:  entryUnmarshaller{defaultType: w.cfg.DefaultType},
		Concurrency:   w.cfg.Concurrency,
		BatchSize:     w.cfg.ReadBatch,
		LeaseInterval: w.cfg.VisibilityTimeout / 3,
		ManualSettle:  true,
		CloseTimeout:  w.cfg.ShutdownTimeout,
		OnRelease:     w.release,
		Prepare:       w.admitRead,
		Logger:        subscriberLogger(w.log.With().Str("component", "subscriber").Logger()),
		// QueueWeights and StrictPriority: one class per queue, its partitions included.
		Priority:       w.priority(),
		StrictPriority: w.cfg.StrictPriority,
		// A queue's priority levels: its level streams are read in level order.
		Levels: w.levels,
	})
	if err != nil {
		return nil, err
	}
	defer sub.Close() // after the background parts stop; it settles or releases every message
	// The subscriber cancels what still runs after ShutdownTimeout; the router waits a little
	// longer for those handlers to return.
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: w.cfg.ShutdownTimeout + time.Second}, wlog)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.sub = sub
	if w.troubled {
		sub.Pause()
	}
	router.AddMiddleware(w.settleAfter(sub)) // outermost: it sees whatever the chain did
	router.AddMiddleware(w.middleware...)
	w.mu.Unlock()
	// Cancels reach the handlers through the partitions' events; a confirmation of a
	// subscription after a drop renews the leases at once, which finds the jobs canceled
	// meanwhile (cancel.go). The worker is Ready once they are confirmed.
	confirmed := make(chan struct{}, len(w.parts))
	for _, name := range w.parts {
		q := keys.New(w.cfg.Prefix, name)
		router.AddConsumerHandler("conveyor:"+name, q.Stream(), sub, w.handleMessage)
		var once sync.Once
		stop := w.evw.ListenGaps(ctx, q.Events(), w.cancels.Heard(q.Events()), func() {
			sub.RenewNow()
			once.Do(func() { confirmed <- struct{}{} })
		})
		defer stop()
	}

	sctx, endSession := context.WithCancel(ctx)
	defer endSession()
	// The services run with the session: they end with it, and stopServices waits for them
	// once the reading has ended.
	watcher := &engine.PartitionWatcher{Changed: endSession}
	levels := engine.NewLevelsWatcher(w.rdb, w.cfg.Prefix, w.parts, router, sub, w.handleMessage, w.log)
	services, err := w.services(watcher, levels, router)
	if err != nil {
		return nil, err
	}
	stopServices, err := service.StartAll(sctx, services...)
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	defer stopServices()
	// Read here, not in the goroutine: it may outlive the session, and Run rewrites w.parts
	// for the next one.
	parts := len(w.parts)
	go func() {
		select {
		case <-router.Running():
		case <-sctx.Done():
			return
		}
		if w.store.Events(sctx) != events.None {
			// Bounded: a server that refuses the subscriptions leaves cancels to the lease
			// renewal, and must not keep the worker from being ready.
			limit := time.NewTimer(eventsReadyWait)
			defer limit.Stop()
			for range parts {
				select {
				case <-confirmed:
				case <-limit.C:
					w.readyOnce.Do(func() { close(w.ready) })
					return
				case <-sctx.Done():
					return
				}
			}
		}
		w.readyOnce.Do(func() { close(w.ready) })
	}()
	err = router.Run(sctx)
	stopServices()
	if err != nil {
		return nil, fmt.Errorf("pipeline: router: %w", err)
	}
	return watcher.Next, nil // written before its Stop returned
}

// warnSharedName warns when this worker's name is the consumer name of a worker active in
// one of its queues within the visibility timeout. Two live workers sharing a name take each
// other's entries for orphans of their own lost reads (see package stream). Their renewals
// also keep each other's jobs alive. A worker that stopped within that time (a restart with a
// fixed name) looks the same, hence a warning and not a refusal. Errors (no group yet) are
// ignored: this is advice.
func (w *Worker) warnSharedName(ctx context.Context) {
	for _, name := range w.parts {
		q := keys.New(w.cfg.Prefix, name)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		consumers, err := w.store.Consumers(cctx, q)
		cancel()
		if err != nil {
			continue
		}
		for _, c := range consumers {
			if c.Name == w.cfg.Name && c.Idle < w.cfg.VisibilityTimeout {
				w.log.Warn().Str("queue", name).Dur("last_active", c.Idle.Round(time.Millisecond)).Int64("pending", c.Pending).
					Msg("another worker with this name was active in the queue just now; if it still runs, the two take each other's jobs: give every worker its own name")
			}
		}
	}
}

// settleAfter frees a job's slot once the whole middleware chain has returned. The subscriber
// runs in ManualSettle mode: the slot is held until the job's outcome is written, which
// handleMessage waits for. It returns no error, so the router does nothing more with the
// message. An error that is not a *JobError means a middleware refused the job before
// handleMessage ran, or replaced its error. It is written as a failed attempt. Fencing refuses
// that if the handler's own outcome was written already.
//
// A message of another publisher is adopted first (adopt), so that the middleware sees a job.
// One that is not to run now (scheduled, or refused as a duplicate) never reaches it: it is
// no attempt.
func (w *Worker) settleAfter(sub *stream.Subscriber) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			growStack()
			defer sub.Settle(msg)
			if msg.Metadata[metaForeign] != "" && !w.adopt(msg) {
				return nil, nil
			}
			if !w.admit(msg) {
				return nil, nil // deferred by a limit (no attempt), or not to run
			}
			// Its slots go back to the worker's lease once its outcome is written.
			defer engine.GrantOf(msg.Context()).GiveBack()
			if q, ok := w.queue(msg.Metadata[stream.StreamKey]); ok {
				defer w.cancels.Done(w.cancels.Register(q, sub, msg, msg.Metadata[metaType]))
			}
			if _, err := h(msg); err != nil && !errors.As(err, new(*JobError)) {
				w.refused(msg, err)
			}
			return nil, nil
		}
	}
}

// growStack grows the calling goroutine's stack to 4 KiB while it is shallow. The router runs
// every message on a new goroutine, which Go starts with a small stack. A job's path needs
// more, so the stack was copied once per job anyway, deep in the path. There the copy has more
// frames to adjust. Growing it here, three frames down, is the cheaper copy (the same trick as
// CockroachDB's util/growstack; docs/BENCHMARKS.md has the profiles). When the stack is big
// enough already this only clears the buffer.
//
//go:noinline
func growStack() {
	var buf [2048]byte
	keepOnStack(buf[:])
}

//go:noinline
func keepOnStack([]byte) {}

// waitForRedis pings until Redis answers and the scripts are loaded (pipelined EVALSHA needs
// them), or ctx ends. An outage is waited out; a refusal (wrong password, an ACL that lacks a
// command, a misconfigured server) is returned at once, since waiting cannot fix it.
func (w *Worker) waitForRedis(ctx context.Context) error {
	spell := outage.Spell{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		err := w.rdb.Ping(ctx).Err()
		if err == nil {
			err = script.Load(ctx, w.rdb, jobstate.WorkerScripts()...)
		}
		if err == nil {
			// Through the publishers' one door, with no bound: the bound is on queues made by
			// publishing (ClientConfig.MaxQueues), and a worker's queues are its operator's.
			for _, name := range w.cfg.Queues {
				if _, err = w.store.AddQueue(ctx, jobstate.AddQueueParams{Queue: name, MaxQueues: math.MaxInt}); err != nil {
					break
				}
			}
		}
		if err == nil {
			w.counts, err = w.readCounts(ctx)
		}
		if err == nil {
			if lasted, waited := spell.OK(time.Now()); waited {
				lasted = lasted.Round(time.Millisecond)
				w.log.Info().Dur("after", lasted).Msg("connected to Redis after " + lasted.String())
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if engine.Permanent(err) || errors.Is(err, ErrInvalid) || rediserr.IsAuth(err) || tlsRefused(err) {
			return fmt.Errorf("pipeline: redis refused the worker: %w", err)
		}
		step := spell.Failed(time.Now())
		w.log.Warn().Err(err).Dur("retry_in", step.Wait.Round(time.Millisecond)).Int("tries", step.Tries).
			Dur("failing_for", step.FailingFor.Round(time.Millisecond)).Msg("cannot reach Redis; waiting for it")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(step.Wait):
		}
	}
}

// readCounts reads the partition count of each of the worker's queues in one round trip.
func (w *Worker) readCounts(ctx context.Context) ([]int, error) {
	counts, err := w.store.PartitionCounts(ctx, w.cfg.Queues)
	if errors.As(err, new(*jobstate.CountError)) {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return counts, err
}

// partitionQueues names every partition the worker reads, from w.counts: one stream
// subscription, scheduler slot and recoverer each.
func (w *Worker) partitionQueues() {
	w.parts = nil
	queues := make(map[string]*keys.Queue)
	if old := w.queues.Load(); old != nil {
		maps.Copy(queues, *old)
	}
	for k, name := range w.cfg.Queues {
		for i := range w.counts[k] {
			tag := keys.PartitionName(name, i, w.counts[k])
			q := keys.New(w.cfg.Prefix, tag)
			w.parts = append(w.parts, tag)
			queues[q.Stream()] = &q
			levelViews(queues, q)
		}
	}
	w.queues.Store(&queues)
}

// queue is the partition of a stream key the worker read since it started.
func (w *Worker) queue(streamKey string) (*keys.Queue, bool) {
	q, ok := (*w.queues.Load())[streamKey]
	return q, ok
}

// eventsReadyWait bounds how long a worker's readiness waits for its events subscriptions.
const eventsReadyWait = 2 * time.Second

// errTimeout is the cause of a handler context whose job ran past its timeout.
var errTimeout = errors.New("attempt timed out")

// handleMessage runs one job. It returns once the job's outcome is written: nil when the job
// completed, a *JobError when it did not (see Use). Then settleAfter frees the slot.
// The entry is acknowledged by finish.lua together with the state change.
func (w *Worker) handleMessage(msg *message.Message) error {
	// This function's frame stays small; the work around the handler call lives in other
	// functions. The router runs each message on a new goroutine, whose stack growStack grows
	// once. A deeper path would make Go copy it again.
	q, ok := w.queue(msg.Metadata[stream.StreamKey])
	if !ok {
		w.log.Error().Str("stream", msg.Metadata[stream.StreamKey]).Str("job_id", msg.UUID).Msg("message from an unknown stream")
		return nil
	}
	if reason, bad := msg.Metadata[stream.PoisonKey]; bad {
		return w.poison(q, msg, reason)
	}
	j := jobFromMessage(q.Name(), msg)
	j.Priority = q.Level() // the level of the stream it was read from
	j.entry, _ = stream.EntryValues(msg.Context())
	ctx, span := w.traceAttempt(msg.Context(), q, j) // tracing.go
	h, ok := w.handlers[j.Type]
	if !ok {
		err := w.noHandler(ctx, q, j)
		if span != nil {
			endAttempt(span, err)
		}
		return err
	}
	start := w.started(q, j)
	j.progress = engine.NewProgressReporter(w.store, &w.progressWrites, q, j.ID, j.Entry, j.Attempt)
	var result []byte
	var err error
	if j.Timeout > 0 {
		result, err = w.executeWithTimeout(ctx, h, j)
	} else {
		result, err = call(ctx, h, j, &w.log)
	}
	endProgress(ctx, j.progress)
	err = w.outcome(ctx, q, j, start, result, err, 0)
	if span != nil {
		endAttempt(span, err)
	}
	return err
}

// endProgress ends the attempt's progress reports before its outcome is written. It writes
// the last one held, unless the attempt was abandoned (the job moved on, or goes back on
// shutdown). Then the fence would refuse it, or the next run reports its own.
func endProgress(ctx context.Context, r *engine.ProgressReporter) {
	cause := context.Cause(ctx)
	r.End(!errors.Is(cause, stream.ErrClosed) && !errors.Is(cause, stream.ErrLeaseLost))
}

// sendBack adds to t the payload exactly as read from the job's entry (stream.EntryValues).
// It does so when the payload is small and the entry has no metadata, so that finish.lua need
// not read the entry again. Never j.Payload: middleware and handlers may change that slice in
// place, and the job's next attempt must run on the bytes that were published.
func sendBack(t transition, j *Job) transition {
	if j.entry != nil {
		p, _ := j.entry[keys.EntryPayload].(string)
		md, _ := j.entry[keys.EntryMetadata].(string)
		if md == "" && len(p) <= sendBackBytes {
			return t.WithPayload(p)
		}
	}
	return t
}

// started marks the attempt as started (written later, if the job is still running then).
func (w *Worker) started(q *keys.Queue, j *Job) time.Time {
	start := w.cfg.Now()
	w.comp.Started(j.Entry, engine.StartMark{Q: q, ID: j.ID, Attempt: j.Attempt, At: start.UnixMilli()})
	return start
}

// write hands t to the completer and waits until it is written; then it returns jerr.
func (w *Worker) write(t transition, jerr *JobError) error {
	<-w.comp.Finish(t)
	if jerr == nil {
		return nil
	}
	return jerr
}

// noHandler fails an attempt of a job whose type this worker has no handler for. It is an
// attempt like any other, retried with backoff. During a rolling deploy a worker of the old
// version must not kill jobs meant for the new one, which may pick the retry up. It goes to
// the dead set only after its retries.
func (w *Worker) noHandler(ctx context.Context, q *keys.Queue, j *Job) error {
	return w.outcome(ctx, q, j, w.cfg.Now(), nil, &noHandlerError{typ: j.Type, worker: w.cfg.Name}, noteNoHandler)
}

// noHandlerError is the error of an attempt with no handler; it is ErrNoHandler.
type noHandlerError struct{ typ, worker string }

func (e *noHandlerError) Error() string {
	return fmt.Sprintf("no handler for type %q on worker %s", e.typ, e.worker)
}

func (e *noHandlerError) Is(target error) bool { return target == ErrNoHandler }

// refused writes a failed attempt for a job that a middleware refused before its handler ran.
func (w *Worker) refused(msg *message.Message, err error) {
	q, ok := w.queue(msg.Metadata[stream.StreamKey])
	if !ok || msg.Metadata[stream.PoisonKey] != "" {
		return
	}
	j := jobFromMessage(q.Name(), msg)
	jobEvent(w.log.Warn().Err(err), j).Msg("a middleware refused the job; counted as a failed attempt")
	_ = w.outcome(msg.Context(), q, j, w.cfg.Now(), nil, fmt.Errorf("refused by middleware: %w", err), noteRefused)
}

// outcome writes what the attempt came to and returns what handleMessage returns (see Use);
// an abandoned attempt writes nothing. note is the transition's Note, for the hooks.
func (w *Worker) outcome(ctx context.Context, q *keys.Queue, j *Job, start time.Time, result []byte, err error, note uint8) error {
	if cause := context.Cause(ctx); cause != nil {
		// A canceled job's attempt ends canceled whatever its handler returned. A handler
		// that ignored its context may return a result, or an error, late. The job's record
		// says canceled already, and fencing would refuse any write.
		var why Outcome
		switch {
		case errors.Is(cause, ErrJobCanceled):
			why = OutcomeCanceled
		case errors.Is(cause, stream.ErrLeaseLost):
			// On a lost lease the job was canceled (its event missed), or another worker
			// owns it now. A result returned anyway is written in the second case only, for
			// fencing to judge.
			if lost := w.lostWhy(q, j); err != nil || lost == OutcomeCanceled {
				why = lost
			}
		case errors.Is(cause, stream.ErrClosed) && err != nil:
			// Abandoned, not failed: on shutdown the entry is put back.
			why = OutcomeAbandoned
		}
		if why != 0 {
			return w.ended(q, j, start, why)
		}
	}
	end := w.cfg.Now()
	ran := jobstate.Ran{ID: j.ID, Entry: j.Entry, Attempt: j.Attempt, Started: start, Finished: end}
	var t transition
	var jerr *JobError
	var snooze *snoozeError
	switch {
	case err == nil && len(result) > w.cfg.MaxResultBytes:
		reason := fmt.Sprintf("result of %d bytes exceeds the limit of %d", len(result), w.cfg.MaxResultBytes)
		t = jobstate.Dead(q, jobstate.DeadParams{Ran: ran, Reason: reason})
		jerr = &JobError{Outcome: OutcomeDead, Err: errors.New(reason)}
		jobEvent(w.log.Warn(), j).Str("reason", reason).Msg("job failed for good; sent to the dead set")
	case err == nil:
		t = jobstate.Done(q, jobstate.DoneParams{Ran: ran, Result: string(result), Traceparent: doneTrace(ctx, j)})
		jobEvent(w.log.Debug(), j).Dur("took", outage.Round(end.Sub(start))).Msg("job done")
	case errors.As(err, &snooze):
		at := snooze.due(end)
		t = jobstate.Snooze(q, jobstate.SnoozeParams{Ran: ran, RunAt: at, Max: w.cfg.MaxSnoozes})
		jerr = &JobError{Outcome: OutcomeSnoozed, Err: err, RetryAt: at}
		jobEvent(w.log.Debug(), j).Time("run_at", at).Msg("job snoozed")
	case IsSkipRetry(err) || j.Attempt > j.MaxRetries:
		t = jobstate.Dead(q, jobstate.DeadParams{Ran: ran, Reason: truncate(err.Error(), maxErrorBytes)})
		jerr = &JobError{Outcome: OutcomeDead, Err: err}
		jobEvent(w.log.Warn().Err(err), j).Msg("job failed for good; sent to the dead set")
	default:
		delay := w.cfg.Backoff.Delay(j.Attempt)
		retryAt := time.UnixMilli(end.Add(delay).UnixMilli() + 1) // +1: never before the backoff ends
		t = jobstate.Retry(q, jobstate.RetryParams{Ran: ran, Reason: truncate(err.Error(), maxErrorBytes), RetryAt: retryAt})
		jerr = &JobError{Outcome: OutcomeRetry, Err: err, RetryAt: retryAt}
		jobEvent(w.log.Info().Err(err), j).Dur("retry_in", delay.Round(time.Millisecond)).
			Msg("job attempt failed; will retry")
	}
	t = sendBack(t, j)
	t.Type, t.Began, t.Note = j.Type, start, note
	if jerr != nil {
		jerr.Timeout = errors.Is(context.Cause(ctx), errTimeout) || errors.Is(err, errTimeout)
	}
	return w.write(t, jerr)
}

// ended records an attempt that writes nothing: canceled, lost or abandoned.
func (w *Worker) ended(q *keys.Queue, j *Job, start time.Time, why Outcome) error {
	w.comp.Forget(j.Entry)
	jerr := &JobError{Outcome: why}
	msg := "job attempt abandoned"
	if why == OutcomeCanceled {
		msg = "job canceled while it ran; its outcome is discarded"
	}
	jobEvent(w.log.Info(), j).Stringer("outcome", why).Msg(msg)
	w.attempts.ended(Attempt{Queue: q.Name(), Type: j.Type, Outcome: why, Began: start,
		Took: w.cfg.Now().Sub(start), Entered: stream.EntryTime(j.Entry), ID: j.ID, Number: j.Attempt})
	return jerr
}

// lostWhy tells a job canceled while it ran from one recovered elsewhere, for the record.
func (w *Worker) lostWhy(q *keys.Queue, j *Job) Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if st, err := w.store.Status(ctx, *q, j.ID); err == nil && status.Status(st) == status.Canceled {
		return OutcomeCanceled
	}
	return OutcomeLost
}

// executeWithTimeout runs the handler with the job's timeout, turning a panic into an error. It
// runs the handler in its own goroutine so that a handler ignoring its context cannot keep the
// slot past the timeout.
func (w *Worker) executeWithTimeout(ctx context.Context, h HandlerFunc, j *Job) ([]byte, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, j.Timeout, errTimeout)
	defer cancel()
	type outcome struct {
		res []byte
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := call(ctx, h, j, &w.log)
		done <- outcome{res, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		select {
		case o = <-done:
		case <-time.After(100 * time.Millisecond):
			if !errors.Is(context.Cause(ctx), errTimeout) {
				return nil, context.Cause(ctx)
			}
			jobEvent(w.log.Warn(), j).Dur("timeout", j.Timeout).Msg("handler ignored its timeout; abandoning it")
			return nil, fmt.Errorf("%w after %s (the handler did not return)", errTimeout, j.Timeout)
		}
	}
	if o.err != nil && errors.Is(context.Cause(ctx), errTimeout) {
		return nil, fmt.Errorf("%w after %s: %w", errTimeout, j.Timeout, o.err)
	}
	return o.res, o.err
}

// call runs the handler, turning a panic into an error (a failed attempt, never a crash).
func call(ctx context.Context, h HandlerFunc, j *Job, log *zerolog.Logger) (res []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			jobEvent(log.Error(), j).Interface("panic", p).
				Str("stack", string(debug.Stack())).Msg("handler panicked")
			res, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return h(ctx, j)
}

// adopt makes a job of an entry of another Watermill publisher before the middleware and its
// handler run. It reports whether the job is to run now. A message that names a job on
// another entry is marked to be kept as a dead record of its own (stream.PoisonKey). It runs
// on to handleMessage, which writes it. When Redis cannot be asked, the entry stays pending,
// unrenewed once settled, and recovery puts it back for another try.
func (w *Worker) adopt(msg *message.Message) bool {
	md := msg.Metadata
	q, ok := w.queue(md[stream.StreamKey])
	if !ok {
		return true // handleMessage logs it
	}
	_, maxRetries, timeout, typ, _ := keys.ParseEntryJob(md[metaJob])
	a := parseAdoption(md[metaForeign])
	entry := md[stream.EntryIDKey]
	ctx, cancel := context.WithTimeout(msg.Context(), 10*time.Second)
	defer cancel()
	res, err := w.store.Adopt(ctx, *q, jobstate.AdoptParams{Job: jobstate.Foreign{ID: msg.UUID, Entry: entry, Type: typ,
		MaxRetries: maxRetries, Timeout: time.Duration(timeout) * time.Millisecond, CreatedAt: stream.EntryTime(entry),
		RunAt: a.due(), UniqueKey: a.uniqueKey, UniqueTTL: time.Duration(a.uniqueTTL) * time.Millisecond},
		Now: w.cfg.Now(), Worker: w.cfg.Name})
	log := func(e *zerolog.Event) *zerolog.Event {
		return e.Str("queue", q.Name()).Str("job_id", msg.UUID).Str("type", typ).Str("entry", entry)
	}
	switch {
	case err != nil:
		log(w.log.Error().Err(err)).Msg("could not adopt a message of another publisher; it will be tried again after the visibility timeout")
		return false
	case res.Code == script.Refused:
		md[stream.PoisonKey] = fmt.Sprintf("stream entry %s of another publisher names job %s, which lives on another entry", entry, msg.UUID)
		return true
	case res.Code == script.UniqueHeld:
		log(w.log.Info()).Str("unique_key", a.uniqueKey).Str("holder", res.Holder).
			Msg("refused a message of another publisher as a duplicate: another job holds its unique key")
		return false
	case res.Scheduled:
		log(w.log.Debug()).Time("run_at", time.UnixMilli(a.runAt)).Msg("adopted a message of another publisher as a scheduled job")
		return false
	}
	log(w.log.Debug()).Msg("adopted a message of another publisher as a job")
	return true
}

// poison sends an unreadable entry to the dead set.
func (w *Worker) poison(q *keys.Queue, msg *message.Message, reason string) error {
	entry := msg.Metadata[stream.EntryIDKey]
	id := msg.UUID
	if !keys.ValidID(id) {
		id = jobstate.DeadEntryPrefix + entry
	}
	began := w.cfg.Now()
	w.log.Warn().Str("queue", q.Name()).Str("job_id", id).Str("entry", entry).Str("reason", reason).
		Msg("unreadable stream entry sent to the dead set")
	t := jobstate.Poison(q, jobstate.PoisonParams{ID: id, Entry: entry, At: began, Reason: reason})
	t.Type, t.Began = msg.Metadata[metaType], began
	return w.write(t, &JobError{Outcome: OutcomeDead, Err: errors.New(reason)})
}

// release puts back the entries a closing subscription still holds (stream.Config.OnRelease).
func (w *Worker) release(ctx context.Context, streamKey string, ids []string) {
	q, ok := w.queue(streamKey)
	if !ok {
		return
	}
	released := 0
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), batchChunk)]
		ids = ids[len(chunk):]
		rel, err := w.store.Release(ctx, *q, jobstate.ReleaseParams{Now: w.cfg.Now(), Entries: chunk})
		if err != nil {
			w.log.Error().Err(err).Str("queue", q.Name()).Int("jobs", len(chunk)).
				Msg("could not put back unfinished jobs; they will be recovered after the visibility timeout")
			continue
		}
		released += rel.Jobs
	}
	if released > 0 {
		w.log.Info().Str("queue", q.Name()).Int("num_released", released).Msg("put back unfinished jobs")
	}
}

// jobEvent adds the fields of every job line: queue, job_id, type and attempt.
func jobEvent(e *zerolog.Event, j *Job) *zerolog.Event {
	return e.Str("queue", j.Queue).Str("job_id", j.ID).Str("type", j.Type).Int("attempt", j.Attempt)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
