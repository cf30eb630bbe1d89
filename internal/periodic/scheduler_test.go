package periodic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/leaktest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// clock is a settable clock shared by a test's schedulers.
type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) Add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock(t time.Time) *clock    { c := &clock{}; c.Set(t); return c }
func at(sec int64) time.Time         { return time.Unix(sec, 0).UTC() }
func atMs(sec int64, ms int) time.Time {
	return time.Unix(sec, int64(ms)*int64(time.Millisecond)).UTC()
}

// jobs is an idempotent enqueue by id, as pipeline's: a SET NX per id in Redis. It counts the
// calls and the jobs made.
type jobs struct {
	rdb    redis.UniversalClient
	prefix string
	calls  atomic.Int64
	mu     sync.Mutex
	made   map[string]int // id -> jobs made (must stay 1)
	missed map[string]bool
}

func newJobs(rdb redis.UniversalClient, prefix string) *jobs {
	return &jobs{rdb: rdb, prefix: prefix, made: map[string]int{}, missed: map[string]bool{}}
}

func (j *jobs) enqueue(ctx context.Context, d Def, tick time.Time, id string, missed bool) error {
	j.calls.Add(1)
	if id != TickID(d.Name, tick) {
		panic("id is not the tick's")
	}
	ok, err := j.rdb.SetNX(ctx, j.prefix+":{"+d.Queue+"}:job:"+id, "1", 0).Result()
	if err != nil {
		return err
	}
	if ok {
		j.mu.Lock()
		j.made[id]++
		j.missed[id] = missed
		j.mu.Unlock()
	}
	return nil
}

func (j *jobs) ids() map[string]int {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make(map[string]int, len(j.made))
	for k, v := range j.made {
		out[k] = v
	}
	return out
}

type bundle struct {
	rdb    redis.UniversalClient
	prefix string
	clock  *clock
	jobs   *jobs
	store  *Store
}

func setup(t *testing.T, rdb redis.UniversalClient, start time.Time) *bundle {
	t.Helper()
	prefix := redistest.UniqueName(t)
	return &bundle{rdb: rdb, prefix: prefix, clock: newClock(start), jobs: newJobs(rdb, prefix), store: NewStore(rdb, prefix)}
}

