package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/recovery"
	"github.com/conveyorq/conveyor/stream"
)

// Defaults of WorkerConfig.
const (
	DefaultQueue             = "default"
	defaultConcurrency       = 10
	defaultVisibilityTimeout = recovery.DefaultVisibilityTimeout
	defaultRecoveryInterval  = recovery.DefaultInterval
	defaultShutdownTimeout   = 30 * time.Second
	defaultFlushInterval     = 2 * time.Millisecond
	defaultMaxResultBytes    = 1 << 20
	defaultMaxSnoozes        = 100
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
	// Concurrency bounds the jobs this worker runs at once, across its queues. Defaults to 10.
	Concurrency int
	// ReadBatch bounds the entries one stream read takes. Defaults to Concurrency, at most 500.
	ReadBatch int
	// Backoff is the retry delay policy. Zero fields take Backoff's defaults (1s doubling up
	// to 10m, with jitter).
	Backoff Backoff
	// Retention is how long a completed or canceled job's record is kept, unless the job was
	// enqueued WithRetention. Defaults to 24h; RetainNone deletes records as jobs finish.
	// Dead jobs are kept until replayed or purged.
	Retention time.Duration
	// MinRetention is the shortest time any finished job's record is kept, whatever its
	// retention. With RetainNone what is kept is a small tombstone (status and completed_at).
	// A publish that go-redis sends again after its reply was lost finds the job by it, and
	// makes no second one. So MinRetention must exceed the producers' retry horizon. That is
	// about (MaxRetries+1) x (ReadTimeout + WriteTimeout + MaxRetryBackoff) of their go-redis
	// options: 26s with go-redis's defaults. Defaults to 1m.
	MinRetention time.Duration
	// VisibilityTimeout is how long a job may go without a lease renewal before another worker
	// recovers it. The worker renews its jobs' leases every third of it. Defaults to 30s; it
	// must be at least 300ms.
	VisibilityTimeout time.Duration
	// RecoveryInterval is the time between two recovery scans. Defaults to 5s.
	RecoveryInterval time.Duration
	// RecoveryLockTTL is the TTL of a queue's recovery lock, which a worker holds while it
	// scans the queue. A worker that dies mid-scan leaves the lock behind, and no worker
	// recovers that queue's jobs until it expires. Defaults to recovery.DefaultLockTTLFor the
	// visibility timeout: a third of it, from 1s to 10s (10s with the default 30s timeout).
	RecoveryLockTTL time.Duration
	// ShutdownTimeout is how long Run waits, once its context ends, for running jobs to finish
	// before it cancels them and puts them back in the stream. Defaults to 30s.
	ShutdownTimeout time.Duration
	// FlushInterval is how long finished jobs' transitions are collected before they are
	// written in one batch. Defaults to 2ms.
	FlushInterval time.Duration
	// MaxResultBytes bounds a handler's result; a larger one fails the job. Defaults to 1 MiB.
	// With Keys it bounds the plaintext.
	MaxResultBytes int
	// Keys, when set, opens each job's payload before its handler runs (Job.Payload is the
	// plaintext; Watermill middleware still sees the message as stored), seals the handler's
	// result under the newest key before it is written, seals the lines the handler logs
	// (Job.Logger, Job.Logf; keyring.Logs) each time they are written, and seals the ticks of
	// periodic schedules as ClientConfig.Keys does. A job sealed under a key the keyring lacks (or,
	// without Keys, any sealed job) is not run: its attempt fails, saying which key, and the
	// job is retried by the retry policy, so a worker that has the key may run it. A payload
	// that does not open (keyring.ErrCorrupt) fails the attempt likewise. Job.Dependencies
	// opens the results it reads. Nil: no encryption; a plain job costs nothing more.
	Keys *keyring.Keyring
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
	// have them. ReplicaTimeout bounds the wait (default 1s); zero waits for none. Outcomes
	// that fewer replicas confirm are not written again, since the master has them. They are
	// counted (UnreplicatedWrites) and logged. A failover before a replica has one makes its
	// job run again (docs/OPERATIONS.md "Durable publish").
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
	// after three intervals without a beat and is removed when the worker stops. Each beat also
	// marks the worker's queues and handler types seen (Inspector.Sightings), what publish
	// warnings check. Defaults to 5s.
	HeartbeatInterval time.Duration
	// DisableHeartbeat leaves the heartbeat off: the worker is not listed by Inspector.Workers,
	// `queues delete` cannot warn that it reads the queue, and publishes to the queues only it
	// reads are warned about (Inspector.PublishWarnings).
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
	c.Concurrency = cmp.Or(c.Concurrency, defaultConcurrency)
	c.ReadBatch = cmp.Or(c.ReadBatch, min(c.Concurrency, 500))
	c.Backoff = c.Backoff.withDefaults()
	c.Retention = cmp.Or(c.Retention, defaultRetention)
	c.MinRetention = cmp.Or(c.MinRetention, defaultMinRetention)
	c.VisibilityTimeout = cmp.Or(c.VisibilityTimeout, defaultVisibilityTimeout)
	c.RecoveryInterval = cmp.Or(c.RecoveryInterval, defaultRecoveryInterval)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, defaultShutdownTimeout)
	c.FlushInterval = cmp.Or(c.FlushInterval, defaultFlushInterval)
	c.MaxResultBytes = cmp.Or(c.MaxResultBytes, defaultMaxResultBytes)
	c.MaxSnoozes = cmp.Or(c.MaxSnoozes, defaultMaxSnoozes)
	c.PauseCheckInterval = cmp.Or(c.PauseCheckInterval, defaultPauseCheckInterval)
	c.HistoryInterval = cmp.Or(c.HistoryInterval, defaultHistoryInterval)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, defaultHeartbeatInterval)
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
	if c.VisibilityTimeout < minVisibilityTimeout {
		bad("visibility timeout %s is under %s (lease renewal runs every third of it)", c.VisibilityTimeout, minVisibilityTimeout)
	}
	if err := c.validateServices(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrInvalid, err))
	}
	return errors.Join(errs...)
}

// Bounds of WorkerConfig.
const (
	maxReadBatch = 1000
	// minVisibilityTimeout bounds WorkerConfig.VisibilityTimeout from below.
	minVisibilityTimeout = 300 * time.Millisecond
)
