// Package delayed promotes delayed and retrying jobs into their queue's stream when they are due.
//
// # Model
//
// A job that must wait sits in the queue's scheduled sorted set. It was published with a
// delay, or it is a failed attempt waiting for its retry. Its score is its due time in unix
// milliseconds, and its payload is in its hash.
//
// The Scheduler runs promote.lua (internal/jobstate, Store.Promote). In one atomic step it
// moves up to BatchSize due jobs into the stream and removes them from the set. Each moved
// job gets a new entry, status queued, and its payload moved into the entry. The script
// returns the next due time. When more are due the Scheduler runs again at once. Otherwise
// it sleeps until that time, at most MaxSleep.
//
// # Whose clock
//
// A job is due when Redis's clock reaches its due time. promote.lua reads Redis's TIME,
// never the clock of the process that runs the Scheduler. Every worker process runs a
// Scheduler. A worker's clock that runs ahead would otherwise promote jobs early, and the
// fastest clock among them would decide for all. Redis's clock is the one they share, so a
// job is never early by it, however wrong a worker's own clock is.
//
// The Scheduler also sleeps in Redis time. promote.lua returns Redis's time along with the
// next due time, and the wait is their difference, bounded by MaxSleep. So a local clock
// that is off neither promotes early nor wakes again and again to find nothing due.
//
// The Scheduler keeps the offset measured at each queue's last promotion (Redis's time
// minus its own). It turns due times heard on the wake channel into its own clock with it.
//
// Due times themselves come from the clocks of the processes that publish or retry a job.
// WithDelay is "d from the producer's now". A producer whose clock is off makes its jobs due
// that much earlier or later by Redis's clock.
//
// # Batch size
//
// Redis serves no other client while a script runs. So BatchSize bounds how long one
// promotion holds it (BenchmarkPromoteMaxBatch; docs/BENCHMARKS.md has the time per job).
// BatchSize is capped at MaxBatchSize; a larger batch would promote no faster per job.
// A backlog larger than a batch takes several calls in a row. Redis serves other clients
// between them.
//
// # Waking early
//
// Some scripts add a job that becomes the earliest in a set (an enqueue or a retry). They
// publish its due time on the queue's wake channel. Every Scheduler subscribed to it moves
// its timer earlier. MaxSleep bounds the damage of a missed message (a reconnect).
//
// # Many schedulers
//
// Every worker process runs one. They need no lock: a promotion is one script, and each job
// is promoted once. Each due time wakes all of them, and all but one find nothing to move.
// That costs one cheap script call each.
//
// # Failure handling
//
// A Redis error is logged, and the queue is tried again after a short backoff. A crash at
// any point never loses a job. It leaves the set only in the same step that puts it in the
// stream.
package delayed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/outage"
	"github.com/conveyorq/conveyor/internal/service"
)

// Defaults and limits of Config.
const (
	DefaultBatchSize = 500
	DefaultMaxSleep  = time.Second
	// MaxBatchSize bounds BatchSize. A promotion is one script, and Redis serves no other
	// client while it runs. The cost per job is flat from 100 jobs up. So larger batches
	// promote no faster; they only hold Redis longer (docs/BENCHMARKS.md, "Promotion").
	MaxBatchSize = 1000
)

// Config configures a Scheduler.
//
// Every field has one meaning per value. Zero means the documented default. A negative or
// otherwise unusable value is an error, which New returns. Such values are BatchSize < 0
// or > MaxBatchSize, MaxSleep < 0, and a queue name that keys.ValidateQueue refuses.
type Config struct {
	// Prefix starts every key. Defaults to "conveyor".
	Prefix string
	// Queues to promote jobs in: queue names, or partition names ("queue#i") of partitioned
	// queues. Run requires at least one.
	Queues []string
	// BatchSize bounds the jobs one script call promotes, at most MaxBatchSize. Defaults to
	// DefaultBatchSize.
	BatchSize int
	// MaxSleep bounds the wait between two checks of a queue: how long a job whose wake
	// message was missed can wait past its due time. Defaults to DefaultMaxSleep.
	MaxSleep time.Duration
	// Logger receives errors (component=scheduler).
	Logger zerolog.Logger
	// OnPromote, when set, is called by Run after each promotion that moved jobs. It gets
	// how many moved, and the scheduler's lag. The lag is how long the most overdue of them
	// waited past its due time by Redis's clock. It is for metrics: it runs on Run's
	// goroutine and must return quickly.
	OnPromote func(queue string, moved int, lag time.Duration)
}

