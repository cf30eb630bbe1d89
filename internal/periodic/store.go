package periodic

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	// raw is Last as stored, the compare-and-set's expected value; gen the count of changes
	// of the definition and pause, which guards the due index.
	raw, gen string
}

// Schedule is a stored schedule as listed: its definition, whether it is paused, its state.
type Schedule struct {
	Def
	Paused bool
	State  State
	// gone: the name was read from an index, but no definition is stored under it (it was
	// deleted meanwhile).
	gone bool
}

// DefaultMaxSchedules is the most schedules a Store keeps by default (Store.WithMax). A Put of a
// new schedule past it fails with ErrTooMany. docs/RELIABILITY.md has what a worker costs at
// this many.
const DefaultMaxSchedules = 100_000

// ErrTooMany is the error of a Put of a new schedule when the Store's bound is reached.
var ErrTooMany = errors.New("periodic: too many schedules")

// Store reads and writes the schedules under a prefix.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	max    int
}

// NewStore returns the store of the schedules under prefix, bounded by DefaultMaxSchedules.
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, prefix: prefix, max: DefaultMaxSchedules}
}

// WithMax returns the store with its bound set to n (0: DefaultMaxSchedules). A bound below
// the schedules stored refuses new ones; those stored stay.
func (s *Store) WithMax(n int) *Store {
	c := *s
	c.max = cmp.Or(n, DefaultMaxSchedules)
	return &c
}

// ErrNotFound is the error of an operation on a schedule that is not stored.
var ErrNotFound = errors.New("periodic: no such schedule")

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// Put stores d, replacing a definition of its name, in one script. It writes the definition and
// its place in the indexes. For a schedule new to Redis, it writes its state starting at now. So
// its first tick is the first one after now, and a new schedule does not count earlier ticks as
// missed. A new schedule past the store's bound is refused with ErrTooMany.
func (s *Store) Put(ctx context.Context, d Def, now time.Time) error {
	if err := d.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	first := ""
	if spec, err := Parse(d.Spec); err == nil {
		if t := spec.Next(now); !t.IsZero() {
			first = ms(t)
		}
	}
	n, err := putScript.Run(ctx, s.rdb, []string{keys.Schedules(s.prefix), keys.ScheduleState(s.prefix, d.Name),
		keys.SchedulesPaused(s.prefix), keys.SchedulesDue(s.prefix), keys.SchedulesNames(s.prefix)},
		d.Name, b, ms(now), s.max, first).Int()
	if err != nil {
		return rediserr.Wrap("schedules put", err)
	}
	if n < 0 {
		return fmt.Errorf("%w: %d are stored, the most allowed", ErrTooMany, s.max)
	}
	return nil
}