func (b *bundle) scheduler(t *testing.T, tweak ...func(*Config)) *Scheduler {
	t.Helper()
	cfg := Config{Prefix: b.prefix, Enqueue: b.jobs.enqueue, Now: b.clock.Now}
	for _, f := range tweak {
		f(&cfg)
	}
	s, err := New(b.rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(s.release)
	s.since = fresh
	return s
}

// fresh is a Scheduler's since in tests: a read is never stale by the wall clock, which a
// loaded machine stretches past staleAfter within one pass of a few hundred ticks, leaving
// ticks to the next pass. TestSchedulerManySchedulesFewDue makes reads stale itself.
func fresh(time.Time) time.Duration { return 0 }

func TestSchedulerTicks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"Standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"Cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.rdb(t)

			t.Run("LeaderOnTimeFollowerAfterTakeover", func(t *testing.T) {
				b := setup(t, rdb, atMs(1000, 500))
				require.NoError(t, b.store.Put(ctx, Def{Name: "s", Spec: "@every 1s", Queue: "q", Type: "t"}, b.clock.Now()))
				lead, follow := b.scheduler(t), b.scheduler(t)
				next, err := lead.RunOnce(ctx) // takes the lock; nothing due before 1001
				require.NoError(t, err)
				require.Equal(t, at(1001), next)
				b.clock.Set(at(1001))
				next, err = follow.RunOnce(ctx)
				require.NoError(t, err)
				require.Zero(t, b.jobs.calls.Load(), "a follower ran a tick that is not late")
				require.Equal(t, atMs(1001, 500), next, "a follower comes back at the tick plus Takeover")
				_, err = lead.RunOnce(ctx)
				require.NoError(t, err)
				require.Equal(t, map[string]int{"cron:s:1001": 1}, b.jobs.ids())

				// The leader dies holding the lock: the follower runs the next tick Takeover late.
				b.clock.Set(atMs(1002, 499))
				_, err = follow.RunOnce(ctx)
				require.NoError(t, err)
				require.Len(t, b.jobs.ids(), 1)
				b.clock.Set(atMs(1002, 500))
				_, err = follow.RunOnce(ctx)
				require.NoError(t, err)
				require.Equal(t, map[string]int{"cron:s:1001": 1, "cron:s:1002": 1}, b.jobs.ids())

				got, err := b.store.Get(ctx, "s")
				require.NoError(t, err)
				require.Equal(t, "cron:s:1002", got.State.LastJob)
				require.Equal(t, at(1002).UTC(), got.State.LastTick)
				require.Equal(t, at(1002).UTC(), got.State.Last)
			})

			t.Run("ManySchedulersOneJobPerTick", func(t *testing.T) {
				b := setup(t, rdb, at(2000))
				require.NoError(t, b.store.Put(ctx, Def{Name: "a", Spec: "@every 1s", Queue: "q", Type: "t"}, b.clock.Now()))
				require.NoError(t, b.store.Put(ctx, Def{Name: "b", Spec: "*/2 * * * * *", Queue: "q2", Type: "t"}, b.clock.Now()))
				ss := make([]*Scheduler, 5)
				for k := range ss {
					ss[k] = b.scheduler(t)
				}
				for range 20 {
					b.clock.Add(time.Second) // every scheduler is past Takeover: all of them may run each tick
					var wg sync.WaitGroup
					for _, s := range ss {
						wg.Go(func() {
							_, err := s.RunOnce(ctx)
							require.NoError(t, err)
						})
					}
					wg.Wait()
				}
				// Pass k's schedulers run the ticks up to 2000+k+1... the last second's tick is
				// due exactly at the clock, so all of 2001..2020 ran, and b's even seconds.
				ids := b.jobs.ids()
				require.Len(t, ids, 20+10)
				for id, n := range ids {
					require.Equal(t, 1, n, id)
				}
			})

			t.Run("Missed", func(t *testing.T) {
				for _, policy := range []string{MissedSkip, MissedOnce} {
					b := setup(t, rdb, at(3000))
					require.NoError(t, b.store.Put(ctx, Def{Name: "m", Spec: "@every 10s", Queue: "q", Type: "t", Missed: policy}, b.clock.Now()))
					s := b.scheduler(t)
					// Down for ten minutes: ticks 3010..3540 are older than Grace (1m), 3550..3600 are not.
					b.clock.Set(at(3600))
					_, err := s.RunOnce(ctx)
					require.NoError(t, err)
					ids := b.jobs.ids()
					late := []string{"cron:m:3550", "cron:m:3560", "cron:m:3570", "cron:m:3580", "cron:m:3590", "cron:m:3600"}
					for _, id := range late {
						require.Equal(t, 1, ids[id], policy+" "+id)
					}
					if policy == MissedOnce {
						require.Len(t, ids, len(late)+1, policy)
						require.Equal(t, 1, ids["cron:m:3010"], "the missed ticks' one job has the first one's id")
						require.True(t, b.jobs.missed["cron:m:3010"])
					} else {
						require.Len(t, ids, len(late), policy)
					}
				}
			})

			t.Run("PauseDropsItsTicks", func(t *testing.T) {
				b := setup(t, rdb, at(4000))
				require.NoError(t, b.store.Put(ctx, Def{Name: "p", Spec: "@every 1s", Queue: "q", Type: "t", Missed: MissedOnce}, b.clock.Now()))
				s := b.scheduler(t)
				require.NoError(t, b.store.Pause(ctx, "p"))
				b.clock.Set(at(4005))
				_, err := s.RunOnce(ctx)
				require.NoError(t, err)
				require.Empty(t, b.jobs.ids())
				require.NoError(t, b.store.Resume(ctx, "p", b.clock.Now()))
				b.clock.Set(at(4006))
				_, err = s.RunOnce(ctx)
				require.NoError(t, err)
				require.Equal(t, map[string]int{"cron:p:4006": 1}, b.jobs.ids())
				require.ErrorIs(t, b.store.Pause(ctx, "nope"), ErrNotFound)
				require.ErrorIs(t, b.store.Resume(ctx, "nope", b.clock.Now()), ErrNotFound)
			})

			t.Run("DeleteRemovesEverything", func(t *testing.T) {
				b := setup(t, rdb, at(5000))
				require.NoError(t, b.store.Put(ctx, Def{Name: "d", Spec: "@every 1s", Queue: "q", Type: "t"}, b.clock.Now()))
				require.NoError(t, b.store.Pause(ctx, "d"))
				require.NoError(t, b.store.Delete(ctx, "d"))
				require.ErrorIs(t, b.store.Delete(ctx, "d"), ErrNotFound)
				for _, k := range []string{keys.Schedules(b.prefix), keys.SchedulesPaused(b.prefix), keys.ScheduleState(b.prefix, "d")} {
					n, err := rdb.Exists(ctx, k).Result()
					require.NoError(t, err)
					require.Zero(t, n, k)
				}
				all, err := b.store.List(ctx)
				require.NoError(t, err)
				require.Empty(t, all)
			})

			t.Run("OneFailingScheduleDoesNotStopTheOthers", func(t *testing.T) {
				b := setup(t, rdb, at(7000))
				for _, n := range []string{"bad", "good"} {
					require.NoError(t, b.store.Put(ctx, Def{Name: n, Spec: "@every 1s", Queue: "q", Type: "t"}, b.clock.Now()))
				}
				fail := func(ctx context.Context, d Def, tick time.Time, id string, missed bool) error {
					if d.Name == "bad" {
						return errors.New("refused")
					}
					return b.jobs.enqueue(ctx, d, tick, id, missed)
				}
				s, err := New(rdb, Config{Prefix: b.prefix, Enqueue: fail, Now: b.clock.Now})
				require.NoError(t, err)
				t.Cleanup(s.release)
				b.clock.Set(at(7002))
				_, err = s.RunOnce(ctx)
				require.NoError(t, err, "a schedule's failure is not the pass's")
				require.Equal(t, map[string]int{"cron:good:7001": 1, "cron:good:7002": 1}, b.jobs.ids())
				require.Contains(t, s.failing, "bad")
				got, err := b.store.Get(ctx, "bad")
				require.NoError(t, err)
				require.Equal(t, at(7000), got.State.Last, "a failed tick is tried again")
			})

			t.Run("RegisterKeepsStateAndPause", func(t *testing.T) {
				b := setup(t, rdb, at(6000))
				d := Def{Name: "r", Spec: "@every 1s", Queue: "q", Type: "t"}
				s, err := New(rdb, Config{Prefix: b.prefix, Enqueue: b.jobs.enqueue, Now: b.clock.Now, Register: []Def{d}})
				require.NoError(t, err)
				require.NoError(t, s.Start(ctx))
				s.Stop()
				require.NoError(t, b.store.Pause(ctx, "r"))
				b.clock.Set(at(6100))
				require.NoError(t, s.Start(ctx)) // a restart registers again
				s.Stop()
				got, err := b.store.Get(ctx, "r")
				require.NoError(t, err)
				require.True(t, got.Paused, "registering again resumed a paused schedule")
				require.Equal(t, at(6000).UTC(), got.State.Last, "registering again moved the state")
				require.Equal(t, SourceWorker, got.Source)
			})
		})
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, Def, time.Time, string, bool) error { return nil }
	good := Def{Name: "a", Spec: "@every 1s", Queue: "q", Type: "t"}
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"Defaults", Config{Enqueue: noop}, true},
		{"NoEnqueue", Config{}, false},
		{"NegativeTakeover", Config{Enqueue: noop, Takeover: -1}, false},
		{"GraceUnderTakeover", Config{Enqueue: noop, Takeover: time.Second, Grace: time.Millisecond}, false},
		{"Register", Config{Enqueue: noop, Register: []Def{good}}, true},
		{"RegisterTwice", Config{Enqueue: noop, Register: []Def{good, good}}, false},
		{"BadSpec", Config{Enqueue: noop, Register: []Def{{Name: "a", Spec: "@every 1ms", Queue: "q", Type: "t"}}}, false},
		{"BadPolicy", Config{Enqueue: noop, Register: []Def{{Name: "a", Spec: "@daily", Queue: "q", Type: "t", Missed: "twice"}}}, false},
		{"BadName", Config{Enqueue: noop, Register: []Def{{Name: "a:b", Spec: "@daily", Queue: "q", Type: "t"}}}, false},
	} {
		_, err := New(nil, tc.cfg)
		require.Equal(t, tc.ok, err == nil, "%s: %v", tc.name, err)
	}
}

