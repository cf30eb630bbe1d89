package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/periodic"
)

// Periodic is a periodic schedule: a job of Type with Payload enqueued into Queue at every
// tick of Spec. Register schedules in code with WorkerConfig.Periodic, or store them without a
// deploy with Inspector.CreateSchedule (the CLI's `conveyor schedules create`, the HTTP API's
// POST /v1/schedules). Either way a schedule lives in Redis under the prefix, and every worker
// runs it. That holds however many workers run, and whichever of them has it in code.
//
// Each tick makes exactly one job, whose id is "cron:" + Name + ":" + the tick's Unix
// seconds. So any number of workers may enqueue a tick: a repeated enqueue of an id writes
// nothing (WithID). One worker at a time holds a lock and enqueues ticks on time. When it
// dies, the others enqueue a tick once it is 500 ms late. See internal/periodic for
// the model, and README's "Periodic jobs".
type Periodic struct {
	// Name names the schedule: 1 to 64 characters from [A-Za-z0-9._-]. A schedule stored
	// again under a name replaces that one's definition and keeps its progress and pause.
	Name string
	// Spec says when ticks fall. It is a cron expression in robfig/cron/v3's syntax of 5
	// fields (minute first) or 6 (second first), or a descriptor (@hourly, @daily, ...). Or it
	// is "@every D" with D a whole number of seconds; @every ticks at the multiples of D since
	// the Unix epoch. Cron specs are read in UTC unless they start with CRON_TZ=Zone (an IANA
	// zone: "CRON_TZ=Europe/Berlin 0 0 9 * * 1-5").
	Spec string
	// Queue receives the jobs.
	Queue string
	// Type and Payload are the job's; Payload is at most 1 MiB (ErrPayloadTooLarge). Each
	// job also carries the metadata metakey.Schedule (the schedule's name) and
	// metakey.ScheduleTick (the tick, RFC 3339).
	Type    string
	Payload []byte
	// Missed says what becomes of ticks missed while no worker ran (ticks later than
	// a minute): MissedSkip (the default) drops them, MissedRunOnce runs them as one job.
	Missed MissedPolicy
}

// MissedPolicy is what a schedule's missed ticks become (Periodic.Missed).
type MissedPolicy string

// The missed-tick policies.
const (
	// MissedSkip drops missed ticks; the schedule goes on with its next tick.
	MissedSkip MissedPolicy = periodic.MissedSkip
	// MissedRunOnce enqueues one job for all the missed ticks, with the first one's id.
	MissedRunOnce MissedPolicy = periodic.MissedOnce
)

// ErrScheduleNotFound is the error of an operation on a schedule that is not stored.
var ErrScheduleNotFound = errors.New("pipeline: schedule not found")

// ErrTooManySchedules is returned by CreateSchedule for a new schedule when the stored ones
// number the bound already (InspectorConfig.MaxSchedules). A schedule stored again under its
// name is not a new one. A worker whose WorkerConfig.Periodic holds a new schedule past
// the default bound (100,000) fails to start, saying so.
var ErrTooManySchedules = errors.New("pipeline: too many schedules")

// defaultMaxSchedules is the default bound on the stored schedules: 100,000, the scale at
// which docs/RELIABILITY.md measured every tick on time and the cost of an idle worker.
const defaultMaxSchedules = periodic.DefaultMaxSchedules

// SchedulePage is one page of Inspector.SchedulesPage.
type SchedulePage struct {
	// Schedules are the page's schedules, by name.
	Schedules []Schedule `json:"schedules"`
	// Next is the cursor of the next page (the page's last name); empty when this page is the
	// last.
	Next string `json:"next"`
}

// Schedule is a stored schedule as listed (Inspector.Schedules).
type Schedule struct {
	Periodic
	// Source is "worker" for a schedule a worker registered (WorkerConfig.Periodic, the
	// worker's --cron), "api" for one stored by CreateSchedule.
	Source string
	Paused bool
	// LastRunAt is when the last job was enqueued, LastTick the tick it was for, LastJob its
	// id; zero and empty before the first.
	LastRunAt time.Time
	LastTick  time.Time
	LastJob   string
	// NextRunAt is the next tick due: in the past while a tick is overdue. Zero for a paused
	// schedule and for a spec with no more ticks.
	NextRunAt time.Time
}

