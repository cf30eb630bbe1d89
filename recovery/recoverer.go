// Package recovery puts back jobs whose worker died, froze or was cut off mid-run.
//
// # Model
//
// A running job is a pending entry of its queue's stream.
// The worker's consumer owns it.
// A live worker renews the lease of each entry it holds (XCLAIM of its own entry with JUSTID).
// It does so every third of the visibility timeout, the lease period. Each renewal resets
// the entry's idle time. So an entry idle for longer than the visibility timeout belongs to a
// worker that stopped renewing. That holds as long as Redis was there to take the renewals
// (see Trust).
//
// Every worker process runs one Recoverer per queue. Scans run under the queue's recovery
// Lock, so no two overlap. A scan lists the pending entries idle for two thirds of the
// visibility timeout or more (XPENDING with IDLE). It runs recover.lua (internal/jobstate,
// Store.Recover) on those idle for the whole timeout whose idle time the Recoverer trusts.
// The script does the following for each entry, atomically.
//
// It re-checks that the entry is still pending and idle for the visibility timeout. Its
// lease may have been renewed since it was listed. It also checks that the lock still holds
// this scanner's token. It acknowledges and deletes an entry whose job finished or moved on.
// Otherwise it counts the lost attempt and puts the job back into the stream as a new entry,
// with last_error naming the lost worker. A job with no retries left goes to the dead set
// instead. So a job that crashes every worker that runs it ends in the dead set. An entry
// that cannot be read is recorded as a dead job.
//
// After a scan that went through and was trusted, the same lock holder prunes the group.
// It deletes the consumers that have nothing pending and have been idle for ConsumerTTL
// (prune.lua, fenced the same way). So stopped workers' names do not pile up.
//
// # Trust
//
// An idle time is Redis's arithmetic. It is Redis's clock now minus the time of the entry's
// last delivery or renewal. It shows that a worker stopped renewing only if Redis was there all
// along to take the renewals, with a clock that ran evenly.
//
// Redis may stand still (SIGSTOP, a stalled host) or be cut off (a network partition). It may
// restart from disk, and the pending entries come back with their old delivery times. It may
// fail over to a master whose clock is ahead. After any of these, every pending entry looks
// idle at once. A scan right then would take the jobs of live workers that have not yet had
// their next renewal. That means duplicate runs, and jobs without retries left sent to the
// dead set as lost.
//
// So a Recoverer trusts idle times only within its own continuous observation of Redis. The
// observation is continuous while three things hold. First, every call the Recoverer makes
// is answered. These calls are a reading of Redis's clock before every scan, on the queue's
// node, and the scan's own calls. They are also its lock attempts, made every Interval even
// when another process holds the lock. Second, answers come at most 2x Interval apart, and at most half the
// visibility timeout apart. (When Interval is longer than a quarter of the timeout, Run reads
// the clock between scans.) Third, Redis's clock keeps pace with the local monotonic clock.
// The bound is a second, or a tenth of the visibility timeout if that is less, beyond the
// uncertainty of the readings' round trips.
//
// A failed call, a longer silence or a jump of Redis's clock is a gap. The Recoverer then
// forgets what it saw and starts watching anew. It recovers an entry only when three things
// hold. First, it has watched Redis without a gap for a lease period. In that time every live
// worker that can reach Redis renews its leases. Second, an earlier scan of the same
// observation listed the entry too. A clock jump that lands inside a scan, after its clock
// reading, is then seen by the next scan's reading before the entry can be taken. Third,
// recover.lua finds the entry idle for the visibility timeout, in the same atomic step as the
// recovery.
//
// # The cost
//
// In steady state there is none. Listing entries from two thirds of the timeout gives them
// their earlier sighting before they are due. So an entry whose worker died is recovered by
// the first scan after it has been idle for the visibility timeout. That is about
// VisibilityTimeout + Interval at worst, while Interval is at most about a lease period. A
// longer Interval may add an Interval.
//
// After a gap, and when the process starts, nothing is recovered for a while. The Recoverer
// must first watch Redis for a lease period and list the entry in an earlier scan. Jobs whose
// worker died during an outage, or before a lone worker restarted, come back later than they
// would otherwise. The delay is up to a lease period, plus an Interval. That wait, after rare
// events, is the price of never taking jobs from live workers because of them. Entries left
// for later are counted in Result.Deferred. Memory: the ids the last scan listed.
//
// What is left unseen is small against a lease. Take a silence shorter than the gap threshold
// or a clock move under the jump threshold. It leaves a live worker's entry short of the
// visibility timeout: idle for at most a lease period plus a round trip when it starts.
//
// A worker cut off from Redis while the Recoverer is not has, as far as anyone can tell,
// stopped renewing. Its job is recovered, and its late outcome refused (see Fencing).
//
// # Fencing
//
// The lock key shares the queue's hash tag. So the recover script checks the caller's token
// in the same atomic step as its changes. A scanner that lost the lock (it stalled past the
// TTL) changes nothing. Each entry's check and change are one atomic step. So even two
// scanners at once (a lost lock, or DisableLock) can only waste work, never recover a job
// twice: the second finds the entry gone.
//
// A worker whose job was recovered meanwhile learns it at its next lease renewal. Its entry
// is no longer pending, which cancels the handler's context. A completion it sends anyway is
// refused, because the job's entry changed.
//
// # Failure handling
//
// Redis errors are logged and the next interval tries again. Each is also a gap in the
// Recoverer's observation (see Trust). So recovery resumes a lease period after Redis answers
// again. The visibility timeout must be well above the lease-renewal interval (the worker
// renews at a third of it). Otherwise live jobs are taken from running workers.
package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/service"
	"github.com/conveyorq/conveyor/internal/tracing"
)

