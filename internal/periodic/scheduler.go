package periodic

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/lock"
	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/service"
)

// Defaults of Config.
const (
	DefaultLockTTL  = 3 * time.Second
	DefaultTakeover = 500 * time.Millisecond
	DefaultGrace    = time.Minute
	DefaultRefresh  = time.Second
)

// maxTicksPerPass bounds the ticks one schedule enqueues in one pass, so that a pass stays
// short; the next pass goes on. At most Grace / interval ticks are ever due at once.
const maxTicksPerPass = 1000

// staleAfter is how old the state a pass read of a schedule may be when it enqueues one of its
// ticks. Past it the pass leaves the schedule due, and the next pass, which follows at once,
// reads it again. Otherwise a scheduler that stalled between its read and its enqueue could
// enqueue a tick that others handled, whose job was since pruned. It is counted from the read of
// the schedule's own state (a chunk of readChunk), never from a read of all.
const staleAfter = time.Second

// dueBatch bounds the due schedules one pass takes from the due index, and readChunk those
// whose state it reads in one round trip before enqueueing their ticks.
const (
	dueBatch  = 256
	readChunk = 32
)

// migrateEvery is how often a scheduler checks that the indexes hold every stored schedule
// (four counts), for those a version of Conveyor without the indexes stores meanwhile.
const migrateEvery = time.Minute

// EnqueueFunc enqueues the job of d's tick at tick with id id; missed says it stands for
// ticks missed while no scheduler ran (MissedOnce). A job of that id that exists already is
// success (the idempotent enqueue), not an error.
type EnqueueFunc func(ctx context.Context, d Def, tick time.Time, id string, missed bool) error

// Config configures a Scheduler.
type Config struct {
	Prefix string
	// Enqueue writes a tick's job; required.
	Enqueue EnqueueFunc
	// Register is stored (Store.Put, SourceWorker) at Start: the worker's own schedules.
	Register []Def
	// LockTTL is the TTL of the lock whose holder runs ticks on time. Defaults to
	// DefaultLockTTL (3 s). A holder that dies leaves it for up to LockTTL, which Takeover
	// covers. The holder extends it every pass, at most Refresh apart: it must exceed Refresh.
	LockTTL time.Duration
	// Takeover is how late a tick may be before a scheduler that does not hold the lock enqueues
	// it. So a leader's death costs a tick at most about this much lateness, not LockTTL.
	// Defaults to DefaultTakeover.
	Takeover time.Duration
	// Grace is how late a tick may be and still run as itself; older ticks count as missed
	// (no scheduler ran) and follow their schedule's policy (MissedSkip, MissedOnce).
	// Defaults to DefaultGrace.
	Grace time.Duration
	// Refresh bounds the time between two reads of the schedules, so that a new or changed
	// schedule is seen within it. Defaults to DefaultRefresh.
	Refresh time.Duration
	// Now is the clock of the ticks. Defaults to time.Now.
	Now func() time.Time
	// OnTick, when set, is told of each tick enqueued as itself: its schedule, and how long
	// after the tick it was enqueued (by Now).
	OnTick func(schedule string, late time.Duration)
	// OnMissed, when set, is told of the ticks of a schedule found older than Grace. It learns
	// how many (counted up to maxCount), and whether they were run as one job (MissedOnce) or
	// dropped.
	OnMissed func(schedule string, ticks int, once bool)
	Logger   zerolog.Logger
}

func (c Config) withDefaults() Config {
	c.LockTTL = cmp.Or(c.LockTTL, DefaultLockTTL)
	c.Takeover = cmp.Or(c.Takeover, DefaultTakeover)
	c.Grace = cmp.Or(c.Grace, DefaultGrace)
	c.Refresh = cmp.Or(c.Refresh, DefaultRefresh)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks a config that withDefaults filled in.
func (c Config) validate() error {
	var errs []error
	if c.Enqueue == nil {
		errs = append(errs, errors.New("periodic: no Enqueue"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"lock TTL", c.LockTTL}, {"takeover", c.Takeover}, {"grace", c.Grace}, {"refresh", c.Refresh}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("periodic: %s %s must be positive", d.name, d.v))
		}
	}
	if c.LockTTL < time.Millisecond {
		errs = append(errs, errors.New("periodic: lock TTL under a millisecond"))
	}
	if c.LockTTL <= c.Refresh {
		errs = append(errs, fmt.Errorf("periodic: lock TTL %s must exceed refresh %s (the holder extends it every pass)", c.LockTTL, c.Refresh))
	}
	if c.Grace < c.Takeover {
		errs = append(errs, fmt.Errorf("periodic: grace %s is shorter than takeover %s", c.Grace, c.Takeover))
	}
	seen := map[string]bool{}
	for _, d := range c.Register {
		if err := d.Validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[d.Name] {
			errs = append(errs, fmt.Errorf("periodic: schedule %q registered twice", d.Name))
		}
		seen[d.Name] = true
	}
	return errors.Join(errs...)
}