// Stop ends the loop, and gives the lock back: the next scheduler leads at once.
// Not parallel: leaktest would see the goroutines of tests running beside it.
func TestSchedulerStopLeaksNothing(t *testing.T) {
	rdb := redistest.Client(t)
	b := setup(t, rdb, time.Now())
	// A scheduler takes the lock while there are schedules.
	require.NoError(t, b.store.Put(t.Context(), Def{Name: "s", Spec: "@every 1s", Queue: "q", Type: "t"}, b.clock.Now()))
	before := leaktest.IgnoreCurrent()
	s := b.scheduler(t)
	require.NoError(t, s.Start(t.Context()))
	require.Eventually(t, func() bool {
		n, err := rdb.Exists(t.Context(), keys.SchedulesLock(b.prefix)).Result()
		return err == nil && n == 1
	}, 10*time.Second, 5*time.Millisecond, "the lock is taken")
	s.Stop()
	s.Stop() // idempotent
	n, err := rdb.Exists(t.Context(), keys.SchedulesLock(b.prefix)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "Stop gives the lock back")
	leaktest.Verify(t, before)
}

// Stop cancels the loop's context, and a refresh of the lock may be in flight then. The
// refresh must not forget the lock, so that Stop gives it back. Found under load in CI, where
// TestSchedulerStopLeaksNothing saw the lock left for its TTL.
func TestSchedulerLockRefreshCanceledByStop(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	b := setup(t, rdb, time.Now())
	s := b.scheduler(t)
	require.True(t, s.leader(t.Context()))
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	s.leader(canceled) // the refresh a Stop cancels
	s.release()
	n, err := rdb.Exists(t.Context(), keys.SchedulesLock(b.prefix)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the lock is given back")
}

// Two schedulers race on a schedule: A reads its state and stalls in its enqueue while B
// enqueues the same ticks and moves Last further. When A goes on, its move of Last must fail
// (advance.lua's compare-and-set): Last never moves backwards. The enqueue of the tests is
// idempotent, so the jobs alone cannot show it; Last is read while A is held again.
func TestSchedulerLastNeverMovesBackwards(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, redistest.Client(t), at(8000))
	require.NoError(t, b.store.Put(ctx, Def{Name: "r", Spec: "@every 1s", Queue: "q", Type: "t"}, b.clock.Now()))
	entered, release := make(chan time.Time), make(chan struct{})
	var free atomic.Bool // once set, A's enqueue holds nothing
	held := func(ctx context.Context, d Def, tick time.Time, id string, missed bool) error {
		if !free.Load() {
			entered <- tick
			<-release
		}
		return b.jobs.enqueue(ctx, d, tick, id, missed)
	}
	a, err := New(b.rdb, Config{Prefix: b.prefix, Enqueue: held, Now: b.clock.Now})
	require.NoError(t, err)
	t.Cleanup(a.release)
	b.clock.Set(at(8003))
	done := make(chan error, 1)
	go func() {
		_, err := a.RunOnce(ctx)
		done <- err
	}()
	require.Equal(t, at(8001), <-entered, "A holds tick 8001, having read Last 8000")

	_, err = b.scheduler(t).RunOnce(ctx) // 8001 is past Takeover: B runs 8001 to 8003 without the lock
	require.NoError(t, err)
	got, err := b.store.Get(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, at(8003), got.State.Last)

	release <- struct{}{}
	select {
	case err := <-done: // A saw Last moved and gave up
		require.NoError(t, err)
	case tick := <-entered: // A went on: read what its move did before letting it go
		got, err := b.store.Get(ctx, "r")
		require.NoError(t, err)
		free.Store(true)
		close(release)
		require.NoError(t, <-done)
		require.False(t, got.State.Last.Before(at(8003)), "A moved Last back to %s (holding %s next)", got.State.Last, tick)
	}
	got, err = b.store.Get(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, at(8003), got.State.Last)
}