// Defaults of Config.
const (
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultInterval          = 5 * time.Second
	// DefaultLockTTL is the longest lock TTL Config.LockTTL defaults to (see there); it is
	// the default with DefaultVisibilityTimeout.
	DefaultLockTTL = 10 * time.Second
	// MinDefaultLockTTL is the shortest lock TTL Config.LockTTL defaults to, whatever the
	// visibility timeout. The lock is extended every third of its TTL. A shorter one would
	// be lost in a stall of the extending goroutine on a busy host, failing the scan.
	MinDefaultLockTTL  = time.Second
	DefaultBatchSize   = 100
	DefaultConsumerTTL = time.Hour
)

// Limits of Config.
const (
	// minVisibilityTimeout is the shortest visibility timeout a Recoverer takes: workers renew
	// leases every third of it, and Redis keeps idle times in milliseconds. A pipeline.Worker
	// asks more (300ms, pipeline.WorkerConfig.VisibilityTimeout); this lower bound lets tests
	// of this package recover within milliseconds.
	minVisibilityTimeout = 3 * time.Millisecond
	// MaxBatchSize bounds BatchSize: the recover script takes a batch's entry ids as arguments
	// and holds Redis while it works through them.
	MaxBatchSize = 1000
)

// ErrInvalidConfig is wrapped by NewRecoverer's errors about its Config.
var ErrInvalidConfig = errors.New("recovery: invalid config")