// Scheduler is the service that enqueues schedules' ticks. Every worker runs one; see the
// package doc for how they share the work.
type Scheduler struct {
	cfg   Config
	rdb   redis.UniversalClient
	store *Store
	lock  *lock.Lock
	log   zerolog.Logger
	loop  service.Loop
	// failing is the last error of each schedule whose ticks fail, say because its queue refuses
	// the job. So it is logged when it begins or changes, not every pass. Only the loop's
	// goroutine uses it.
	failing map[string]string
	// lastPass is when (by Now) the last pass that read the due schedules ended; migrated
	// when the indexes were last checked. The loop's goroutine only.
	lastPass, migrated time.Time
	// since measures a read's age for staleAfter; time.Since but in tests.
	since func(time.Time) time.Duration
}

// New returns a Scheduler, or the error of an unusable config.
func New(rdb redis.UniversalClient, cfg Config) (*Scheduler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: cfg, rdb: rdb, log: cfg.Logger.With().Str("component", "periodic").Logger(), failing: map[string]string{},
		since: time.Since}
	if rdb != nil {
		s.store = NewStore(rdb, cfg.Prefix)
	}
	return s, nil
}

// Name is the service's name.
func (s *Scheduler) Name() string { return "periodic scheduler" }

// Start indexes the schedules stored without the indexes (by an older version), stores the
// registered schedules, then runs the loop until Stop.
func (s *Scheduler) Start(ctx context.Context) error {
	now := s.cfg.Now()
	if err := s.migrate(ctx, now); err != nil {
		return err
	}
	for _, d := range s.cfg.Register {
		d.Source = SourceWorker
		if err := s.store.Put(ctx, d, now); err != nil {
			return fmt.Errorf("register schedule %q: %w", d.Name, err)
		}
	}
	s.loop.Start(ctx, s.run)
	return nil
}

// Stop ends the loop and gives the lock back when held.
func (s *Scheduler) Stop() { s.loop.Stop() }

func (s *Scheduler) run(ctx context.Context) {
	defer s.release()
	pace := outage.Spell{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	// A little jitter, so replicas started together do not read in step.
	wait := time.Duration(rand.Int64N(int64(50 * time.Millisecond)))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		next, err := s.RunOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			step := pace.Failed(time.Now())
			if step.Log {
				s.log.Error().Err(err).Dur("retry_in", step.Wait).Int("tries", step.Tries).Msg("schedules pass failed")
			}
			wait = step.Wait
			continue
		}
		if lasted, ended := pace.OK(time.Now()); ended {
			s.log.Info().Dur("failing_for", outage.Round(lasted)).Msg("schedules pass works again")
		}
		wait = max(0, min(s.cfg.Refresh, time.Until(next)))
	}
}

func (s *Scheduler) release() {
	if s.lock != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.lock.Release(ctx)
		s.lock = nil
	}
}

// leader takes or extends the lock; a Redis error counts as not holding it.
//
// The lock calls run detached from ctx, bounded by the lock's TTL. Stop cancels ctx, and a
// call canceled in flight may have taken or kept the lock in Redis while the scheduler forgets
// it; release could then not give it back, and other schedulers would wait out the TTL.
func (s *Scheduler) leader(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.LockTTL)
	defer cancel()
	if s.lock != nil {
		err := s.lock.Refresh(ctx, s.cfg.LockTTL)
		if err == nil {
			return true
		}
		if !errors.Is(err, lock.ErrNotObtained) {
			// Redis did not answer; the lock may still be ours, so keep it to refresh or release.
			return false
		}
		s.lock = nil
	}
	lk, err := lock.Obtain(ctx, s.rdb, keys.SchedulesLock(s.cfg.Prefix), s.cfg.LockTTL)
	if err != nil {
		return false
	}
	s.lock = lk
	return true
}