// seed stores n schedules named prefix0..prefix(n-1) that are not due for a day.
func (b *bundle) seed(t *testing.T, prefix string, n int) {
	t.Helper()
	for k := range n {
		require.NoError(t, b.store.Put(t.Context(), Def{Name: fmt.Sprintf("%s%d", prefix, k), Spec: "@every 24h", Queue: "q", Type: "t"}, b.clock.Now()))
	}
}

// An idle pass (nothing due) costs Redis the same however many schedules are stored: the
// scheduler reads the due ones, not all of them.
func TestSchedulerIdleCostIndependentOfCount(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cost := func(n int) int64 {
		rdb := redistest.Client(t)
		b := setup(t, rdb, at(9000))
		b.seed(t, "s", n)
		// 10x: the lock outlives a stall of minutes between passes. By the default 3 s TTL, a
		// loaded machine's pause let it expire, and taking it again cost a command more.
		s := b.scheduler(t, func(c *Config) { c.LockTTL = 10 * time.Minute })
		// The first pass may fix the index of what Put stored and takes the lock; the second
		// extends it, which loads the lock's script into the shared server's cache if no test
		// did before: an EVALSHA refused and an EVAL, a command more than a pass costs.
		for _, sec := range []int64{9001, 9002} {
			b.clock.Set(at(sec))
			_, err := s.RunOnce(ctx)
			require.NoError(t, err)
		}
		cmds := redistest.CountCommands(rdb)
		for range 5 {
			b.clock.Add(time.Second)
			_, err := s.RunOnce(ctx)
			require.NoError(t, err)
		}
		return cmds.All()
	}
	few, many := cost(3), cost(2000)
	require.Equal(t, few, many, "5 idle passes cost %d commands with 3 schedules, %d with 2,000", few, many)
	require.LessOrEqual(t, few, int64(5*3), "an idle pass costs at most 3 commands")
}

