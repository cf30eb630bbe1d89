package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/tracing"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/stream"
)

// transition is one state change a worker asks for (see jobstate for its constructors);
// finish.lua applies it, fenced by its entry.
type transition = jobstate.Transition

// Worker runs handlers for the jobs of its queues. Register handlers with Handle, then call
// Run. A batching Watermill Subscriber (package stream) reads jobs from each queue's stream in
// consumer group "conveyor". Middleware (Use) wraps every job as under a Watermill router,
// whose handler names its context carries; the subscriber runs the jobs on goroutines it keeps.
//
// The Worker is a facade: its run loop is internal/engine's Loop. The Worker gives it the
// job's public side (runner): the Job, the handler's call, what its error asks for, and the
// JobError the middleware sees.
type Worker struct {
	rdb   redis.UniversalClient
	store jobstate.Backend
	cfg   WorkerConfig
	log   zerolog.Logger

	mu       sync.Mutex
	handlers map[string]HandlerFunc
	// types are the handlers' job types as Run began, sorted: the heartbeat lists them.
	types      []string
	middleware []message.HandlerMiddleware

	running  atomic.Bool
	ready    chan struct{}
	loop     atomic.Pointer[engine.Loop] // set by Run
	attempts *attempts                   // tells WorkerHooks.Attempts (attempts.go)
	// replicas is the outcome writes' replica wait (WorkerConfig.Replicas; durable.go).
	replicas *durable.Outcomes
	// cancels stops the handlers of jobs canceled while they run (engine.Cancels).
	cancels *engine.Cancels
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
	if l := w.loop.Load(); l != nil {
		return l.Running()
	}
	return 0
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
	w.types = slices.Sorted(maps.Keys(w.handlers))
	w.mu.Unlock()
	if nHandlers == 0 {
		return errors.New("pipeline: worker has no handlers")
	}
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("pipeline: worker already ran")
	}
	w.startedAt = w.cfg.Now()
	w.attempts = newAttempts(w.cfg.Hooks.Attempts)
	l := &engine.Loop{Rdb: w.rdb, Store: w.store, Log: w.log,
		RouterLog:     watermillLogger(w.log.With().Str("component", "router").Logger()),
		SubscriberLog: subscriberLogger(w.log.With().Str("component", "subscriber").Logger()),
		Prefix:        w.cfg.Prefix, Name: w.cfg.Name, Queues: w.cfg.Queues, QueueWeights: w.cfg.QueueWeights,
		StrictPriority: w.cfg.StrictPriority, Concurrency: w.cfg.Concurrency, ReadBatch: w.cfg.ReadBatch,
		VisibilityTimeout: w.cfg.VisibilityTimeout, ShutdownTimeout: w.cfg.ShutdownTimeout,
		FlushInterval: w.cfg.FlushInterval, Retention: w.cfg.Retention, MinRetention: w.cfg.MinRetention,
		HistoryInterval: w.cfg.HistoryInterval, PauseCheckInterval: w.cfg.PauseCheckInterval,
		DisableHistory: w.cfg.DisableHistory, MaxResultBytes: w.cfg.MaxResultBytes, MaxSnoozes: w.cfg.MaxSnoozes,
		Now: w.cfg.Now, Delay: w.cfg.Backoff.Delay, Unmarshaller: entryUnmarshaller{defaultType: w.cfg.DefaultType},
		Replicas: w.replicas, Cancels: w.cancels, Handler: (*runner)(w), Invalid: ErrInvalid,
		Services: w.services, Ready: w.ready}
	if w.cfg.Keys != nil {
		l.SealResult = func(a *engine.Attempt, result []byte) []byte {
			if len(result) == 0 {
				return result // nothing to hide: no result stays no result
			}
			return w.cfg.Keys.Seal(keyring.Result, a.ID, result)
		}
		l.SealLogs = func(id string, lines []byte) []byte { return w.cfg.Keys.Seal(keyring.Logs, id, lines) }
	}
	if w.attempts != nil {
		l.OnWritten = w.attempts.written
	}
	w.mu.Lock()
	l.Middleware = w.middleware
	w.mu.Unlock()
	w.loop.Store(l)
	return l.Run(ctx)
}

// runner is the job's public side of the worker's loop (engine.Handler).
type runner Worker