// Config configures a Recoverer.
//
// Every field has one meaning per value. Zero means the documented default. A negative or
// otherwise unusable value makes NewRecoverer return an error (wrapping ErrInvalidConfig);
// it is not replaced. A feature is turned off by a boolean field of its own (DisableLock),
// never by a special value of another field.
type Config struct {
	// Prefix starts every key. Defaults to "conveyor".
	Prefix string
	// Queue is the queue to recover. Required: a valid queue name, or the name of one
	// partition of a partitioned queue, "queue#i" (each partition is recovered on its own,
	// under its own lock).
	Queue string
	// VisibilityTimeout is how long an entry may go without a lease renewal before its job
	// may be recovered. The first scan after that recovers it, if this Recoverer has watched
	// Redis without a gap for a third of it (see Trust in the package documentation). Workers must
	// renew their leases at least every third of it. At least 3ms. Defaults
	// to DefaultVisibilityTimeout.
	VisibilityTimeout time.Duration
	// Interval is the time between scans, at least a millisecond. A recovery comes up to an
	// Interval after the visibility timeout. A silence of Redis longer than 2x Interval (or
	// half the visibility timeout, if less) is a gap in the Recoverer's observation (see
	// Trust). Defaults to DefaultInterval.
	Interval time.Duration
	// LockTTL is the lock's TTL, at least a millisecond; the lock is held only during a scan
	// and extended every third of it. A process that dies during a scan (a crash, a lost
	// connection) cannot release it. No other process scans the queue until the TTL runs
	// out, so a job whose worker died then comes back up to LockTTL later. So the default
	// follows the visibility timeout. It is a lease period (VisibilityTimeout/3), at least
	// MinDefaultLockTTL and at most DefaultLockTTL. That is 10s with the default 30s timeout,
	// and 1s with 3s or less. See
	// DefaultLockTTLFor.
	LockTTL time.Duration
	// BatchSize bounds the entries one script call looks at, at most MaxBatchSize. Defaults to
	// DefaultBatchSize.
	BatchSize int
	// ConsumerTTL is how long a consumer (a worker's name in the group) may sit idle with no
	// pending entries before a scan deletes it. Workers that stopped leave theirs behind.
	// Defaults to DefaultConsumerTTL, and is raised to 3x VisibilityTimeout if below it.
	ConsumerTTL time.Duration
	// DisableLock scans without the lock (and without the token check). Only for tests that
	// show the per-entry checks alone keep recovery correct.
	DisableLock bool
	// Logger receives what the recoverer did (component=recoverer).
	Logger zerolog.Logger
	// Now returns the current time written into jobs; tests may replace it. Defaults to
	// time.Now.
	Now func() time.Time
	// OnLock and OnScan, when set, are told when this Recoverer takes (true) and lets go
	// (false) of the queue's lock, and what each scan it ran did. They are for metrics: they
	// run on RunOnce's goroutine and must return quickly.
	OnLock func(held bool)
	OnScan func(Result)
	// TracerProvider records a span per job put back or sent to the dead set whose metadata
	// carries a W3C trace context: "recover <queue>", a PRODUCER span of the recoverer's own
	// (a root, or a child of the span of RunOnce's context), linked to the job's publish span.
	// Defaults to OpenTelemetry's global provider as it is at each scan; nothing is recorded
	// until the application sets one.
	TracerProvider trace.TracerProvider
}

// validate reports what in c is unusable (see Config), all of it at once; nil if nothing.
// Zero values are fine: they mean the defaults.
func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if err := keys.ValidatePartition(c.Queue); err != nil {
		bad("Queue: %v", err)
	}
	if c.VisibilityTimeout < 0 || c.VisibilityTimeout > 0 && c.VisibilityTimeout < minVisibilityTimeout {
		bad("VisibilityTimeout is %v; it must be at least %v, so that workers can renew leases every third of it (zero means %v)",
			c.VisibilityTimeout, minVisibilityTimeout, DefaultVisibilityTimeout)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		zero string
	}{
		{"Interval", c.Interval, DefaultInterval.String()},
		{"LockTTL", c.LockTTL, "a third of VisibilityTimeout, from " + MinDefaultLockTTL.String() + " to " + DefaultLockTTL.String()},
	} {
		if d.v < 0 || d.v > 0 && d.v < time.Millisecond {
			bad("%s is %v; it must be at least 1ms (zero means %s)", d.name, d.v, d.zero)
		}
	}
	if c.BatchSize < 0 || c.BatchSize > MaxBatchSize {
		bad("BatchSize is %d; it must be from 1 to %d (zero means %d)", c.BatchSize, MaxBatchSize, DefaultBatchSize)
	}
	if c.ConsumerTTL < 0 {
		bad("ConsumerTTL is %v; it must not be negative (zero means %v)", c.ConsumerTTL, DefaultConsumerTTL)
	}
	return errors.Join(errs...)
}

// withDefaults fills in the zero fields of a valid c.
func (c Config) withDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, keys.DefaultPrefix)
	c.VisibilityTimeout = cmp.Or(c.VisibilityTimeout, DefaultVisibilityTimeout)
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.LockTTL = cmp.Or(c.LockTTL, DefaultLockTTLFor(c.VisibilityTimeout))
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.ConsumerTTL = max(cmp.Or(c.ConsumerTTL, DefaultConsumerTTL), 3*c.VisibilityTimeout)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// DefaultLockTTLFor is the lock TTL a Config with visibility timeout vt and no LockTTL uses:
// vt/3, within [MinDefaultLockTTL, DefaultLockTTL]. A worker that dies while it holds the
// lock then delays its queue's recovery by at most a lease period (or a second). That is
// about a third of the time its jobs wait anyway (the visibility timeout), not a fixed 10s.
func DefaultLockTTLFor(vt time.Duration) time.Duration {
	return min(max(vt/3, MinDefaultLockTTL), DefaultLockTTL)
}