// Among many stored schedules, the due ones get their ticks: a pass reads the due index, and a
// read that went stale before its tick (staleAfter, counted from that schedule's read, never
// from a read of all) leaves its schedule due for the next pass, which follows at once.
func TestSchedulerManySchedulesFewDue(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, redistest.Client(t), at(10000))
	b.seed(t, "idle", 2000)
	for _, n := range []string{"a", "b", "c"} {
		require.NoError(t, b.store.Put(ctx, Def{Name: n, Spec: "@every 1s", Queue: "q", Type: "t"}, b.clock.Now()))
	}
	s := b.scheduler(t)
	var asked int // the first pass's reads are stale before each of its three ticks
	s.since = func(time.Time) time.Duration {
		if asked++; asked <= 3 {
			return staleAfter + time.Nanosecond
		}
		return 0
	}
	b.clock.Set(at(10001))
	next, err := s.RunOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, b.jobs.ids(), "a stale read enqueues nothing")
	require.Equal(t, at(10001), next, "schedules left due: the next pass is now")
	next, err = s.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"cron:a:10001": 1, "cron:b:10001": 1, "cron:c:10001": 1}, b.jobs.ids())
	require.Equal(t, at(10002), next)
}

// More schedules due at once than a pass takes (dueBatch): the pass after follows at once and
// takes the rest.
func TestSchedulerMoreDueThanABatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, redistest.Client(t), at(11000))
	for k := range dueBatch + 10 {
		require.NoError(t, b.store.Put(ctx, Def{Name: fmt.Sprintf("s%d", k), Spec: "@every 1s", Queue: "q", Type: "t"}, b.clock.Now()))
	}
	s := b.scheduler(t)
	b.clock.Set(at(11001))
	next, err := s.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, at(11001), next)
	require.Len(t, b.jobs.ids(), dueBatch)
	next, err = s.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, at(11002), next)
	require.Len(t, b.jobs.ids(), dueBatch+10)
}

// A schedule stored again with another spec keeps its Last and is due by its new spec at the
// next pass: its place in the index was by the old one.
func TestSchedulerSpecChangeIsIndexed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, redistest.Client(t), at(12000))
	require.NoError(t, b.store.Put(ctx, Def{Name: "c", Spec: "@every 24h", Queue: "q", Type: "t"}, b.clock.Now()))
	s := b.scheduler(t)
	b.clock.Set(at(12001))
	_, err := s.RunOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, b.jobs.ids())
	require.NoError(t, b.store.Put(ctx, Def{Name: "c", Spec: "@every 1s", Queue: "q", Type: "t"}, b.clock.Now()))
	b.clock.Set(at(12002))
	next, err := s.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"cron:c:12001": 1, "cron:c:12002": 1}, b.jobs.ids())
	require.Equal(t, at(12003), next)
}