// Delete removes schedule name: definition, state and pause. It reports ErrNotFound when
// there was no definition.
func (s *Store) Delete(ctx context.Context, name string) error {
	var del *redis.IntCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		del = p.HDel(ctx, keys.Schedules(s.prefix), name)
		p.Del(ctx, keys.ScheduleState(s.prefix, name))
		p.SRem(ctx, keys.SchedulesPaused(s.prefix), name)
		p.ZRem(ctx, keys.SchedulesDue(s.prefix), name)
		p.ZRem(ctx, keys.SchedulesNames(s.prefix), name)
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

//go:embed put.lua
var putSrc string
var putScript = redis.NewScript(putSrc)

//go:embed index.lua
var indexSrc string
var indexScript = redis.NewScript(indexSrc)

//go:embed migrate.lua
var migrateSrc string
var migrateScript = redis.NewScript(migrateSrc)

func (s *Store) setPaused(ctx context.Context, name string, pause bool, now time.Time) error {
	flag := "0"
	if pause {
		flag = "1"
	}
	n, err := pauseScript.Run(ctx, s.rdb, []string{keys.Schedules(s.prefix), keys.SchedulesPaused(s.prefix),
		keys.ScheduleState(s.prefix, name), keys.SchedulesDue(s.prefix)},
		name, flag, now.UnixMilli()).Int()
	if err != nil {
		return rediserr.Wrap("schedules pause", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return nil
}

// MaxPage is the most schedules one Page reads.
const MaxPage = 1000

// Page reads at most limit (1 to MaxPage) stored schedules by name, those after the name after
// ("" for the first). It takes two round trips. It returns the name to pass as after for the
// next page, empty when this page is the last. A schedule stored by a version without the index
// of names is listed once a scheduler has indexed it (Scheduler.Start).
func (s *Store) Page(ctx context.Context, after string, limit int) ([]Schedule, string, error) {
	if limit < 1 || limit > MaxPage {
		return nil, "", fmt.Errorf("page of %d schedules: want 1 to %d", limit, MaxPage)
	}
	from := "-"
	if after != "" {
		from = "(" + after
	}
	names, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: keys.SchedulesNames(s.prefix), Start: from, Stop: "+",
		ByLex: true, Count: int64(limit) + 1}).Result()
	if err != nil {
		return nil, "", rediserr.Wrap("schedules list", err)
	}
	next := ""
	if len(names) > limit {
		names = names[:limit]
		next = names[limit-1]
	}
	all, err := s.read(ctx, names)
	if err != nil {
		return nil, "", err
	}
	out := all[:0]
	for _, sc := range all {
		if !sc.gone {
			out = append(out, sc)
		}
	}
	return out, next, nil
}

// List reads every stored schedule, by name, a page at a time: at most the store's bound.
func (s *Store) List(ctx context.Context) ([]Schedule, error) {
	var out []Schedule
	after := ""
	for {
		page, next, err := s.Page(ctx, after, MaxPage)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next == "" {
			return out, nil
		}
		after = next
	}
}

// Get reads schedule name, or reports ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (Schedule, error) {
	got, err := s.read(ctx, []string{name})
	if err != nil {
		return Schedule{}, err
	}
	if got[0].gone {
		return Schedule{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return got[0], nil
}

// read reads the named schedules in one pipelined round trip, in order; a name with no
// definition comes back gone.
func (s *Store) read(ctx context.Context, names []string) ([]Schedule, error) {
	if len(names) == 0 {
		return nil, nil
	}
	defs := make([]*redis.StringCmd, len(names))
	paused := make([]*redis.BoolCmd, len(names))
	states := make([]*redis.MapStringStringCmd, len(names))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, name := range names {
			defs[k] = p.HGet(ctx, keys.Schedules(s.prefix), name)
			paused[k] = p.SIsMember(ctx, keys.SchedulesPaused(s.prefix), name)
			states[k] = p.HGetAll(ctx, keys.ScheduleState(s.prefix, name))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, rediserr.Wrap("schedules read", err)
	}
	out := make([]Schedule, len(names))
	for k, name := range names {
		v, err := defs[k].Result()
		if err != nil {
			out[k] = Schedule{Def: Def{Name: name}, gone: true}
			continue
		}
		var d Def
		if err := json.Unmarshal([]byte(v), &d); err != nil || d.Name != name {
			// A definition this version cannot read is listed by name, so it can be deleted.
			d = Def{Name: name}
		}
		out[k] = Schedule{Def: d, Paused: paused[k].Val(), State: parseState(states[k].Val())}
	}
	return out, nil
}

// dueEntry is a schedule's place in the due index.
type dueEntry struct {
	name string
	at   time.Time
}

// first is the earliest entry of the due index; ok is false when the index is empty. It is
// the whole cost of an idle pass.
func (s *Store) first(ctx context.Context) (dueEntry, bool, error) {
	zs, err := s.rdb.ZRangeWithScores(ctx, keys.SchedulesDue(s.prefix), 0, 0).Result()
	if err != nil {
		return dueEntry{}, false, rediserr.Wrap("schedules due", err)
	}
	if len(zs) == 0 {
		return dueEntry{}, false, nil
	}
	return entryOf(zs[0]), true, nil
}

func entryOf(z redis.Z) dueEntry {
	name, _ := z.Member.(string)
	return dueEntry{name: name, at: time.UnixMilli(int64(z.Score)).UTC()}
}

// due reads the index's entries due by cutoff, at most n, earliest first. It also reads the
// first entry after cutoff (ok false when there is none). It takes one round trip.
func (s *Store) due(ctx context.Context, cutoff time.Time, n int) (due []dueEntry, after dueEntry, ok bool, err error) {
	var in, out *redis.ZSliceCmd
	c := strconv.FormatInt(cutoff.UnixMilli(), 10)
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		in = p.ZRangeByScoreWithScores(ctx, keys.SchedulesDue(s.prefix), &redis.ZRangeBy{Min: "-inf", Max: c, Count: int64(n)})
		out = p.ZRangeByScoreWithScores(ctx, keys.SchedulesDue(s.prefix), &redis.ZRangeBy{Min: "(" + c, Max: "+inf", Count: 1})
		return nil
	})
	if err != nil {
		return nil, dueEntry{}, false, rediserr.Wrap("schedules due", err)
	}
	for _, z := range in.Val() {
		due = append(due, entryOf(z))
	}
	if zs := out.Val(); len(zs) > 0 {
		after, ok = entryOf(zs[0]), true
	}
	return due, after, ok, nil
}