// validate reports the fields of c that are unusable (see Config); nil when every field is
// usable. Zero values are usable: they mean the defaults.
func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("delayed: "+format, args...)) }
	if c.BatchSize < 0 || c.BatchSize > MaxBatchSize {
		bad("Config.BatchSize is %d; it must be 1 to %d (zero means %d)", c.BatchSize, MaxBatchSize, DefaultBatchSize)
	}
	if c.MaxSleep < 0 {
		bad("Config.MaxSleep is %v; it must not be negative (zero means %v)", c.MaxSleep, DefaultMaxSleep)
	}
	for _, name := range c.Queues {
		if err := keys.ValidatePartition(name); err != nil {
			bad("Config.Queues: %w", err)
		}
	}
	return errors.Join(errs...)
}

// promoter is the job state a Scheduler changes. It is declared here, where it is used, with
// only the calls the Scheduler makes. So a test can stand in a store that fails on demand.
// Package jobstate's conformance suite (jobstate/storetest) checks the real one.
type promoter interface {
	Events(ctx context.Context) events.Mode
	Promote(ctx context.Context, q keys.Queue, p jobstate.PromoteParams) (jobstate.Promoted, error)
}

// Scheduler promotes due jobs; see the package documentation.
type Scheduler struct {
	rdb   redis.UniversalClient
	store promoter
	cfg   Config // with the defaults filled in
	log   zerolog.Logger
	// outage paces the retries and error lines of failing promotions: one line per backoff
	// step for all the queues, and one when a promotion goes through again.
	outage outage.Spell
	loop   service.Loop
}

// Bounds of the backoff of failing promotions.
const (
	minRetryWait = 100 * time.Millisecond
	maxRetryWait = 2 * time.Second
)

// New returns a Scheduler for the queues in cfg, or the error of an unusable cfg (see Config).
func New(rdb redis.UniversalClient, cfg Config) (*Scheduler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, keys.DefaultPrefix)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	cfg.MaxSleep = cmp.Or(cfg.MaxSleep, DefaultMaxSleep)
	return &Scheduler{rdb: rdb, store: jobstate.NewStore(rdb, cfg.Prefix), cfg: cfg,
		log:    cfg.Logger.With().Str("component", "scheduler").Logger(),
		outage: outage.Spell{Min: min(minRetryWait, cfg.MaxSleep), Max: maxRetryWait}}, nil
}

// Promote moves up to BatchSize jobs of queue that are due by Redis's clock into its stream.
// It returns how many moved and when the next job is due (the zero time when none waits).
// It also returns Redis's clock when it looked, the time the due times were compared with.
func (s *Scheduler) Promote(ctx context.Context, queue string) (moved int, next, redisNow time.Time, err error) {
	moved, next, redisNow, _, err = s.promote(ctx, queue, s.cfg.BatchSize)
	return moved, next, redisNow, err
}

// promote is Promote with a batch of limit jobs; it also returns the batch's lag (see
// Config.OnPromote), negative when nothing was due.
func (s *Scheduler) promote(ctx context.Context, queue string, limit int) (int, time.Time, time.Time, time.Duration, error) {
	q := keys.New(s.cfg.Prefix, queue)
	p, err := s.store.Promote(ctx, q, jobstate.PromoteParams{Limit: limit, Events: s.store.Events(ctx)})
	if err != nil {
		return 0, time.Time{}, time.Time{}, 0, fmt.Errorf("promote %s: %w", queue, err)
	}
	return p.Moved, p.Next, p.Now, p.Lag, nil
}

// errNoQueues is Run's and Start's error for a Scheduler made without queues.
var errNoQueues = errors.New("delayed: no queues")

// Name names the Scheduler in a worker's logs.
func (s *Scheduler) Name() string { return "scheduler" }

// Start runs Run on a goroutine of its own until Stop or until ctx ends, for a worker that
// starts its background parts from a list. It refuses a Scheduler made without queues.
func (s *Scheduler) Start(ctx context.Context) error {
	if len(s.cfg.Queues) == 0 {
		return errNoQueues
	}
	s.loop.Start(ctx, func(ctx context.Context) { _ = s.Run(ctx) }) // Run fails only without queues
	return nil
}