// The store refuses a new schedule past its bound, with ErrTooMany; a schedule stored again
// under its name is no new one, and a delete makes room.
func TestStoreBound(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, redistest.Client(t), at(13000))
	st := b.store.WithMax(3)
	for _, n := range []string{"a", "b", "c"} {
		require.NoError(t, st.Put(ctx, Def{Name: n, Spec: "@daily", Queue: "q", Type: "t"}, b.clock.Now()))
	}
	err := st.Put(ctx, Def{Name: "d", Spec: "@daily", Queue: "q", Type: "t"}, b.clock.Now())
	require.ErrorIs(t, err, ErrTooMany)
	require.ErrorContains(t, err, "3 are stored")
	_, err = st.Get(ctx, "d")
	require.ErrorIs(t, err, ErrNotFound, "nothing of the refused schedule is stored")
	n, err := b.rdb.ZScore(ctx, keys.SchedulesDue(b.prefix), "d").Result()
	require.ErrorIs(t, err, redis.Nil, "score %v", n)
	require.NoError(t, st.Put(ctx, Def{Name: "a", Spec: "@hourly", Queue: "q", Type: "t"}, b.clock.Now()), "a replacement")
	require.NoError(t, st.Delete(ctx, "b"))
	require.NoError(t, st.Put(ctx, Def{Name: "d", Spec: "@daily", Queue: "q", Type: "t"}, b.clock.Now()))
	require.Equal(t, DefaultMaxSchedules, b.store.max)
}

// Page lists the schedules by name a page at a time; the last page's next is empty.
func TestStorePage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, redistest.Client(t), at(14000))
	for _, n := range []string{"e", "c", "a", "d", "b"} {
		require.NoError(t, b.store.Put(ctx, Def{Name: n, Spec: "@daily", Queue: "q", Type: "t"}, b.clock.Now()))
	}
	require.NoError(t, b.store.Pause(ctx, "c"))
	var names []string
	var pages int
	for after := ""; ; pages++ {
		page, next, err := b.store.Page(ctx, after, 2)
		require.NoError(t, err)
		for _, sc := range page {
			names = append(names, sc.Name)
			require.Equal(t, sc.Name == "c", sc.Paused, sc.Name)
			require.Equal(t, at(14000), sc.State.Last)
		}
		if next == "" {
			break
		}
		after = next
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, names)
	require.Equal(t, 2, pages)
	for _, bad := range []int{0, MaxPage + 1} {
		_, _, err := b.store.Page(ctx, "", bad)
		require.Error(t, err)
	}
}

// Schedules stored without the indexes (by a version before them) are indexed when a scheduler
// starts, once, and run; so are those stored meanwhile, at the next check.
func TestSchedulerMigratesUnindexedSchedules(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, redistest.Client(t), at(15000))
	old := func(name string) {
		// What Put wrote before the indexes.
		def, err := json.Marshal(Def{Name: name, Spec: "@every 1s", Queue: "q", Type: "t", Source: SourceAPI})
		require.NoError(t, err)
		require.NoError(t, b.rdb.HSet(ctx, keys.Schedules(b.prefix), name, def).Err())
		require.NoError(t, b.rdb.HSet(ctx, keys.ScheduleState(b.prefix, name), keys.ScheduleFieldLast, ms(b.clock.Now())).Err())
	}
	old("x")
	old("paused")
	require.NoError(t, b.rdb.SAdd(ctx, keys.SchedulesPaused(b.prefix), "paused").Err())
	s, err := New(b.rdb, Config{Prefix: b.prefix, Enqueue: b.jobs.enqueue, Now: b.clock.Now})
	require.NoError(t, err)
	s.since = fresh
	require.NoError(t, s.Start(ctx))
	s.Stop()
	all, err := b.store.List(ctx)
	require.NoError(t, err)
	require.Len(t, all, 2)
	n, err := b.store.migrate(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "indexed once")

	b.clock.Set(at(15001))
	_, err = s.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"cron:x:15001": 1}, b.jobs.ids())

	old("y") // stored by an old version while this one runs
	b.clock.Set(at(15001).Add(migrateEvery))
	_, err = s.RunOnce(ctx)
	require.NoError(t, err)
	require.Contains(t, b.jobs.ids(), fmt.Sprintf("cron:y:%d", at(15001).Add(migrateEvery).Unix()))
}