// Begin makes the handler's Job of msg and starts the attempt's tracing (tracing.go).
func (r *runner) Begin(ctx context.Context, q *keys.Queue, msg *message.Message) (context.Context, *engine.Attempt) {
	w := (*Worker)(r)
	j := jobFromMessage(q.Name(), msg)
	j.Priority = q.Level() // the level of the stream it was read from
	j.keys = w.cfg.Keys
	a := &j.run
	*a = engine.Attempt{Q: q, Queue: j.Queue, ID: j.ID, Entry: j.Entry, Type: j.Type, Number: j.Attempt,
		MaxRetries: j.MaxRetries, Timeout: j.Timeout, Metadata: j.Metadata, Job: j}
	a.Values, _ = stream.EntryValues(msg.Context())
	ctx, span := w.traceAttempt(ctx, q, j)
	if span != nil {
		a.Trace = span
	}
	if _, ok := w.handlers[j.Type]; !ok {
		a.Fail = &noHandlerError{typ: j.Type, worker: w.cfg.Name}
	} else if keyring.Sealed(j.Payload) {
		// Never a handler on ciphertext: the attempt fails, and the retry policy may hand the
		// job to a worker that has the key.
		p, err := openPayload(w.cfg.Keys, j, a.Values)
		if err != nil {
			a.Fail, a.FailNote = sealedError(err), engine.NoteSealed
		} else {
			j.Payload = p
		}
	}
	return ctx, a
}

// openPayload opens a handler's job's sealed payload. The job's Payload is the worker's own
// copy of the entry's bytes (jobFromMessage), needed sealed no more: the finish call sends
// back the entry's bytes as read (values), never Payload. So it is opened in place, sparing a
// copy of every payload a worker runs. A payload sealed for no job (a debounced publish) fails
// that, and opens from the entry's bytes, which the in-place try did not touch.
func openPayload(k *keyring.Keyring, j *Job, values map[string]any) ([]byte, error) {
	orig, ok := values[keys.EntryPayload].(string)
	if !ok {
		return k.Open(keyring.Payload, j.ID, j.Payload)
	}
	if p, err := k.OpenInPlace(keyring.Payload, j.ID, j.Payload); err == nil || errors.Is(err, keyring.ErrUnknownKey) {
		return p, err
	}
	return k.Open(keyring.Payload, j.ID, []byte(orig))
}

// Call runs the job's handler.
func (r *runner) Call(ctx context.Context, a *engine.Attempt) ([]byte, error) {
	j := a.Job.(*Job)
	return r.handlers[j.Type](ctx, j)
}

// Classify says what a handler's error asks for: a snooze (Snooze, RetryAt), the dead set
// (SkipRetry), else a retry while retries are left.
func (r *runner) Classify(err error, end time.Time) (engine.Verdict, time.Time) {
	var snooze *snoozeError
	switch {
	case errors.As(err, &snooze):
		return engine.Snooze, snooze.due(end)
	case IsSkipRetry(err):
		return engine.Dead, time.Time{}
	}
	return engine.Retry, time.Time{}
}

// End makes the *JobError the middleware gets of an attempt that did not complete (see Use),
// tells WorkerHooks.Attempts of one that ends without a write, and ends the attempt's span.
func (r *runner) End(a *engine.Attempt, e engine.Ended) error {
	var err error
	if e.Outcome != 0 {
		why := Outcome(e.Outcome)
		if why == OutcomeCanceled || why == OutcomeLost || why == OutcomeAbandoned {
			r.attempts.ended(Attempt{Queue: a.Q.Name(), Type: a.Type, Outcome: why, Began: a.Start,
				Took: r.cfg.Now().Sub(a.Start), Entered: stream.EntryTime(a.Entry), ID: a.ID, Number: a.Number})
		}
		err = &JobError{Outcome: why, Timeout: e.Timeout, RetryAt: e.RetryAt, Err: e.Err}
	}
	if a != nil {
		if span, _ := a.Trace.(trace.Span); span != nil {
			endAttempt(span, err)
		}
	}
	return err
}

// Ours reports whether err is what End returned: a *JobError.
func (r *runner) Ours(err error) bool { return errors.As(err, new(*JobError)) }

// sealedError is the error of an attempt whose payload did not open, in words that name the
// key and say where the fix is.
func sealedError(err error) error {
	var ke *keyring.KeyError
	if errors.As(err, &ke) {
		return fmt.Errorf("payload encrypted under key %q, which this worker's keyring lacks (add the key to its --keys file): %w", ke.KeyID, err)
	}
	return fmt.Errorf("payload does not open: %w", err)
}

// noHandlerError is the error of an attempt with no handler; it is ErrNoHandler.
type noHandlerError struct{ typ, worker string }

func (e *noHandlerError) Error() string {
	return fmt.Sprintf("no handler for type %q on worker %s", e.typ, e.worker)
}

func (e *noHandlerError) Is(target error) bool { return target == ErrNoHandler }