// Result counts what one scan did.
type Result struct {
	Requeued int // jobs put back into the stream
	Dead     int // jobs moved to the dead set, out of retries
	Dropped  int // stale entries of finished or moved-on jobs, acknowledged and deleted
	Skipped  int // entries renewed or settled between listing and recovery
	Poison   int // unreadable entries recorded as dead jobs
	Pruned   int // idle consumers with nothing pending, deleted from the group
	// Deferred counts entries idle past the visibility timeout left for a later scan (see
	// Trust). Either this Recoverer has not yet watched Redis for a lease period since it
	// started or since a gap, or no earlier scan of that observation listed them.
	Deferred int
	// Cascaded counts the tasks of workflows canceled or released by following the queue's
	// cascades left unfinished (Recoverer.followCascades).
	Cascaded int
}

func (r *Result) add(o Result) {
	r.Requeued += o.Requeued
	r.Dead += o.Dead
	r.Dropped += o.Dropped
	r.Skipped += o.Skipped
	r.Poison += o.Poison
	r.Pruned += o.Pruned
	r.Deferred += o.Deferred
	r.Cascaded += o.Cascaded
}

// store is the job state a Recoverer reads and changes. It is declared here, where it is used,
// with only the calls recovery makes. So a test can stand in a store that fails on demand.
// Package jobstate's conformance suite (jobstate/storetest) checks the real one.
type store interface {
	Events(ctx context.Context) events.Mode
	ScanState(ctx context.Context, q keys.Queue) (levels []int, cascades bool, err error)
	IdlePage(ctx context.Context, p jobstate.IdlePageParams) ([]jobstate.Lease, error)
	Recover(ctx context.Context, q keys.Queue, p jobstate.RecoverParams) (jobstate.Recovered, error)
	Prune(ctx context.Context, q keys.Queue, p jobstate.PruneParams) (int, error)
	Clock(ctx context.Context, q keys.Queue) (time.Time, error)
	FollowCascade(ctx context.Context, q keys.Queue, p jobstate.CascadeParams) (jobstate.CascadeResult, error)
}

// Recoverer recovers one queue; see the package documentation.
type Recoverer struct {
	rdb   redis.UniversalClient
	store store
	cfg   Config
	q     keys.Queue
	lock  *Lock
	log   zerolog.Logger
	watch *watch
	loop  service.Loop

	requeued atomic.Int64
	dead     atomic.Int64

	tracer tracing.Tracer

	skipTrust bool         // tests only: recover what is idle, as if watched long enough
	skew      atomic.Int64 // tests only: added to Redis's clock readings (ns)
}

// NewRecoverer returns a Recoverer for cfg.Queue, or the error (wrapping ErrInvalidConfig) of
// an unusable cfg.
func NewRecoverer(rdb redis.UniversalClient, cfg Config) (*Recoverer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Recoverer{rdb: rdb}
	lq := keys.New("", cfg.Queue)
	lc := cfg.Logger.With().Str("component", "recoverer").Str("queue", lq.Name())
	if lq.Tag() != lq.Name() {
		lc = lc.Int("partition", lq.Partition()) // job lines name the user's queue, and where
	}
	r.log = lc.Logger()
	r.cfg = cfg.withDefaults()
	r.q = keys.New(r.cfg.Prefix, r.cfg.Queue)
	r.store = jobstate.NewStore(rdb, r.cfg.Prefix)
	r.lock = NewLock(rdb, r.q.RecoveryLock(), r.cfg.LockTTL)
	r.watch = newWatch(r.cfg, &r.log)
	r.tracer = tracing.New(cfg.TracerProvider)
	return r, nil
}

// Totals returns how many jobs this Recoverer put back and moved to the dead set so far.
func (r *Recoverer) Totals() (requeued, dead int64) { return r.requeued.Load(), r.dead.Load() }

// Name names the Recoverer in a worker's logs.
func (r *Recoverer) Name() string { return "recoverer " + r.cfg.Queue }

// Start runs Run on a goroutine of its own until Stop or until ctx ends, for a worker that
// starts its background parts from a list.
func (r *Recoverer) Start(ctx context.Context) error {
	r.loop.Start(ctx, func(ctx context.Context) { _ = r.Run(ctx) }) // Run returns nil
	return nil
}

// Stop ends what Start started and returns once it has ended.
func (r *Recoverer) Stop() { r.loop.Stop() }