// index scores sc in the due index at at, unless it changed since it was read. The zero time
// takes it out. A schedule deleted or paused leaves the index.
func (s *Store) index(ctx context.Context, sc Schedule, at time.Time) error {
	score := ""
	if !at.IsZero() {
		score = ms(at)
	}
	err := indexScript.Run(ctx, s.rdb, []string{keys.Schedules(s.prefix), keys.SchedulesPaused(s.prefix),
		keys.ScheduleState(s.prefix, sc.Name), keys.SchedulesDue(s.prefix)}, sc.Name, sc.State.gen, sc.State.raw, score).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return rediserr.Wrap("schedules index", err)
	}
	return nil
}

// migrateChunk is how many names one call of migrate.lua looks at.
const migrateChunk = 500

// migrate indexes the schedules that are not indexed: stored before the indexes were, or by a
// version without them. It drops the names of deleted ones. It does so when the counts say the
// indexes are incomplete. Four counts are the whole cost when nothing is to do. Idempotent.
func (s *Store) migrate(ctx context.Context) (int, error) {
	var defs, names, due, paused *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		defs = p.HLen(ctx, keys.Schedules(s.prefix))
		names = p.ZCard(ctx, keys.SchedulesNames(s.prefix))
		due = p.ZCard(ctx, keys.SchedulesDue(s.prefix))
		paused = p.SCard(ctx, keys.SchedulesPaused(s.prefix))
		return nil
	})
	if err != nil {
		return 0, rediserr.Wrap("schedules index", err)
	}
	if defs.Val() == names.Val() && due.Val()+paused.Val() >= defs.Val() {
		return 0, nil
	}
	all, err := s.rdb.HKeys(ctx, keys.Schedules(s.prefix)).Result()
	if err != nil {
		return 0, rediserr.Wrap("schedules index", err)
	}
	if names.Val() > defs.Val() {
		indexed, err := s.rdb.ZRange(ctx, keys.SchedulesNames(s.prefix), 0, -1).Result()
		if err != nil {
			return 0, rediserr.Wrap("schedules index", err)
		}
		all = append(all, indexed...)
	}
	ks := []string{keys.Schedules(s.prefix), keys.SchedulesPaused(s.prefix), keys.SchedulesDue(s.prefix), keys.SchedulesNames(s.prefix)}
	changed := 0
	for chunk := range slices.Chunk(all, migrateChunk) {
		args := make([]any, len(chunk))
		for k, n := range chunk {
			args[k] = n
		}
		n, err := migrateScript.Run(ctx, s.rdb, ks, args...).Int()
		if err != nil {
			return changed, rediserr.Wrap("schedules index", err)
		}
		changed += n
	}
	return changed, nil
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
		LastRunAt: at(keys.ScheduleFieldAt), raw: h[keys.ScheduleFieldLast], gen: h[keys.ScheduleFieldGen]}
}

// advance moves sc's Last from what was read to last (compare and set). When job is not empty,
// it records job, its tick and when it was enqueued. It scores sc in the due index at next,
// unless its definition or pause changed since the read. The zero time takes it out. It reports
// false when another scheduler moved Last first: the caller reads the state again.
func (s *Store) advance(ctx context.Context, sc Schedule, st State, last time.Time, job string, tick, at, next time.Time) (bool, error) {
	score := ""
	if !next.IsZero() {
		score = ms(next)
	}
	n, err := advanceScript.Run(ctx, s.rdb, []string{keys.ScheduleState(s.prefix, sc.Name), keys.SchedulesDue(s.prefix)},
		st.raw, ms(last), job, ms(tick), ms(at), sc.Name, sc.State.gen, score).Int()
	if err != nil {
		return false, rediserr.Wrap("schedules advance", err)
	}
	return n == 1, nil
}
