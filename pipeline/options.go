package pipeline

import (
	"time"

	"github.com/conveyorq/conveyor/internal/keys"
)

// Option sets how one job is enqueued. Options are checked when Enqueue runs: a bad value is
// an error wrapping ErrInvalid and nothing is written.
type Option func(*enqueueOptions)

type enqueueOptions struct {
	id         string
	delay      time.Duration
	runAt      time.Time
	maxRetries int
	hasRetries bool
	timeout    time.Duration
	uniqueKey  string
	uniqueTTL  time.Duration
	hasUnique  bool
	limitKey   string
	group      string
	prio       int // WithPriority's; 0: MinPriority
	retention  time.Duration
	hasRetain  bool
	metadata   map[string]string
	errs       []error
	hasDelay   bool
	hasRunAt   bool
	// WithDebounce's.
	debounceKey                    string
	debounceQuiet, debounceMaxWait time.Duration
	hasDebounce                    bool
	// replicas is WithReplicas's (durable.go).
	replicas    replicas
	hasReplicas bool
}

// dueAt is when a job published at now with these options is due: now, unless WithDelay or
// WithRunAt make it later.
func (o *enqueueOptions) dueAt(now time.Time) (time.Time, error) {
	runAt := now
	switch {
	case o.hasRunAt && o.hasDelay:
		return time.Time{}, invalid("WithDelay and WithRunAt together")
	case o.hasRunAt:
		if o.runAt.After(now) {
			runAt = o.runAt
		}
	case o.hasDelay:
		runAt = now.Add(o.delay)
	}
	if runAt.After(now) {
		// Due times are stored in whole milliseconds; round up so a job is never promoted
		// before the moment it was asked for. (Not through UnixNano, which overflows after
		// the year 2262.)
		ms := runAt.UnixMilli()
		if runAt.Nanosecond()%int(time.Millisecond) != 0 {
			ms++
		}
		runAt = time.UnixMilli(ms)
		if runAt.After(maxRunAt) {
			return time.Time{}, invalid("due time %s is after %s", runAt.UTC().Format(time.RFC3339), maxRunAt.Format(time.RFC3339))
		}
	}
	return runAt, nil
}

// WithID sets the job id instead of a generated one. Enqueueing an id that exists does not make
// a second job: the call returns the existing job. Ids are 1 to 128 characters from
// [A-Za-z0-9._:-].
func WithID(id string) Option {
	return func(o *enqueueOptions) { o.id = id }
}

// WithDelay makes the job due d from now. A negative delay is refused; zero runs it at once.
func WithDelay(d time.Duration) Option {
	return func(o *enqueueOptions) {
		if d < 0 {
			o.errs = append(o.errs, invalid("negative delay %s", d))
		}
		o.delay, o.hasDelay = d, true
	}
}

// maxRunAt is the latest due time a job may have (WithRunAt, WithDelay).
var maxRunAt = keys.MaxRunAt

// WithRunAt makes the job due at t; a time in the past runs it at once, a time after
// 9999-12-31T23:59:59.999Z is refused.
func WithRunAt(t time.Time) Option {
	return func(o *enqueueOptions) {
		if t.IsZero() {
			o.errs = append(o.errs, invalid("zero run-at time"))
		}
		o.runAt, o.hasRunAt = t, true
	}
}

// maxMaxRetries bounds WithMaxRetries.
const maxMaxRetries = keys.MaxRetries

// WithMaxRetries sets how many times a failed job is retried before it goes to the dead set
// (default 5; 0 means one attempt only).
func WithMaxRetries(n int) Option {
	return func(o *enqueueOptions) {
		if n < 0 || n > maxMaxRetries {
			o.errs = append(o.errs, invalid("max retries %d outside 0..%d", n, maxMaxRetries))
		}
		o.maxRetries, o.hasRetries = n, true
	}
}

// WithTimeout bounds each attempt: the handler's context is cancelled after d and the attempt
// counts as failed. Zero means no timeout; negative is refused. Timeouts are kept in whole
// milliseconds: a shorter one becomes one millisecond.
func WithTimeout(d time.Duration) Option {
	return func(o *enqueueOptions) {
		if d < 0 {
			o.errs = append(o.errs, invalid("negative timeout %s", d))
		}
		o.timeout = d
	}
}

// WithUnique de-duplicates by key. While a job with the same key is alive in the queue (not
// finished), and ttl has not passed, Enqueue returns it instead of making a new one.
// The key is freed when the job ends. Keys are 1 to 128 bytes of UTF-8 without control
// characters.
func WithUnique(key string, ttl time.Duration) Option {
	return func(o *enqueueOptions) {
		if err := validateUniqueKey(key); err != nil {
			o.errs = append(o.errs, err)
		}
		if ttl <= 0 {
			o.errs = append(o.errs, invalid("unique ttl %s must be positive", ttl))
		}
		o.uniqueKey, o.uniqueTTL, o.hasUnique = key, ttl, true
	}
}

// WithLimitKey sets the key the queue's per-key limits count the job under (Limit.PerKey,
// Inspector.SetLimit): a tenant, a customer, an API account. Jobs without a key are held to the
// queue's and their type's limits only. Keys are 1 to 128 bytes of UTF-8 without control
// characters, like WithUnique's.
func WithLimitKey(key string) Option {
	return func(o *enqueueOptions) {
		if err := validateKeyText("limit key", key); err != nil {
			o.errs = append(o.errs, err)
		}
		o.limitKey = key
	}
}