// MarshalJSON writes the schedule in its wire form (the CLI's and the API's): times RFC 3339
// in UTC, null for none; a payload that is not JSON as a JSON string, no payload left out.
func (s Schedule) MarshalJSON() ([]byte, error) {
	d := s.def()
	d.Source = s.Source
	st := periodic.State{LastRunAt: s.LastRunAt, LastTick: s.LastTick, LastJob: s.LastJob}
	return periodic.Schedule{Def: d, Paused: s.Paused, State: st}.MarshalWire(s.NextRunAt)
}

// ParseSpec checks a schedule's spec (Periodic.Spec) and returns its next tick after now, or
// the error, wrapping ErrInvalid, of a spec that cannot be read. A spec with no tick within
// five years (30 February) answers the zero time.
func ParseSpec(spec string) (time.Time, error) {
	s, err := periodic.Parse(spec)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return s.Next(time.Now()), nil
}

func (p Periodic) def() periodic.Def {
	return periodic.Def{Name: p.Name, Spec: p.Spec, Queue: p.Queue, Type: p.Type, Payload: p.Payload, Missed: string(p.Missed)}
}

// validate checks a schedule with the rules of its parts: names, spec, policy, and the job's
// type and payload as Enqueue would.
func (p Periodic) validate() error {
	var errs []error
	if err := p.def().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := validateType(p.Type); err != nil {
		errs = append(errs, err)
	}
	if len(p.Payload) > defaultMaxPayloadBytes {
		errs = append(errs, fmt.Errorf("%w: schedule %q's payload is %d bytes, the limit is %d", ErrPayloadTooLarge, p.Name, len(p.Payload), defaultMaxPayloadBytes))
	}
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, ErrPayloadTooLarge) || errors.Is(err, ErrInvalid) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// scheduleOf converts a stored schedule.
func scheduleOf(s periodic.Schedule) Schedule {
	return Schedule{
		Periodic: Periodic{Name: s.Name, Spec: s.Spec, Queue: s.Queue, Type: s.Type, Payload: s.Payload,
			Missed: MissedPolicy(s.MissedPolicy())},
		Source: s.Source, Paused: s.Paused, LastRunAt: s.State.LastRunAt, LastTick: s.State.LastTick,
		LastJob: s.State.LastJob, NextRunAt: s.NextRun(),
	}
}

// scheduleErr is the pipeline's error of a schedule call that periodic refused.
func scheduleErr(err error, name string) error {
	return periodic.MapErr(err, name, periodic.Errs{Invalid: ErrInvalid, NotFound: ErrScheduleNotFound, TooMany: ErrTooManySchedules})
}

func (i *Inspector) schedules() *periodic.Store {
	return periodic.NewStore(i.rdb, i.cfg.Prefix).WithMax(i.cfg.MaxSchedules)
}

// CreateSchedule stores p (replacing a schedule of its name: its progress and pause are
// kept). Workers run it from their next read of the schedules, within a second; its
// first tick is the first after now. A bad schedule is an error wrapping ErrInvalid.
func (i *Inspector) CreateSchedule(ctx context.Context, p Periodic) error {
	if err := p.validate(); err != nil {
		return err
	}
	d := p.def()
	d.Source = periodic.SourceAPI
	return scheduleErr(i.schedules().Put(ctx, d, i.cfg.Now()), p.Name)
}

// Schedules returns every stored schedule, by name, with their last and next runs: a page
// at a time (SchedulesPage) until the last, so at most InspectorConfig.MaxSchedules. A
// program that shows them to people should page instead.
func (i *Inspector) Schedules(ctx context.Context) ([]Schedule, error) {
	all, err := i.schedules().List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, len(all))
	for k, s := range all {
		out[k] = scheduleOf(s)
	}
	return out, nil
}