func (s *Scheduler) migrate(ctx context.Context, now time.Time) error {
	n, err := s.store.migrate(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		s.log.Info().Int("changes", n).Msg("indexed schedules stored without the due index")
	}
	s.migrated = now
	return nil
}

// RunOnce is one pass. It reads the due index and enqueues every due tick of the schedules it
// names. For a scheduler without the lock, due means due for longer than Takeover. It returns
// when the next pass is due. An idle pass (nothing due) is one read of the index and one
// extension of the lock. With no schedule stored, it is the read alone.
func (s *Scheduler) RunOnce(ctx context.Context) (time.Time, error) {
	now := s.cfg.Now()
	next := now.Add(s.cfg.Refresh)
	if now.Sub(s.migrated) >= migrateEvery || now.Before(s.migrated) {
		if err := s.migrate(ctx, now); err != nil {
			return time.Time{}, err
		}
	}
	first, ok, err := s.store.first(ctx)
	if err != nil || !ok {
		// No schedule to run: no lock to hold either.
		return next, err
	}
	// The lock is held (extended) while there are schedules, due or not. So the same scheduler
	// goes on running ticks on time, and the others step in only once it is gone.
	delay := s.cfg.Takeover
	if s.leader(ctx) {
		delay = 0
	}
	if first.at.Add(delay).After(now) {
		if first.at.Add(delay).Before(next) {
			next = first.at.Add(delay)
		}
		return next, nil
	}
	cutoff := now.Add(-delay)
	due, after, ok, err := s.store.due(ctx, cutoff, dueBatch)
	if err != nil {
		return time.Time{}, err
	}
	if ok && after.at.Add(delay).Before(next) {
		next = after.at.Add(delay)
	}
	// A full batch may have more due behind it: the next pass follows at once.
	more := len(due) == dueBatch
	names := make([]string, len(due))
	for k, d := range due {
		names[k] = d.name
	}
	var errs []error
	for chunk := range slices.Chunk(names, readChunk) {
		read := time.Now()
		scs, err := s.store.read(ctx, chunk)
		if err != nil {
			return time.Time{}, err
		}
		for _, sc := range scs {
			at, again, err := s.pass(ctx, sc, now, read, delay)
			errs = append(errs, err)
			more = more || again
			if !at.IsZero() && at.Before(next) {
				next = at
			}
		}
	}
	s.lastPass = s.cfg.Now()
	if more {
		next = now
	}
	return next, errors.Join(errs...)
}

// pass handles one schedule the due index names. It enqueues its due ticks. When it is not due,
// its score was early (it was stored or resumed), and pass scores it again in the index. It
// returns when the schedule is next due, and whether it is left due because its read went stale.
// The zero time means no time before the next read of the index.
func (s *Scheduler) pass(ctx context.Context, sc Schedule, now, read time.Time, delay time.Duration) (time.Time, bool, error) {
	if sc.gone || sc.Paused {
		delete(s.failing, sc.Name) // deleted (or paused) while failing
		return time.Time{}, false, s.store.index(ctx, sc, time.Time{})
	}
	spec, err := Parse(sc.Spec)
	if err != nil || sc.Def.Validate() != nil {
		// Listed, and deletable, but not runnable (Put refuses such definitions): out of the
		// index until it is stored again.
		return time.Time{}, false, s.store.index(ctx, sc, time.Time{})
	}
	if sc.State.raw == "" {
		// Stored without a state (by hand, or deleted between two reads): start now.
		err := s.rdb.HSetNX(ctx, keys.ScheduleState(s.cfg.Prefix, sc.Name), keys.ScheduleFieldLast, ms(now)).Err()
		return time.Time{}, false, err
	}
	due := spec.Next(sc.State.Last)
	if due.IsZero() || now.Before(due.Add(delay)) {
		// Not due (yet, for a scheduler without the lock): its score was early.
		if !due.IsZero() && now.Before(due) {
			if err := s.store.index(ctx, sc, due); err != nil {
				return time.Time{}, false, err
			}
		}
		if due.IsZero() {
			return time.Time{}, false, s.store.index(ctx, sc, time.Time{})
		}
		return due.Add(delay), false, nil
	}
	last, stale, err := s.tick(ctx, sc, spec, now, read)
	s.report(sc.Name, err)
	if err != nil {
		// Tried again a Refresh later, not at the head of every pass: failing schedules
		// that outnumber a pass's batch must not keep the others from their ticks.
		st := sc
		if !last.Equal(sc.State.Last) {
			st.State.raw = ms(last)
		}
		return time.Time{}, false, s.store.index(ctx, st, now.Add(s.cfg.Refresh))
	}
	if stale {
		return time.Time{}, true, nil
	}
	due = spec.Next(last)
	if due.IsZero() {
		return time.Time{}, false, nil
	}
	return due.Add(delay), false, nil
}

