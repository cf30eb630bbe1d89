package periodic

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// What a tick missed while no scheduler ran becomes (Def.Missed).
const (
	// MissedSkip drops missed ticks: the schedule goes on with its next tick.
	MissedSkip = "skip"
	// MissedOnce runs missed ticks as one job, with the id of the first of them.
	MissedOnce = "once"
)

// Sources of a definition (Def.Source).
const (
	SourceAPI    = "api"    // stored by an operator (CLI, HTTP API, Inspector)
	SourceWorker = "worker" // registered by a worker at start (code or --cron)
)

// Def is a schedule's definition, stored as JSON in keys.Schedules.
type Def struct {
	Name    string `json:"name"`
	Spec    string `json:"spec"`
	Queue   string `json:"queue"`
	Type    string `json:"type"`
	Payload []byte `json:"payload,omitempty"`
	Missed  string `json:"missed,omitempty"` // MissedSkip (also when empty) or MissedOnce
	Source  string `json:"source,omitempty"`
}

// Validate checks what Parse and keys can: name, spec, queue and missed policy. The job's
// type and payload are the caller's to check (pipeline's rules).
func (d Def) Validate() error {
	var errs []error
	errs = append(errs, keys.ValidateSchedule(d.Name), keys.ValidateQueue(d.Queue))
	if _, err := Parse(d.Spec); err != nil {
		errs = append(errs, err)
	}
	if d.Missed != "" && d.Missed != MissedSkip && d.Missed != MissedOnce {
		errs = append(errs, fmt.Errorf("missed policy %q: want %q or %q", d.Missed, MissedSkip, MissedOnce))
	}
	return errors.Join(errs...)
}

// State is a schedule's progress (keys.ScheduleState).
type State struct {
	// Last is the time up to which every tick was handled (enqueued, or dropped as missed).
	// The zero time: the schedule has no state (it was never stored through Put).
	Last time.Time
	// LastTick, LastJob and LastRunAt describe the last job enqueued: its tick, its id and
	// when it was enqueued. Zero when none was.
	LastTick  time.Time
	LastJob   string
	LastRunAt time.Time
	// raw is Last as stored, the compare-and-set's expected value.
	raw string
}

// Schedule is a stored schedule as listed: its definition, whether it is paused, its state.
type Schedule struct {
	Def
	Paused bool
	State  State
}

// Store reads and writes the schedules under a prefix.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewStore returns the store of the schedules under prefix.
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, prefix: prefix}
}

// ErrNotFound is the error of an operation on a schedule that is not stored.
var ErrNotFound = errors.New("periodic: no such schedule")

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// Put stores d (replacing a definition of its name) in one transaction: the definition, and,
// for a schedule new to Redis, its state starting at now, so that its first tick is the first
// one after now and a new schedule does not count the ticks before it as missed.
func (s *Store) Put(ctx context.Context, d Def, now time.Time) error {
	if err := d.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, keys.Schedules(s.prefix), d.Name, b)
		p.HSetNX(ctx, keys.ScheduleState(s.prefix, d.Name), keys.ScheduleFieldLast, ms(now))
		return nil
	})
	return rediserr.Wrap("schedules put", err)
}

// Delete removes schedule name: definition, state and pause. It reports ErrNotFound when
// there was no definition.
func (s *Store) Delete(ctx context.Context, name string) error {
	var del *redis.IntCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		del = p.HDel(ctx, keys.Schedules(s.prefix), name)
		p.Del(ctx, keys.ScheduleState(s.prefix, name))
		p.SRem(ctx, keys.SchedulesPaused(s.prefix), name)
		return nil
	})
	if err != nil {
		return rediserr.Wrap("schedules delete", err)
	}
	if del.Val() == 0 {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return nil
}

// Pause stops schedule name's ticks; Resume starts them again from now: the ticks between are
// dropped, whatever the schedule's missed policy, since a pause is asked for. Both report
// ErrNotFound for a schedule that is not stored.
func (s *Store) Pause(ctx context.Context, name string) error {
	return s.setPaused(ctx, name, true, time.Time{})
}