// Run scans at once, then every Interval (with a little jitter so replicas do not fire
// together), until ctx ends; it returns nil then. When Interval is longer than a quarter of
// the visibility timeout, Run also reads Redis's clock between scans. So its observation of
// Redis has no gap (see Trust).
func (r *Recoverer) Run(ctx context.Context) error {
	probe := r.watch.probeEvery()
	var failingSince time.Time // the first of the scans failing in a row, if any
	for {
		jitter := time.Duration(rand.Int64N(int64(r.cfg.Interval)/5+1)) - r.cfg.Interval/10
		wait := r.cfg.Interval + jitter
		_, _, err := r.RunOnce(ctx)
		switch now := time.Now(); {
		case ctx.Err() != nil:
		case err != nil:
			// One line per scan, which comes every Interval: an outage is logged once per
			// scan, with the real wait.
			if failingSince.IsZero() {
				failingSince = now
			}
			r.log.Error().Err(err).Dur("retry_in", wait.Round(time.Millisecond)).
				Dur("failing_for", now.Sub(failingSince).Round(time.Millisecond)).Msg("recover stale jobs")
		case !failingSince.IsZero():
			lasted := now.Sub(failingSince).Round(time.Millisecond)
			failingSince = time.Time{}
			r.log.Info().Dur("after", lasted).Msg("reconnected to Redis after " + lasted.String())
		}
		for {
			step := wait
			if r.cfg.Interval > probe {
				step = min(wait, probe)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(step):
			}
			if wait -= step; wait <= 0 {
				break
			}
			if err := r.readClock(ctx); err != nil && ctx.Err() == nil {
				r.log.Debug().Err(err).Msg("watch Redis between scans")
			}
		}
	}
}

// RunOnce reads Redis's clock and, if this process gets the lock, runs one scan. It reports
// whether it scanned. A scan recovers an entry only once this Recoverer has watched Redis
// without a gap for a lease period, and an earlier scan listed the entry (see Trust). So the
// first scans of a new Recoverer defer what they find (Result.Deferred). For its observation to
// have no gap, call RunOnce at least every Interval, as Run does.
func (r *Recoverer) RunOnce(ctx context.Context) (Result, bool, error) {
	var res Result
	if err := r.readClock(ctx); err != nil {
		return res, false, err
	}
	if r.cfg.DisableLock {
		err := r.scanAndPrune(ctx, "", &res)
		r.report(res)
		return res, true, err
	}
	var serr error
	ran, err := r.lock.Do(ctx, func(ctx context.Context) error {
		token := r.lock.Token()
		if token == "" {
			// Lost between Acquire and now; an empty token would turn the script's fence off.
			serr = ErrLockLost
			return nil
		}
		if r.cfg.OnLock != nil {
			r.cfg.OnLock(true)
		}
		serr = r.scanAndPrune(ctx, token, &res)
		return nil
	})
	r.note(ctx, err) // the lock's own calls
	if ran {
		if r.cfg.OnLock != nil {
			r.cfg.OnLock(false)
		}
		r.report(res)
	}
	return res, ran, errors.Join(err, serr)
}

// scanAndPrune scans, then prunes stopped consumers if the scan went through and this
// Recoverer trusts what it sees (consumers' idle times are Redis's, like entries').
// Then it follows the queue's workflow cascades left unfinished (followCascades).
func (r *Recoverer) scanAndPrune(ctx context.Context, token string, res *Result) error {
	trusted, cascades, err := r.scan(ctx, token, res)
	if err == nil && trusted {
		err = r.prune(ctx, token, r.cfg.ConsumerTTL, res)
	}
	if err == nil && cascades {
		err = r.followCascades(ctx, res)
	}
	return err
}

// followCascades follows what is left of the queue's workflow cascades until none is left.
// It calls jobstate.Store.FollowCascade, jobstate.CascadeStep edges a call. What is left are
// the dependents of a dead or canceled task of a wide workflow. The script that ended the task
// left them past its budget, and no later call went on with them. (The canceling process
// died, or the death was a worker's outcome.)
// Each edge is followed once whoever follows it, so it needs no lock. A scan calls it only
// when its first read (views) found the work list not empty: an idle scan costs no call.
func (r *Recoverer) followCascades(ctx context.Context, res *Result) error {
	for {
		c, err := r.store.FollowCascade(ctx, r.q, jobstate.CascadeParams{Now: r.cfg.Now(), Events: r.store.Events(ctx)})
		r.note(ctx, err)
		if err != nil {
			return fmt.Errorf("workflow cascades: %w", err)
		}
		res.Cascaded += c.Canceled + c.Released
		if c.Left == 0 {
			return nil
		}
	}
}