// report logs a schedule's failed ticks when the failure begins or changes, and its end. One
// schedule's failure is not the pass's. The others' ticks go on, without the backoff of a failed
// pass, and the failing one is tried again a Refresh later.
func (s *Scheduler) report(name string, err error) {
	prev, was := s.failing[name]
	switch {
	case err == nil && was:
		delete(s.failing, name)
		s.log.Info().Str("schedule", name).Msg("schedule's ticks are enqueued again")
	case err != nil && err.Error() != prev:
		s.failing[name] = err.Error()
		s.log.Error().Err(err).Str("schedule", name).Msg("cannot enqueue a schedule's tick; trying again each refresh")
	}
}

// tick enqueues sc's due ticks up to now, each followed by the compare-and-set of its Last,
// and returns the Last it reached. A tick older than Grace is missed: its schedule's policy
// runs them once or drops them. It stops when another scheduler moved Last first, or, saying
// so (stale), when its read of the schedule's state is older than staleAfter.
func (s *Scheduler) tick(ctx context.Context, sc Schedule, spec Spec, now, read time.Time) (time.Time, bool, error) {
	st := sc.State
	cutoff := now.Add(-s.cfg.Grace)
	if first := spec.Next(st.Last); !first.After(cutoff) {
		if s.since(read) > staleAfter {
			return st.Last, true, nil
		}
		job := ""
		if sc.Missed == MissedOnce {
			job = TickID(sc.Name, first)
			if err := s.cfg.Enqueue(ctx, sc.Def, first, job, true); err != nil {
				return st.Last, false, err
			}
		}
		ok, err := s.store.advance(ctx, sc, st, cutoff, job, first, s.cfg.Now(), spec.Next(cutoff))
		if !ok || err != nil {
			return st.Last, false, err
		}
		ev := s.log.Warn().Str("schedule", sc.Name).Time("from", first).Time("to", cutoff).Str("missed", cmp.Or(sc.Missed, MissedSkip))
		if !s.lastPass.IsZero() && now.Sub(s.lastPass) < s.cfg.Grace {
			// This scheduler ran meanwhile: the schedulers fell behind, none was missing.
			ev.Dur("grace", s.cfg.Grace).Msg("ticks missed: enqueued later than the grace while schedulers ran")
		} else {
			ev.Msg("ticks missed while no scheduler ran")
		}
		if s.cfg.OnMissed != nil {
			s.cfg.OnMissed(sc.Name, spec.count(first, cutoff), sc.Missed == MissedOnce)
		}
		st = State{Last: cutoff, raw: ms(cutoff)}
	}
	for range maxTicksPerPass {
		t := spec.Next(st.Last)
		if t.IsZero() || t.After(now) {
			break
		}
		if s.since(read) > staleAfter {
			return st.Last, true, nil
		}
		id := TickID(sc.Name, t)
		if err := s.cfg.Enqueue(ctx, sc.Def, t, id, false); err != nil {
			return st.Last, false, err
		}
		at := s.cfg.Now()
		ok, err := s.store.advance(ctx, sc, st, t, id, t, at, spec.Next(t))
		if !ok || err != nil {
			return st.Last, false, err
		}
		if s.cfg.OnTick != nil {
			s.cfg.OnTick(sc.Name, max(0, at.Sub(t)))
		}
		st = State{Last: t, raw: ms(t)}
	}
	return st.Last, false, nil
}