// Stop ends what Start started and returns once it has ended.
func (s *Scheduler) Stop() { s.loop.Stop() }

// Run promotes due jobs until ctx ends; it returns nil then. Redis errors are logged and retried.
// A Scheduler made without queues is an error at once.
func (s *Scheduler) Run(ctx context.Context) error {
	if len(s.cfg.Queues) == 0 {
		return errNoQueues
	}
	channels := make([]string, len(s.cfg.Queues))
	byChannel := make(map[string]int, len(s.cfg.Queues))
	for i, name := range s.cfg.Queues {
		channels[i] = keys.New(s.cfg.Prefix, name).Wake()
		byChannel[channels[i]] = i
	}
	ps := s.rdb.Subscribe(ctx, channels...)
	defer ps.Close()
	wake := ps.Channel()

	// Per queue: when to look again, by the local monotonic clock (zero: now). Also Redis's
	// clock minus the local one, measured at the last promotion. On a cluster each queue's
	// shard has a clock of its own.
	next := make([]time.Time, len(s.cfg.Queues))
	offset := make([]time.Duration, len(s.cfg.Queues))
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := time.Now()
		soonest := now.Add(s.cfg.MaxSleep)
		for i, name := range s.cfg.Queues {
			if next[i].After(now) {
				soonest = earlier(soonest, next[i])
				continue
			}
			next[i] = s.promoteDue(ctx, name, &offset[i])
			soonest = earlier(soonest, next[i])
		}
		if ctx.Err() != nil {
			return nil
		}
		timer.Reset(max(0, time.Until(soonest)))
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
				break wait
			case m, ok := <-wake:
				if !ok {
					return nil
				}
				i, known := byChannel[m.Channel]
				ms, err := strconv.ParseInt(m.Payload, 10, 64)
				if !known || err != nil {
					continue
				}
				// A due time in unix ms, due when Redis's clock reaches it: the local time
				// then is now plus how far Redis's clock (now + offset) has to go.
				now := time.Now()
				due := now.Add(time.UnixMilli(ms).Sub(now.Add(offset[i])))
				if due.Before(next[i]) {
					next[i] = due
					if due.Before(soonest) {
						soonest = due
						// Go 1.23+ timers: Reset discards a pending fire, no draining.
						timer.Reset(max(0, time.Until(due)))
					}
				}
			}
		}
	}
}

// promoteDue promotes everything due in queue and returns when, by the local clock, to look
// again. It stores Redis's clock minus the local one in offset.
func (s *Scheduler) promoteDue(ctx context.Context, queue string, offset *time.Duration) time.Time {
	for {
		// Redis reads its clock during the call; the local reading closest before it is the
		// one taken just before the call. Measured from it, a wait ends when Redis's clock
		// reaches the due time, give or take the trip of the next request.
		start := time.Now()
		moved, next, redisNow, lag, err := s.promote(ctx, queue, s.cfg.BatchSize)
		if err != nil {
			now := time.Now()
			if ctx.Err() != nil {
				return now
			}
			step := s.outage.Failed(now)
			if step.Log {
				s.log.Error().Err(err).Str("queue", queue).Dur("retry_in", step.Wait.Round(time.Millisecond)).
					Int("tries", step.Tries).Dur("failing_for", step.FailingFor.Round(time.Millisecond)).
					Msg("promote due jobs")
			}
			return now.Add(step.Wait)
		}
		if lasted, ended := s.outage.OK(time.Now()); ended {
			lasted = lasted.Round(time.Millisecond)
			s.log.Info().Dur("after", lasted).Msg("reconnected to Redis after " + lasted.String())
		}
		*offset = redisNow.Sub(start)
		if moved > 0 {
			s.log.Debug().Str("queue", queue).Int("num_promoted", moved).Msg("promoted due jobs")
			if s.cfg.OnPromote != nil {
				s.cfg.OnPromote(queue, moved, max(0, lag))
			}
		}
		if moved < s.cfg.BatchSize {
			// Bounded even when the next job is far off: a wake message missed meanwhile (a
			// reconnect) must not hold back an earlier job until then.
			wait := s.cfg.MaxSleep
			if !next.IsZero() {
				wait = min(wait, next.Sub(redisNow))
			}
			return start.Add(max(0, wait))
		}
	}
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
