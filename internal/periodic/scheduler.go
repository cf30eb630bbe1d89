package periodic

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/keys"
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

// staleAfter is how old the state a pass read may be when it enqueues a tick. Past it the pass
// ends and reads again: a scheduler that stalled between its read and its enqueue could
// otherwise enqueue a tick that others handled and whose job was since pruned.
const staleAfter = time.Second

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
	// Takeover is how late a tick may be before a scheduler that does not hold the lock
	// enqueues it: a leader's death costs a tick at most about this much lateness, not
	// LockTTL. Defaults to DefaultTakeover.
	Takeover time.Duration
	// Grace is how late a tick may be and still run as itself; older ticks count as missed
	// (no scheduler ran) and follow their schedule's policy (MissedSkip, MissedOnce).
	// Defaults to DefaultGrace.
	Grace time.Duration
	// Refresh bounds the time between two reads of the schedules, so that a new or changed
	// schedule is seen within it. Defaults to DefaultRefresh.
	Refresh time.Duration
	// Now is the clock of the ticks. Defaults to time.Now.
	Now    func() time.Time
	Logger zerolog.Logger
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
	locks *redislock.Client
	lock  *redislock.Lock
	log   zerolog.Logger
	loop  service.Loop
	// failing is the last error of each schedule whose ticks fail (its queue refuses the
	// job, say), so that it is logged when it begins or changes, not every pass; the loop's
	// goroutine only.
	failing map[string]string
}

// New returns a Scheduler, or the error of an unusable config.
func New(rdb redis.UniversalClient, cfg Config) (*Scheduler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: cfg, rdb: rdb, log: cfg.Logger.With().Str("component", "periodic").Logger(), failing: map[string]string{}}
	if rdb != nil {
		s.store = NewStore(rdb, cfg.Prefix)
		s.locks = redislock.New(rdb)
	}
	return s, nil
}

// Name is the service's name.
func (s *Scheduler) Name() string { return "periodic scheduler" }

// Start stores the registered schedules, then runs the loop until Stop.
func (s *Scheduler) Start(ctx context.Context) error {
	now := s.cfg.Now()
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
func (s *Scheduler) leader(ctx context.Context) bool {
	if s.lock != nil {
		if err := s.lock.Refresh(ctx, s.cfg.LockTTL, nil); err == nil {
			return true
		}
		s.lock = nil
	}
	lk, err := s.locks.Obtain(ctx, keys.SchedulesLock(s.cfg.Prefix), s.cfg.LockTTL, nil)
	if err != nil {
		return false
	}
	s.lock = lk
	return true
}

// RunOnce is one pass: it reads the schedules and enqueues every tick due (for a scheduler
// without the lock: due for longer than Takeover). It returns when the next pass is due.
func (s *Scheduler) RunOnce(ctx context.Context) (time.Time, error) {
	lead := s.leader(ctx)
	read := time.Now()
	all, err := s.store.List(ctx)
	if err != nil {
		return time.Time{}, err
	}
	delay := s.cfg.Takeover
	if lead {
		delay = 0
	}
	now := s.cfg.Now()
	next := now.Add(s.cfg.Refresh)
	var errs []error
	for name := range s.failing {
		if !slices.ContainsFunc(all, func(sc Schedule) bool { return sc.Name == name }) {
			delete(s.failing, name) // deleted while failing
		}
	}
	for _, sc := range all {
		if sc.Paused {
			continue
		}
		spec, err := Parse(sc.Spec)
		if err != nil || sc.Def.Validate() != nil {
			continue // listed, and deletable, but not runnable; Put refuses such definitions
		}
		if sc.State.raw == "" {
			// Stored without a state (by hand, or deleted between two reads): start now.
			err := s.rdb.HSetNX(ctx, keys.ScheduleState(s.cfg.Prefix, sc.Name), keys.ScheduleFieldLast, ms(now)).Err()
			errs = append(errs, err)
			continue
		}
		due := spec.Next(sc.State.Last)
		if !due.IsZero() && !now.Before(due.Add(delay)) {
			var last time.Time
			last, err = s.tick(ctx, sc, spec, now, read)
			s.report(sc.Name, err)
			due = spec.Next(last)
		}
		if !due.IsZero() && due.Add(delay).Before(next) {
			next = due.Add(delay)
		}
	}
	return next, errors.Join(errs...)
}

// report logs a schedule's failed ticks when the failure begins or changes, and its end. One
// schedule's failure is not the pass's: the others' ticks go on, without the backoff of a
// failed pass, and the failing one is tried again at the next pass.
func (s *Scheduler) report(name string, err error) {
	prev, was := s.failing[name]
	switch {
	case err == nil && was:
		delete(s.failing, name)
		s.log.Info().Str("schedule", name).Msg("schedule's ticks are enqueued again")
	case err != nil && err.Error() != prev:
		s.failing[name] = err.Error()
		s.log.Error().Err(err).Str("schedule", name).Msg("cannot enqueue a schedule's tick; trying again every pass")
	}
}

// tick enqueues sc's due ticks up to now, each followed by the compare-and-set of its Last,
// and returns the Last it reached. A tick older than Grace is missed: its schedule's policy
// runs them once or drops them. It stops when another scheduler moved Last first, or when its
// read of the state is older than staleAfter.
func (s *Scheduler) tick(ctx context.Context, sc Schedule, spec Spec, now, read time.Time) (time.Time, error) {
	st := sc.State
	cutoff := now.Add(-s.cfg.Grace)
	if first := spec.Next(st.Last); !first.After(cutoff) {
		job := ""
		if sc.Missed == MissedOnce {
			job = TickID(sc.Name, first)
			if err := s.cfg.Enqueue(ctx, sc.Def, first, job, true); err != nil {
				return st.Last, err
			}
		}
		ok, err := s.store.advance(ctx, sc.Name, st, cutoff, job, first, s.cfg.Now())
		if !ok || err != nil {
			return st.Last, err
		}
		s.log.Warn().Str("schedule", sc.Name).Time("from", first).Time("to", cutoff).Str("missed", cmp.Or(sc.Missed, MissedSkip)).
			Msg("ticks missed while no scheduler ran")
		st = State{Last: cutoff, raw: ms(cutoff)}
	}
	for range maxTicksPerPass {
		t := spec.Next(st.Last)
		if t.IsZero() || t.After(now) || time.Since(read) > staleAfter {
			break
		}
		id := TickID(sc.Name, t)
		if err := s.cfg.Enqueue(ctx, sc.Def, t, id, false); err != nil {
			return st.Last, err
		}
		ok, err := s.store.advance(ctx, sc.Name, st, t, id, t, s.cfg.Now())
		if !ok || err != nil {
			return st.Last, err
		}
		st = State{Last: t, raw: ms(t)}
	}
	return st.Last, nil
}