// With no schedule stored, a pass is one read of the due index and takes no lock.
func TestSchedulerIdleWithoutSchedules(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	b := setup(t, rdb, at(16000))
	s := b.scheduler(t)
	_, err := s.RunOnce(ctx) // the first pass checks the indexes too
	require.NoError(t, err)
	cmds := redistest.CountCommands(rdb)
	for range 5 {
		b.clock.Add(time.Second)
		next, err := s.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, b.clock.Now().Add(DefaultRefresh), next)
	}
	require.Equal(t, int64(5), cmds.All(), "one command a pass")
	n, err := rdb.Exists(ctx, keys.SchedulesLock(b.prefix)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no lock taken")
}

// Schedules whose ticks fail (their queue refuses the job, say) are tried again a Refresh
// later, not at the head of every pass: more of them than a pass takes do not starve the
// others.
func TestSchedulerFailingSchedulesDoNotStarveOthers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, redistest.Client(t), at(17000))
	for k := range dueBatch + 10 {
		require.NoError(t, b.store.Put(ctx, Def{Name: fmt.Sprintf("bad%03d", k), Spec: "@every 1s", Queue: "q", Type: "t"}, b.clock.Now()))
	}
	require.NoError(t, b.store.Put(ctx, Def{Name: "good", Spec: "@every 1s", Queue: "q", Type: "t"}, b.clock.Now()))
	fail := func(ctx context.Context, d Def, tick time.Time, id string, missed bool) error {
		if d.Name != "good" {
			return errors.New("refused")
		}
		return b.jobs.enqueue(ctx, d, tick, id, missed)
	}
	s, err := New(b.rdb, Config{Prefix: b.prefix, Enqueue: fail, Now: b.clock.Now})
	require.NoError(t, err)
	t.Cleanup(s.release)
	b.clock.Set(at(17001))
	for range 3 {
		_, err = s.RunOnce(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, map[string]int{"cron:good:17001": 1}, b.jobs.ids())
	got, err := b.store.Get(ctx, "bad000")
	require.NoError(t, err)
	require.Equal(t, at(17000), got.State.Last, "a failed tick is tried again")
	b.clock.Set(at(17002)) // a Refresh later the failing ones are due again
	_, err = s.RunOnce(ctx)
	require.NoError(t, err)
	require.Contains(t, s.failing, "bad000")
}

// Ticks found older than the grace by a scheduler that ran within it were not missed "while no
// scheduler ran": the warning says the schedulers fell behind. A scheduler's first pass cannot
// tell, and says what it says of a downtime.
func TestSchedulerMissedWarningTellsWhetherASchedulerRan(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, redistest.Client(t), at(18000))
	var buf bytes.Buffer
	var mu sync.Mutex
	s, err := New(b.rdb, Config{Prefix: b.prefix, Enqueue: b.jobs.enqueue, Now: b.clock.Now,
		Logger: zerolog.New(zerolog.SyncWriter(&lockedWriter{&mu, &buf}))})
	require.NoError(t, err)
	t.Cleanup(s.release)
	require.NoError(t, b.store.Put(ctx, Def{Name: "down", Spec: "@every 10s", Queue: "q", Type: "t"}, b.clock.Now()))
	b.clock.Set(at(18600))
	_, err = s.RunOnce(ctx)
	require.NoError(t, err)
	mu.Lock()
	require.Contains(t, buf.String(), "ticks missed while no scheduler ran")
	buf.Reset()
	mu.Unlock()

	// Stored ten minutes back by a clock behind, while this scheduler runs: it fell behind.
	require.NoError(t, b.store.Put(ctx, Def{Name: "behind", Spec: "@every 10s", Queue: "q", Type: "t"}, at(18000)))
	b.clock.Set(at(18601))
	_, err = s.RunOnce(ctx)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, buf.String(), "enqueued later than the grace while schedulers ran")
	require.NotContains(t, buf.String(), "while no scheduler ran")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