// WithGroup puts the job in a fair group of its queue: a tenant, a customer, an account.
// Within a queue, groups are served round-robin. At most a window of each group's jobs are in
// the queue's stream or running at once. The window is set by Inspector.SetGroups
// (20 unless set), times the group's weight. The group's other jobs wait,
// queued, in the group's own first-in-first-out list. Each moves into the stream when one of
// the group's jobs finishes. One group's flood so never has more than a window of jobs ahead
// of another group's next job. Jobs without a group are not held to any window. Names follow
// job ids' rules: 1 to 128 characters from [A-Za-z0-9._:-]. A partitioned queue keeps a window
// per partition.
func WithGroup(group string) Option {
	return func(o *enqueueOptions) {
		if err := keys.ValidateGroup(group); err != nil {
			o.errs = append(o.errs, invalid("%v", err))
		}
		o.group = group
	}
}

// Priority levels within a queue (WithPriority), River's: MinPriority is served first and is
// every job's level unless WithPriority says otherwise.
const (
	MinPriority = keys.MinPriority
	MaxPriority = keys.MaxPriority
)

// WithPriority sets the job's priority level within its queue, MinPriority (1, the default,
// served first) to MaxPriority (4). A worker reads a queue's jobs of level 1 before any of
// level 2, and so on. So a job published later at a higher priority (a lower number) starts
// before queued jobs of lower priority. Within a level, jobs start in the order they were
// queued. Levels order jobs within one queue only; between queues, WorkerConfig.QueueWeights
// and StrictPriority apply. A job keeps its level through retries, recovery and replay. Each
// level above 1 is a stream of its own in the queue's hash tag (keys.Queue.LevelStream). A
// worker reads it once a job of that level was published. So the first job of a new level in
// a queue may wait up to 1 s for a running worker to start reading it.
func WithPriority(p int) Option {
	return func(o *enqueueOptions) {
		if p < MinPriority || p > MaxPriority {
			o.errs = append(o.errs, invalid("priority %d is out of range: levels are %d (first) to %d", p, MinPriority, MaxPriority))
			return
		}
		o.prio = p
	}
}

// priority is the job's level: WithPriority's, else MinPriority.
func (o *enqueueOptions) priority() int { return max(o.prio, MinPriority) }

// WithRetention sets how long the job's record is kept after it completes or is canceled,
// overriding the worker's default. Zero deletes it when it finishes.
func WithRetention(d time.Duration) Option {
	return func(o *enqueueOptions) {
		if d < 0 {
			o.errs = append(o.errs, invalid("negative retention %s", d))
		}
		o.retention, o.hasRetain = d, true
	}
}

// WithMetadata adds metadata pairs (merged over the task's own). The merged metadata is
// limited to 64 pairs and 8 KiB; keys are UTF-8 without control
// characters and do not start with '_', values are UTF-8.
func WithMetadata(md map[string]string) Option {
	return func(o *enqueueOptions) {
		if o.metadata == nil {
			o.metadata = make(map[string]string, len(md))
		}
		for k, v := range md {
			o.metadata[k] = v
		}
	}
}

// maxDebounceWait bounds WithDebounce's quiet and max wait.
const maxDebounceWait = keys.MaxDebounceWait

// WithDebounce debounces publishes (trailing edge, with a maximum wait). Publishes with the
// same key to the same queue while the key's job has not started become one job, which runs
// once. It runs quiet after the last of them or maxWait after the first, whichever is sooner.
// It has the last one's type, payload, metadata, max retries, timeout and retention. Enqueue
// returns that job with Debounced set when the publish joined it. So every publish of a window
// gets the id of the job that will run. Job.Debounce describes the window. Once the job is
// promoted to run (or canceled), the key's next publish starts a new window and a new job.
//
// The times are measured by Redis's clock, in whole milliseconds rounded up, so the job never
// runs before min(last + quiet, first + maxWait). The quiet must be positive, maxWait at least
// the quiet, both at most a year (365 days). The key is 1 to 128 bytes of UTF-8 without control
// characters, like a unique key; in a partitioned queue it picks the job's partition.
// WithDebounce cannot be combined with WithUnique, WithID, WithDelay or WithRunAt.
func WithDebounce(key string, quiet, maxWait time.Duration) Option {
	return func(o *enqueueOptions) {
		if err := validateKeyText("debounce key", key); err != nil {
			o.errs = append(o.errs, err)
		}
		switch {
		case quiet <= 0 || quiet > maxDebounceWait:
			o.errs = append(o.errs, invalid("debounce quiet %s outside (0, %s]", quiet, maxDebounceWait))
		case maxWait < quiet || maxWait > maxDebounceWait:
			o.errs = append(o.errs, invalid("debounce max wait %s outside [quiet %s, %s]", maxWait, quiet, maxDebounceWait))
		}
		o.debounceKey, o.debounceQuiet, o.debounceMaxWait, o.hasDebounce = key, quiet, maxWait, true
	}
}

// debounceConflict is the error of an option that WithDebounce cannot be combined with, or nil.
func (o *enqueueOptions) debounceConflict() error {
	if !o.hasDebounce {
		return nil
	}
	var with string
	switch {
	case o.hasUnique:
		with = "WithUnique (a debounce key already makes one job of many publishes)"
	case o.id != "":
		with = "WithID (the job's id is the window's, chosen by its first publish)"
	case o.hasDelay, o.hasRunAt:
		with = "WithDelay or WithRunAt (the window decides when the job runs)"
	case o.group != "":
		with = "WithGroup (a debounced job is not held to a group's window)"
	default:
		return nil
	}
	return invalid("WithDebounce cannot be combined with %s", with)
}