func (r *Recoverer) report(res Result) {
	if r.cfg.OnScan != nil {
		r.cfg.OnScan(res)
	}
	r.requeued.Add(int64(res.Requeued))
	r.dead.Add(int64(res.Dead))
	if res.Requeued+res.Dead+res.Poison+res.Dropped > 0 {
		r.log.Info().Int("num_requeued", res.Requeued).Int("num_dead", res.Dead).
			Int("num_dropped", res.Dropped).Int("num_poison", res.Poison).Msg("recovered stale jobs")
	}
	if res.Deferred > 0 {
		r.log.Debug().Int("num_deferred", res.Deferred).
			Msg("idle entries left for a later scan: Redis not yet watched long enough")
	}
	if res.Pruned > 0 {
		r.log.Info().Int("num_pruned", res.Pruned).Msg("deleted idle consumers with nothing pending")
	}
	if res.Cascaded > 0 {
		r.log.Info().Int("num_tasks", res.Cascaded).Msg("followed workflow cascades left unfinished")
	}
}

var errFenced = errors.New("recovery: lock no longer held; scan stopped")

// prune deletes consumers that stopped (see prune.lua).
// Every priority level's stream has a group of its own, pruned alike.
func (r *Recoverer) prune(ctx context.Context, token string, idle time.Duration, res *Result) error {
	views, _, err := r.views(ctx)
	if err != nil {
		return err
	}
	for _, q := range views {
		n, err := r.store.Prune(ctx, q, jobstate.PruneParams{Token: token, MinIdle: idle})
		if errors.Is(err, jobstate.ErrLockLost) {
			err = errFenced
		}
		r.note(ctx, err)
		switch {
		case rediserr.IsNoStream(err):
			continue
		case errors.Is(err, errFenced):
			return err
		case err != nil:
			return fmt.Errorf("prune consumers: %w", err)
		}
		res.Pruned += n
	}
	return nil
}

// scan lists the pending entries idle for two thirds of the visibility timeout or more. It
// recovers, with recover.lua, those idle for the whole of it that an earlier scan of the same
// observation listed too. It does so only once this Recoverer has watched Redis for a lease
// period (see Trust).
// It scans the queue's stream and the stream of every priority level its jobs used
// (keys.Queue.Levels, read at each scan). It reports whether it trusted what it saw, and
// whether the queue has workflow cascades left to follow (views).
func (r *Recoverer) scan(ctx context.Context, token string, res *Result) (trusted, cascades bool, err error) {
	epoch, trusted, seen := r.watch.sightings(time.Now())
	if r.skipTrust {
		trusted = true
	}
	listed := map[string]struct{}{}
	complete := false
	defer func() { r.watch.remember(epoch, listed, complete) }()
	views, cascades, err := r.views(ctx)
	if err != nil {
		return trusted, false, err
	}
	for _, q := range views {
		if err := r.scanStream(ctx, q, token, epoch, &trusted, seen, listed, res); err != nil {
			return trusted, false, err
		}
	}
	complete = true
	return trusted, cascades, nil
}

// views is the queue and its view at each priority level its jobs used (keys.Queue.Levels,
// AtLevel): the streams a scan and a prune go through.
// In the same round trip it reads whether the queue has workflow cascades to follow
// (jobstate.Store.ScanState).
func (r *Recoverer) views(ctx context.Context) ([]keys.Queue, bool, error) {
	views := []keys.Queue{r.q}
	levels, cascades, err := r.store.ScanState(ctx, r.q)
	r.note(ctx, err)
	if err != nil {
		return nil, false, rediserr.Wrap("recover", fmt.Errorf("read the priority levels: %w", err))
	}
	for _, level := range levels {
		views = append(views, r.q.AtLevel(level))
	}
	return views, cascades, nil
}