// SchedulesPage returns a page of the stored schedules by name: those after page.Cursor (a
// page's Next; empty for the first page), at most page.Limit (0: 100; 1 to
// 1,000). It costs Redis two round trips, whatever the number of schedules. A cursor
// that is not a schedule's name returns ErrInvalid. Pages are not a snapshot: a schedule
// stored or deleted while a listing goes on may be seen or not.
func (i *Inspector) SchedulesPage(ctx context.Context, page Page) (*SchedulePage, error) {
	limit := page.Limit
	switch {
	case limit == 0:
		limit = defaultPageLimit
	case limit < 0 || limit > maxPageLimit:
		return nil, invalid("limit %d: want 1 to %d", page.Limit, maxPageLimit)
	}
	all, next, err := i.schedules().PageAfter(ctx, page.Cursor, limit)
	if err != nil {
		return nil, scheduleErr(err, page.Cursor)
	}
	out := &SchedulePage{Schedules: make([]Schedule, len(all)), Next: next}
	for k, s := range all {
		out.Schedules[k] = scheduleOf(s)
	}
	return out, nil
}

// GetSchedule returns schedule name, or ErrScheduleNotFound.
func (i *Inspector) GetSchedule(ctx context.Context, name string) (*Schedule, error) {
	s, err := i.schedules().GetNamed(ctx, name)
	if err != nil {
		return nil, scheduleErr(err, name)
	}
	out := scheduleOf(s)
	return &out, nil
}

// DeleteSchedule removes schedule name, its progress and its pause, or reports
// ErrScheduleNotFound. Jobs it enqueued stay. A schedule a worker registers comes back when
// such a worker starts: remove it from the worker's code or flags too.
func (i *Inspector) DeleteSchedule(ctx context.Context, name string) error {
	return scheduleErr(i.schedules().DeleteNamed(ctx, name), name)
}

// PauseSchedule stops schedule name's ticks until ResumeSchedule; a worker registering the
// schedule again does not resume it. Pausing a paused schedule does nothing.
func (i *Inspector) PauseSchedule(ctx context.Context, name string) error {
	return scheduleErr(i.schedules().SetPaused(ctx, name, true, i.cfg.Now()), name)
}

// ResumeSchedule undoes PauseSchedule. The ticks of the pause are dropped, whatever the
// schedule's Missed: its next job is its first tick after now.
func (i *Inspector) ResumeSchedule(ctx context.Context, name string) error {
	return scheduleErr(i.schedules().SetPaused(ctx, name, false, i.cfg.Now()), name)
}

// periodicScheduler is the config's periodic scheduler (internal/periodic) over rdb: it stores
// the worker's own schedules at start and enqueues every stored schedule's ticks. A nil rdb
// builds it only to check the config.
func (c WorkerConfig) periodicScheduler(rdb redis.UniversalClient) (*periodic.Scheduler, error) {
	defs := make([]periodic.Def, len(c.Periodic))
	for k, p := range c.Periodic {
		if err := p.validate(); err != nil {
			return nil, fmt.Errorf("periodic schedule %q: %w", p.Name, err)
		}
		defs[k] = p.def()
	}
	cfg := periodic.Config{Prefix: c.Prefix, Register: defs, Logger: c.Logger.With().Str("worker", c.Name).Logger(),
		Enqueue:  func(context.Context, periodic.Def, time.Time, string, bool) error { return nil },
		OnTick:   c.Hooks.ScheduleTick,
		OnMissed: c.Hooks.ScheduleMissed}
	if rdb == nil {
		return periodic.New(nil, cfg)
	}
	// The worker's tracer provider: each tick's publish is a trace of its own.
	cl, err := NewClient(rdb, ClientConfig{Prefix: c.Prefix, TracerProvider: c.TracerProvider, Keys: c.Keys})
	if err != nil {
		return nil, err
	}
	cfg.Enqueue = func(ctx context.Context, d periodic.Def, tick time.Time, id string, missed bool) error {
		md := periodic.Metadata(d, tick, missed)
		_, err := cl.Enqueue(ctx, d.Queue, Task{Type: d.Type, Payload: d.Payload, Metadata: md}, WithID(id))
		if errors.Is(err, ErrConflict) {
			// The tick's job exists with another type or payload: the schedule was changed
			// after that job was written. The tick has its job.
			return nil
		}
		return err
	}
	return periodic.New(rdb, cfg)
}