// Resume: see Pause.
func (s *Store) Resume(ctx context.Context, name string, now time.Time) error {
	return s.setPaused(ctx, name, false, now)
}

//go:embed advance.lua
var advanceSrc string
var advanceScript = redis.NewScript(advanceSrc)

//go:embed pause.lua
var pauseSrc string
var pauseScript = redis.NewScript(pauseSrc)

func (s *Store) setPaused(ctx context.Context, name string, pause bool, now time.Time) error {
	flag := "0"
	if pause {
		flag = "1"
	}
	n, err := pauseScript.Run(ctx, s.rdb, []string{keys.Schedules(s.prefix), keys.SchedulesPaused(s.prefix), keys.ScheduleState(s.prefix, name)},
		name, flag, now.UnixMilli()).Int()
	if err != nil {
		return rediserr.Wrap("schedules pause", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return nil
}

// List reads every stored schedule, by name, in one round trip and then one more for the
// states (pipelined).
func (s *Store) List(ctx context.Context) ([]Schedule, error) {
	var defs *redis.MapStringStringCmd
	var paused *redis.StringSliceCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		defs = p.HGetAll(ctx, keys.Schedules(s.prefix))
		paused = p.SMembers(ctx, keys.SchedulesPaused(s.prefix))
		return nil
	})
	if err != nil {
		return nil, rediserr.Wrap("schedules list", err)
	}
	isPaused := make(map[string]bool, len(paused.Val()))
	for _, n := range paused.Val() {
		isPaused[n] = true
	}
	out := make([]Schedule, 0, len(defs.Val()))
	for name, v := range defs.Val() {
		var d Def
		if err := json.Unmarshal([]byte(v), &d); err != nil || d.Name != name {
			// A definition this version cannot read is listed by name, so it can be deleted.
			d = Def{Name: name}
		}
		out = append(out, Schedule{Def: d, Paused: isPaused[name]})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	if len(out) == 0 {
		return out, nil
	}
	states := make([]*redis.MapStringStringCmd, len(out))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range out {
			states[k] = p.HGetAll(ctx, keys.ScheduleState(s.prefix, out[k].Name))
		}
		return nil
	})
	if err != nil {
		return nil, rediserr.Wrap("schedules list", err)
	}
	for k := range out {
		out[k].State = parseState(states[k].Val())
	}
	return out, nil
}

// Get reads schedule name, or reports ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (Schedule, error) {
	all, err := s.List(ctx)
	if err != nil {
		return Schedule{}, err
	}
	for _, sc := range all {
		if sc.Name == name {
			return sc, nil
		}
	}
	return Schedule{}, fmt.Errorf("%w: %q", ErrNotFound, name)
}

func parseState(h map[string]string) State {
	at := func(f string) time.Time {
		n, err := strconv.ParseInt(h[f], 10, 64)
		if err != nil {
			return time.Time{}
		}
		return time.UnixMilli(n).UTC()
	}
	return State{Last: at(keys.ScheduleFieldLast), LastTick: at(keys.ScheduleFieldTick), LastJob: h[keys.ScheduleFieldJob],
		LastRunAt: at(keys.ScheduleFieldAt), raw: h[keys.ScheduleFieldLast]}
}

// advance moves schedule name's Last from st's (compare and set) to last, recording job, its
// tick and when it was enqueued when job is not empty. It reports false when another
// scheduler moved Last first: the caller reads the state again.
func (s *Store) advance(ctx context.Context, name string, st State, last time.Time, job string, tick, at time.Time) (bool, error) {
	n, err := advanceScript.Run(ctx, s.rdb, []string{keys.ScheduleState(s.prefix, name)},
		st.raw, ms(last), job, ms(tick), ms(at)).Int()
	if err != nil {
		return false, rediserr.Wrap("schedules advance", err)
	}
	return n == 1, nil
}