// scanStream is scan's work on one stream: q's (a level's view, keys.Queue.AtLevel). Entry
// ids are remembered (listed, seen) as they are for level 1, and prefixed with the level for
// the others: two streams may hand out the same id.
func (r *Recoverer) scanStream(ctx context.Context, q keys.Queue, token string, epoch int, trusted *bool,
	seen, listed map[string]struct{}, res *Result) error {
	vt := r.cfg.VisibilityTimeout
	mark := func(id string) string { return id }
	if q.Level() > keys.MinPriority {
		prefix := strconv.Itoa(q.Level()) + ":"
		mark = func(id string) string { return prefix + id }
	}
	start := "-"
	for {
		pend, err := r.store.IdlePage(ctx, jobstate.IdlePageParams{Queue: q, MinIdle: vt - r.watch.lease,
			Start: start, N: r.cfg.BatchSize})
		r.note(ctx, err)
		if err != nil {
			if rediserr.IsNoStream(err) || errors.Is(err, redis.Nil) {
				return nil // no worker has read this stream yet
			}
			return rediserr.Wrap("recover", fmt.Errorf("list idle entries: %w", err))
		}
		if len(pend) == 0 {
			return nil
		}
		// A gap during the scan (a slow answer) takes the trust back.
		*trusted = *trusted && (r.skipTrust || r.watch.valid(epoch))
		ids := make([]string, 0, len(pend))
		for _, p := range pend {
			key := mark(p.Entry)
			listed[key] = struct{}{}
			if p.Idle < vt {
				continue // not due yet: listed so that the scan that finds it due has seen it before
			}
			if _, before := seen[key]; *trusted && (before || r.skipTrust) {
				ids = append(ids, p.Entry)
			} else {
				res.Deferred++
			}
		}
		if len(ids) > 0 {
			if err := r.recover(ctx, q, token, ids, res); err != nil {
				return err
			}
		}
		if len(pend) < r.cfg.BatchSize {
			return nil
		}
		start = nextID(pend[len(pend)-1].Entry)
	}
}

// recover runs recover.lua on ids, entries of q.Stream().
func (r *Recoverer) recover(ctx context.Context, q keys.Queue, token string, ids []string, res *Result) error {
	start := time.Now()
	out, err := r.store.Recover(ctx, q, jobstate.RecoverParams{Token: token,
		VisibilityTimeout: r.cfg.VisibilityTimeout, Now: r.cfg.Now(), Events: r.store.Events(ctx), Entries: ids})
	if errors.Is(err, jobstate.ErrLockLost) {
		err = errFenced
	}
	r.note(ctx, err)
	switch {
	case errors.Is(err, errFenced):
		return err
	case err != nil:
		return fmt.Errorf("recover entries: %w", err)
	}
	res.add(Result{Requeued: out.Requeued, Dead: out.Dead, Dropped: out.Dropped,
		Skipped: out.Skipped, Poison: out.Poison})
	if len(out.Traced) > 0 {
		r.trace(ctx, out.Traced, start)
	}
	return nil
}

// trace records the recover span of each job of traced. The span is a child of the
// recoverer's context's span, or a root. It is linked to the job's publish span, and runs
// from the start of the recover call to now.
func (r *Recoverer) trace(ctx context.Context, traced []jobstate.RecoveredJob, start time.Time) {
	tr := r.tracer.Get()
	if tr == nil {
		return
	}
	queue := keys.New("", r.cfg.Queue).Name()
	for _, j := range traced {
		link := tracing.SpanContextOf(j.Traceparent, j.Tracestate)
		attrs := append(tracing.Messaging(tracing.OpSend, "recover", queue), tracing.MessageID(j.ID),
			tracing.AttrRecovery.String(string(j.Status)))
		_, span := tr.Start(ctx, "recover "+queue, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithTimestamp(start), trace.WithLinks(trace.Link{SpanContext: link}), trace.WithAttributes(attrs...))
		span.End()
	}
}

// nextID returns the smallest stream id after id ("ms-seq" -> "ms-(seq+1)").
func nextID(id string) string {
	ms, seq, ok := strings.Cut(id, "-")
	n, err := strconv.ParseUint(seq, 10, 64)
	if !ok || err != nil {
		return id
	}
	if n == math.MaxUint64 {
		// n+1 would wrap to 0 and restart the listing from the front, forever.
		m, err := strconv.ParseUint(ms, 10, 64)
		if err != nil || m == math.MaxUint64 {
			return id
		}
		return strconv.FormatUint(m+1, 10) + "-0"
	}
	return ms + "-" + strconv.FormatUint(n+1, 10)
}
