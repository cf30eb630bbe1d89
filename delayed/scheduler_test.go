package delayed_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/delayed"
	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// testBundle is what a test of the Scheduler needs around it (the package's one test bundle,
// after river's maintenance tests): the Redis client, a Client that publishes to the test's
// queue, the queue and its keys.
type testBundle struct {
	rdb    *redis.Client
	client *pipeline.Client
	queue  string
	q      keys.Queue
}

// setupOpts changes what setup makes; the zero value is the usual test.
type setupOpts struct {
	rdb    *redis.Client         // default: a client of the package's shared server
	client pipeline.ClientConfig // the bundle's Client's (its Now, for a producer's clock)
	cfg    delayed.Config        // the Scheduler's; its Queues is the bundle's queue
}

// setup returns a Scheduler of a queue of the test's own (made, not started) and the bundle
// around it.
func setup(tb testing.TB, opts ...setupOpts) (*delayed.Scheduler, *testBundle) {
	tb.Helper()
	var o setupOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.rdb == nil {
		o.rdb = redistest.Client(tb)
	}
	queue := redistest.UniqueName(tb)
	client, err := pipeline.NewClient(o.rdb, o.client)
	require.NoError(tb, err)
	b := &testBundle{rdb: o.rdb, client: client, queue: queue, q: keys.New(keys.DefaultPrefix, queue)}
	return b.scheduler(tb, o.cfg), b
}

// fixedClock returns a Now that always answers t.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func (b *testBundle) scheduler(tb testing.TB, cfg delayed.Config) *delayed.Scheduler {
	tb.Helper()
	cfg.Queues = []string{b.queue}
	s, err := delayed.New(b.rdb, cfg)
	require.NoError(tb, err)
	return s
}

func (b *testBundle) schedule(tb testing.TB, n int, opts ...pipeline.Option) []*pipeline.Job {
	tb.Helper()
	tasks := make([]pipeline.Task, n)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "test", Payload: fmt.Appendf(nil, "payload %d", i),
			Metadata: map[string]string{"n": strconv.Itoa(i)}}
	}
	jobs, err := b.client.EnqueueBatch(context.Background(), b.queue, tasks, opts...)
	require.NoError(tb, err)
	for _, j := range jobs {
		require.Equal(tb, status.Scheduled, j.Status)
	}
	return jobs
}

func (b *testBundle) hash(t *testing.T, id string) map[string]string {
	t.Helper()
	h, err := b.rdb.HGetAll(t.Context(), b.q.Job(id)).Result()
	require.NoError(t, err)
	return h
}

func (b *testBundle) get(t *testing.T, id string) *pipeline.Job {
	t.Helper()
	j, err := b.client.Get(t.Context(), b.queue, id)
	require.NoError(t, err)
	return j
}

func (b *testBundle) xlen(tb testing.TB) int64 {
	tb.Helper()
	n, err := b.rdb.XLen(context.Background(), b.q.Stream()).Result()
	require.NoError(tb, err)
	return n
}

func (b *testBundle) zcard(tb testing.TB) int64 {
	tb.Helper()
	n, err := b.rdb.ZCard(context.Background(), b.q.Scheduled()).Result()
	require.NoError(tb, err)
	return n
}

func (b *testBundle) status(t *testing.T, id string) status.Status {
	t.Helper()
	return status.Status(b.rdb.HGet(t.Context(), b.q.Job(id), keys.FieldStatus).Val())
}

// requirePromoted checks that j left the set for the stream, carrying its payload with it.
func requirePromoted(t *testing.T, b *testBundle, j *pipeline.Job, attempt int) {
	t.Helper()
	h := b.hash(t, j.ID)
	require.Equal(t, string(status.Queued), h[keys.FieldStatus])
	require.NotEmpty(t, h[keys.FieldEntry])
	require.NotContains(t, h, keys.FieldPayload, "the payload is still in the hash")
	require.NotContains(t, h, keys.FieldMetadata, "the metadata is still in the hash")
	require.NotEmpty(t, h[keys.FieldEnqueuedAt])
	require.Equal(t, redis.Nil, b.rdb.ZScore(t.Context(), b.q.Scheduled(), j.ID).Err())

	msgs, err := b.rdb.XRange(t.Context(), b.q.Stream(), h[keys.FieldEntry], h[keys.FieldEntry]).Result()
	require.NoError(t, err)
	require.Len(t, msgs, 1, "the job's entry is not in the stream")
	e := msgs[0].Values
	require.Equal(t, j.ID, e[keys.EntryUUID])
	require.Equal(t, string(j.Payload), e[keys.EntryPayload])
	require.Equal(t, keys.FormatEntryJob(attempt, j.MaxRetries, j.Timeout.Milliseconds(), j.Type), e[keys.EntryJob])

	got := b.get(t, j.ID)
	require.Equal(t, status.Queued, got.Status)
	require.Equal(t, j.Payload, got.Payload, "Get lost the payload")
	require.Equal(t, j.Metadata, got.Metadata, "Get lost the metadata")
}

// requireWaiting checks that j is still scheduled, its payload in its hash.
func requireWaiting(t *testing.T, b *testBundle, j *pipeline.Job) {
	t.Helper()
	h := b.hash(t, j.ID)
	require.Equal(t, string(status.Scheduled), h[keys.FieldStatus])
	require.NotContains(t, h, keys.FieldEntry)
	require.Equal(t, string(j.Payload), h[keys.FieldPayload])
	score, err := b.rdb.ZScore(t.Context(), b.q.Scheduled(), j.ID).Result()
	require.NoError(t, err)
	require.Equal(t, float64(j.RunAt.UnixMilli()), score)
}

// behind returns a producer's clock that runs d behind (Redis's and this process's, which
// agree): the due times it makes are d earlier by Redis's clock.
func behind(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(-d) }
}

// promote runs s.Promote, checks that the Redis time it returns is Redis's clock (the same
// host's, so this process's), and returns the rest.
func promote(t *testing.T, s *delayed.Scheduler, queue string) (int, time.Time, time.Time) {
	t.Helper()
	before := time.Now()
	moved, next, redisNow, err := s.Promote(t.Context(), queue)
	after := time.Now()
	require.NoError(t, err)
	require.False(t, redisNow.Before(before.Truncate(time.Microsecond)) || redisNow.After(after),
		"Redis's time %v is not between %v and %v", redisNow, before, after)
	return moved, next, redisNow
}

func TestPromote(t *testing.T) {
	t.Parallel()
	// t0 is "now" for producers whose clock runs an hour behind Redis's: a job due at t0 plus
	// less than an hour is due by Redis's clock.
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)

	t.Run("MovesDueJobsOnly", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t, setupOpts{client: pipeline.ClientConfig{Now: fixedClock(t0)}})
		soon := b.schedule(t, 2, pipeline.WithRunAt(t0.Add(10*time.Second)))
		later := b.schedule(t, 1, pipeline.WithRunAt(t0.Add(20*time.Second)))
		far := b.schedule(t, 1, pipeline.WithRunAt(t0.Add(2*time.Hour)))

		moved, next, redisNow := promote(t, s, b.queue)
		require.Equal(t, 3, moved)
		require.True(t, next.Equal(t0.Add(2*time.Hour)), "next = %v", next)
		for _, j := range append(soon, later...) {
			requirePromoted(t, b, j, 1)
			require.Equal(t, strconv.FormatInt(redisNow.UnixMilli(), 10), b.hash(t, j.ID)[keys.FieldEnqueuedAt])
			require.Equal(t, j.Version+1, b.get(t, j.ID).Version)
		}
		requireWaiting(t, b, far[0])
		require.Equal(t, int64(3), b.xlen(t))
		require.Equal(t, int64(1), b.zcard(t))

		moved, next, _ = promote(t, s, b.queue)
		require.Zero(t, moved)
		require.True(t, next.Equal(t0.Add(2*time.Hour)))
		require.Equal(t, int64(3), b.xlen(t))
	})

	t.Run("EmptySet", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		moved, next, _ := promote(t, s, b.queue)
		require.Zero(t, moved)
		require.True(t, next.IsZero(), "next = %v", next)
		require.Zero(t, b.xlen(t))
	})

	// Jobs due a millisecond apart, promoted as Redis's clock passes them (at any point
	// within a millisecond): each call moves exactly the jobs due by the time it returns.
	t.Run("NeverEarly", func(t *testing.T) {
		t.Parallel()
		const n = 40
		_, b := setup(t, setupOpts{client: pipeline.ClientConfig{Now: behind(time.Minute)}}) // so that every job is scheduled, not run at once
		base := time.Now().Add(20 * time.Millisecond).Truncate(time.Millisecond)
		tasks := make([]pipeline.Task, n)
		for i := range tasks {
			tasks[i] = pipeline.Task{Type: "test", Payload: []byte("x"),
				Opts: []pipeline.Option{pipeline.WithRunAt(base.Add(time.Duration(i) * time.Millisecond))}}
		}
		jobs, err := b.client.EnqueueBatch(t.Context(), b.queue, tasks)
		require.NoError(t, err)
		s := b.scheduler(t, delayed.Config{})
		promoted := 0
		for promoted < n {
			moved, next, redisNow := promote(t, s, b.queue)
			promoted += moved
			for i, j := range jobs {
				due := j.RunAt.UnixMilli() <= redisNow.UnixMilli()
				require.Equal(t, due, i < promoted, "job %d (due %d) at Redis time %d us", i, j.RunAt.UnixMilli(), redisNow.UnixMicro())
			}
			if promoted < n {
				require.True(t, next.Equal(jobs[promoted].RunAt), "next = %v", next)
			}
		}
		for _, j := range jobs {
			requirePromoted(t, b, j, 1)
			requireNotEarly(t, b, j)
		}
	})

	t.Run("BatchSizeBoundsOneCall", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t, setupOpts{client: pipeline.ClientConfig{Now: fixedClock(t0)}, cfg: delayed.Config{BatchSize: 10}})
		jobs := b.schedule(t, 25, pipeline.WithRunAt(t0.Add(time.Second)))
		for _, want := range []int{10, 10, 5} {
			moved, next, _ := promote(t, s, b.queue)
			require.Equal(t, want, moved)
			if want == 10 {
				require.True(t, next.Equal(t0.Add(time.Second)), "next = %v: more are due", next)
			} else {
				require.True(t, next.IsZero())
			}
		}
		require.Equal(t, int64(25), b.xlen(t))
		for _, j := range jobs {
			requirePromoted(t, b, j, 1)
		}
	})

	t.Run("RetryGetsNextAttempt", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// A job due for its retry after its first attempt failed.
		j := jobtest.Seed(t, b.rdb, b.queue, jobtest.Retry, jobtest.Opts{RetryIn: -time.Second}).Job
		moved, _, _ := promote(t, s, b.queue)
		require.Equal(t, 1, moved)
		requirePromoted(t, b, j, 2)
		require.Equal(t, 1, b.get(t, j.ID).Attempt)
	})

	t.Run("CanceledOrMissingJobLeavesSet", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t, setupOpts{client: pipeline.ClientConfig{Now: fixedClock(t0)}})
		jobs := b.schedule(t, 3, pipeline.WithRunAt(t0.Add(time.Second)))
		canceled, raced, missing := jobs[0], jobs[1], jobs[2]
		ctx := t.Context()
		require.NoError(t, b.client.Cancel(ctx, b.queue, canceled.ID))
		// A cancel that left its id in the set (as one racing a promotion might), and a job
		// whose record is gone.
		require.NoError(t, b.rdb.HSet(ctx, b.q.Job(raced.ID), keys.FieldStatus, string(status.Canceled)).Err())
		require.NoError(t, b.rdb.ZAdd(ctx, b.q.Scheduled(), redis.Z{Score: float64(t0.UnixMilli()), Member: canceled.ID}).Err())
		require.NoError(t, b.rdb.Del(ctx, b.q.Job(missing.ID)).Err())
		require.Equal(t, int64(3), b.zcard(t))

		moved, next, _ := promote(t, s, b.queue)
		require.Zero(t, moved)
		require.True(t, next.IsZero())
		require.Zero(t, b.zcard(t))
		require.Zero(t, b.xlen(t))
		require.Equal(t, status.Canceled, b.get(t, canceled.ID).Status)
		require.Equal(t, status.Canceled, b.status(t, raced.ID))
		require.Zero(t, b.rdb.Exists(ctx, b.q.Job(missing.ID)).Val(), "a record was made up for a missing job")
	})
}

// Lua's unpack fails past about 8,000 values, after the script's writes were applied: a batch
// that large must still leave the set, or every call fails and the set never drains. Config
// refuses such a batch (MaxBatchSize); the script takes it all the same.
func TestPromoteLongBatch(t *testing.T) {
	t.Parallel()
	const n = 8001
	s, b := setup(t, setupOpts{client: pipeline.ClientConfig{Now: behind(2 * time.Hour)}})
	jobs := b.schedule(t, n, pipeline.WithDelay(time.Hour)) // due an hour ago
	moved, next, _, err := s.PromoteLimit(t.Context(), b.queue, 8000)
	require.NoError(t, err)
	require.Equal(t, 8000, moved)
	require.False(t, next.IsZero(), "one job is left")
	moved, next, _ = promote(t, s, b.queue)
	require.Equal(t, 1, moved)
	require.True(t, next.IsZero())
	require.Zero(t, b.zcard(t))
	require.Equal(t, int64(n), b.xlen(t))
	requirePromoted(t, b, jobs[0], 1)
	requirePromoted(t, b, jobs[n-1], 1)
}

// clockedRedis starts an in-process Redis whose clock stands still at local time + skew, the
// one thing a real server cannot be made to do. It returns the client and Redis's time.
func clockedRedis(t *testing.T, skew time.Duration) (*miniredis.Miniredis, *redis.Client, time.Time) {
	t.Helper()
	m := miniredis.RunT(t)
	now := time.Now().Add(skew).Truncate(time.Millisecond)
	m.SetTime(now)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return m, rdb, now
}

// producerAt returns a client of b's queue whose clock says t.
func producerAt(tb testing.TB, b *testBundle, t time.Time) *testBundle {
	tb.Helper()
	c := *b
	var err error
	c.client, err = pipeline.NewClient(b.rdb, pipeline.ClientConfig{Now: fixedClock(t)})
	require.NoError(tb, err)
	return &c
}

// Jobs are due by Redis's clock, the one clock every scheduler shares: a scheduler whose own
// clock runs ahead (here: Redis's runs an hour behind it) promotes nothing early.
func TestPromoteUsesRedisClock(t *testing.T) {
	t.Parallel()
	_, rdb, redisNow := clockedRedis(t, -time.Hour)
	_, b := setup(t, setupOpts{rdb: rdb, client: pipeline.ClientConfig{Now: fixedClock(redisNow)}})
	due := producerAt(t, b, redisNow.Add(-time.Minute)).schedule(t, 1, pipeline.WithDelay(30*time.Second))[0]
	// Due half an hour ago by the scheduler's clock, in half an hour by Redis's.
	notYet := b.schedule(t, 1, pipeline.WithDelay(30*time.Minute))[0]

	moved, next, gotNow, err := b.scheduler(t, delayed.Config{}).Promote(t.Context(), b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, moved, "a job was promoted before it was due by Redis's clock")
	require.True(t, gotNow.Equal(redisNow), "Redis's time %v, want %v", gotNow, redisNow)
	requirePromoted(t, b, due, 1)
	require.Equal(t, strconv.FormatInt(redisNow.UnixMilli(), 10), b.hash(t, due.ID)[keys.FieldEnqueuedAt],
		"enqueued_at is not Redis's time")
	requireWaiting(t, b, notYet)
	require.True(t, next.Equal(notYet.RunAt), "next = %v, want %v", next, notYet.RunAt)
}

func TestRunUsesRedisClock(t *testing.T) {
	t.Parallel()

	// The scheduler's clock runs an hour ahead of Redis's. It promotes nothing early, and it
	// does not spin on a job that is due by its own clock but not by Redis's.
	t.Run("LocalClockAhead", func(t *testing.T) {
		t.Parallel()
		m, rdb, redisNow := clockedRedis(t, -time.Hour)
		_, b := setup(t, setupOpts{rdb: rdb, client: pipeline.ClientConfig{Now: fixedClock(redisNow)}})
		notYet := b.schedule(t, 1, pipeline.WithDelay(30*time.Minute))[0]
		h := startedSchedulerAt(t, m.Addr(), delayed.Config{MaxSleep: time.Hour}, b)
		requireWaiting(t, b, notYet)

		// A job due by Redis's clock, announced on the wake channel, is promoted at once.
		j := producerAt(t, b, redisNow.Add(-time.Minute)).schedule(t, 1, pipeline.WithDelay(30*time.Second))[0]
		require.Eventually(t, func() bool {
			return b.status(t, j.ID) == status.Queued
		}, 5*time.Second, 5*time.Millisecond)
		requireWaiting(t, b, notYet)
		// The first pass (EVALSHA, then EVAL to load the script) and the woken one; a
		// scheduler that waited by its own clock would have called all along.
		require.LessOrEqual(t, h.Scripts(), int64(3), "the scheduler spins")
	})

	// The scheduler's clock runs an hour behind Redis's. A wake message's due time is
	// converted to its clock with the offset it measured, so a job due by Redis's clock does
	// not wait for MaxSleep.
	t.Run("LocalClockBehind", func(t *testing.T) {
		t.Parallel()
		m, rdb, redisNow := clockedRedis(t, time.Hour)
		_, b := setup(t, setupOpts{rdb: rdb, client: pipeline.ClientConfig{Now: fixedClock(redisNow)}})
		notYet := b.schedule(t, 1, pipeline.WithDelay(30*time.Minute))[0]
		startedSchedulerAt(t, m.Addr(), delayed.Config{MaxSleep: time.Hour}, b)

		j := producerAt(t, b, redisNow.Add(-time.Minute)).schedule(t, 1, pipeline.WithDelay(30*time.Second))[0]
		require.Eventually(t, func() bool {
			return b.status(t, j.ID) == status.Queued
		}, 5*time.Second, 5*time.Millisecond, "a job due by Redis's clock waited for the scheduler's")
		requireWaiting(t, b, notYet)
	})
}

// runScheduler runs s until the test ends and returns a channel that receives Run's result.
func runScheduler(t *testing.T, ctx context.Context, s *delayed.Scheduler) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not stop when its context ended")
		}
	})
	return done
}

func TestRunManySchedulers(t *testing.T) {
	t.Parallel()
	const n = 2000
	// The producer's clock runs two hours behind, so every job is due an hour ago.
	s, b := setup(t, setupOpts{client: pipeline.ClientConfig{Now: behind(2 * time.Hour)}, cfg: delayed.Config{BatchSize: 50}})
	jobs := b.schedule(t, n, pipeline.WithDelay(time.Hour))
	start := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for k := range 5 {
		s := s
		if k > 0 {
			s = b.scheduler(t, delayed.Config{BatchSize: 50}) // five schedulers, one queue
		}
		wg.Go(func() {
			<-start
			if err := s.Run(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	require.Eventually(t, func() bool { return b.zcard(t) == 0 }, 20*time.Second, 10*time.Millisecond)
	cancel()
	wg.Wait()

	require.Equal(t, int64(n), b.xlen(t))
	entries := map[string]bool{}
	cmds := make([]*redis.SliceCmd, n)
	_, err := b.rdb.Pipelined(t.Context(), func(p redis.Pipeliner) error {
		for i, j := range jobs {
			cmds[i] = p.HMGet(t.Context(), b.q.Job(j.ID), keys.FieldStatus, keys.FieldEntry, keys.FieldVersion)
		}
		return nil
	})
	require.NoError(t, err)
	for i, c := range cmds {
		v := c.Val()
		require.Equal(t, string(status.Queued), v[0], "job %s", jobs[i].ID)
		require.Equal(t, "2", v[2], "job %s changed more than once", jobs[i].ID)
		entries[v[1].(string)] = true
	}
	require.Len(t, entries, n)
	msgs, err := b.rdb.XRange(t.Context(), b.q.Stream(), "-", "+").Result()
	require.NoError(t, err)
	ids := map[any]bool{}
	for _, m := range msgs {
		require.True(t, entries[m.ID], "entry %s carries no job", m.ID)
		ids[m.Values[keys.EntryUUID]] = true
	}
	require.Len(t, ids, n, "a job is in the stream twice")
}

// idleScheduler starts a scheduler that sleeps an hour between checks and returns once it
// listens for wake messages and has made its first pass over the queue.
func idleScheduler(t *testing.T, b *testBundle) *redistest.Commands {
	t.Helper()
	return startedScheduler(t, delayed.Config{MaxSleep: time.Hour}, b)
}

// startedScheduler runs a scheduler for the bundles' queues and returns once it listens for
// their wake messages and has made its first pass over them.
func startedScheduler(t *testing.T, cfg delayed.Config, bs ...*testBundle) *redistest.Commands {
	t.Helper()
	return startedSchedulerAt(t, redistest.Shared(t).Addr, cfg, bs...)
}

// startedSchedulerAt is startedScheduler on the Redis server at addr.
func startedSchedulerAt(t *testing.T, addr string, cfg delayed.Config, bs ...*testBundle) *redistest.Commands {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	h := redistest.CountCommands(rdb) // its script calls: a pass over the queues
	t.Cleanup(func() { _ = rdb.Close() })
	for _, b := range bs {
		cfg.Queues = append(cfg.Queues, b.queue)
	}
	s, err := delayed.New(rdb, cfg)
	require.NoError(t, err)
	runScheduler(t, t.Context(), s)
	require.Eventually(t, func() bool {
		for _, b := range bs {
			subs, err := b.rdb.PubSubNumSub(t.Context(), b.q.Wake()).Result()
			require.NoError(t, err)
			if subs[b.q.Wake()] < 1 {
				return false
			}
		}
		return h.Scripts() >= int64(len(bs))
	}, 5*time.Second, 5*time.Millisecond)
	return h
}

func TestRunWakesEarly(t *testing.T) {
	t.Parallel()

	t.Run("Enqueue", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		idleScheduler(t, b)
		j := b.schedule(t, 1, pipeline.WithDelay(200*time.Millisecond))[0]
		require.Eventually(t, func() bool {
			return b.status(t, j.ID) == status.Queued
		}, 5*time.Second, 5*time.Millisecond, "the wake message was missed: promotion waits for MaxSleep")
		requirePromoted(t, b, j, 1)
		requireNotEarly(t, b, j)

		// And again, now that it sleeps after a promotion.
		j = b.schedule(t, 1, pipeline.WithDelay(100*time.Millisecond))[0]
		require.Eventually(t, func() bool {
			return b.status(t, j.ID) == status.Queued
		}, 5*time.Second, 5*time.Millisecond)
		requireNotEarly(t, b, j)
	})

	t.Run("EarlierThanKnownNext", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.schedule(t, 1, pipeline.WithDelay(30*time.Minute))
		idleScheduler(t, b)
		j := b.schedule(t, 1, pipeline.WithDelay(150*time.Millisecond))[0]
		require.Eventually(t, func() bool {
			return b.status(t, j.ID) == status.Queued
		}, 5*time.Second, 5*time.Millisecond)
		require.Equal(t, int64(1), b.zcard(t))
	})

	t.Run("Retry", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		idleScheduler(t, b)
		// A failed first attempt, retried 200ms later (a wake message tells the scheduler).
		j := jobtest.Seed(t, b.rdb, b.queue, jobtest.Retry, jobtest.Opts{RetryIn: 200 * time.Millisecond,
			Task: pipeline.Task{Type: "test", Payload: []byte("again")}}).Job
		require.Zero(t, b.xlen(t))
		require.Eventually(t, func() bool {
			return b.status(t, j.ID) == status.Queued
		}, 5*time.Second, 5*time.Millisecond)
		requirePromoted(t, b, j, 2)
		requireNotEarly(t, b, j)
	})
}

// requireNotEarly checks that j's entry was made no earlier than its due time.
func requireNotEarly(t *testing.T, b *testBundle, j *pipeline.Job) {
	t.Helper()
	entry := b.hash(t, j.ID)[keys.FieldEntry]
	require.GreaterOrEqual(t, entryMS(t, entry), j.RunAt.UnixMilli(), "promoted before it was due")
}

func entryMS(tb testing.TB, id string) int64 {
	ms, _, ok := strings.Cut(id, "-")
	require.True(tb, ok, "entry id %q", id)
	n, err := strconv.ParseInt(ms, 10, 64)
	require.NoError(tb, err)
	return n
}

// A wake message can be lost (the subscription reconnecting). MaxSleep then bounds the delay,
// even while the next job the scheduler knows of is much further off.
func TestRunMissedWakeBoundedByMaxSleep(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	b.schedule(t, 1, pipeline.WithDelay(time.Hour))
	startedScheduler(t, delayed.Config{MaxSleep: 200 * time.Millisecond}, b)
	j := b.schedule(t, 1, pipeline.WithDelay(time.Hour))[0]
	// Make it due without telling anyone.
	require.NoError(t, b.rdb.ZAdd(t.Context(), b.q.Scheduled(),
		redis.Z{Score: float64(time.Now().UnixMilli()), Member: j.ID}).Err())
	require.Eventually(t, func() bool {
		return b.status(t, j.ID) == status.Queued
	}, 5*time.Second, 10*time.Millisecond, "a job waited for the next known due time instead of MaxSleep")
}

func TestRunMultipleQueues(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	_, a := setup(t, setupOpts{rdb: rdb})
	_, b := setup(t, setupOpts{rdb: rdb})
	startedScheduler(t, delayed.Config{MaxSleep: time.Hour}, a, b)
	ja := a.schedule(t, 1, pipeline.WithDelay(100*time.Millisecond))[0]
	jb := b.schedule(t, 1, pipeline.WithDelay(300*time.Millisecond))[0]
	require.Eventually(t, func() bool {
		return a.status(t, ja.ID) == status.Queued && b.status(t, jb.ID) == status.Queued
	}, 5*time.Second, 5*time.Millisecond)
	requireNotEarly(t, a, ja)
	requireNotEarly(t, b, jb)
}

// New refuses an unusable Config, naming the field.
func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  delayed.Config
		bad  string // a part of the error; empty when valid
	}{
		{"Zero", delayed.Config{}, ""},
		{"Set", delayed.Config{Prefix: "p", Queues: []string{"a", "b.c-d"}, BatchSize: 10, MaxSleep: time.Minute}, ""},
		{"BatchSizeOne", delayed.Config{BatchSize: 1}, ""},
		{"BatchSizeMax", delayed.Config{BatchSize: delayed.MaxBatchSize}, ""},
		{"BatchSizeNegative", delayed.Config{BatchSize: -1}, "BatchSize is -1"},
		{"BatchSizeOverMax", delayed.Config{BatchSize: delayed.MaxBatchSize + 1}, "BatchSize is " + strconv.Itoa(delayed.MaxBatchSize+1)},
		{"MaxSleepTiny", delayed.Config{MaxSleep: time.Nanosecond}, ""},
		{"MaxSleepNegative", delayed.Config{MaxSleep: -time.Second}, "MaxSleep is -1s"},
		{"QueueEmpty", delayed.Config{Queues: []string{"a", ""}}, "Queues"},
		{"QueueBrace", delayed.Config{Queues: []string{"a{b}"}}, "Queues"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := delayed.New(nil, tc.cfg)
			if tc.bad == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.bad)
		})
	}
	// Every unusable field is named at once.
	_, err := delayed.New(nil, delayed.Config{BatchSize: -1, MaxSleep: -1})
	require.ErrorContains(t, err, "BatchSize")
	require.ErrorContains(t, err, "MaxSleep")
}

// A negative or otherwise unusable value is an error from New, not a default in disguise: a
// negative BatchSize made ZRANGEBYSCORE's LIMIT unbounded, a negative MaxSleep spun, and a
// batch past MaxBatchSize blocks Redis for its whole run.
func TestNewRefusesUnusableConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]delayed.Config{
		"NegativeBatchSize": {BatchSize: -1},
		"HugeBatchSize":     {BatchSize: 1_000_000},
		"NegativeMaxSleep":  {MaxSleep: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			j := b.schedule(t, 1, pipeline.WithDelay(time.Hour))[0]
			cfg.Queues = []string{b.queue}
			s, err := delayed.New(b.rdb, cfg)
			require.Error(t, err)
			require.Nil(t, s)
			requireWaiting(t, b, j)
		})
	}
}

// Start runs Run in the background, as a worker's list of services does; Stop returns once it
// has stopped.
func TestStartStop(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	j := b.schedule(t, 1, pipeline.WithDelay(50*time.Millisecond))[0]
	require.NoError(t, s.Start(t.Context()))
	require.Eventually(t, func() bool { return b.status(t, j.ID) == status.Queued }, 5*time.Second, 5*time.Millisecond)
	s.Stop()
	s.Stop() // stopped already: nothing to do
}

// A Scheduler without queues can Promote a named queue, but neither Run nor Start.
func TestRunNeedsQueues(t *testing.T) {
	t.Parallel()
	s, err := delayed.New(redistest.Client(t), delayed.Config{})
	require.NoError(t, err)
	require.Error(t, s.Run(t.Context()))
	require.Error(t, s.Start(t.Context()))
	s.Stop() // never started: nothing to do
}

// syncBuffer is a log sink safe for the scheduler's goroutine and the test's.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	logs := &syncBuffer{}
	s, b := setup(t, setupOpts{rdb: srv.Client(t),
		cfg: delayed.Config{MaxSleep: 300 * time.Millisecond, Logger: zerolog.New(logs)}})
	done := runScheduler(t, t.Context(), s)

	j := b.schedule(t, 1, pipeline.WithDelay(50*time.Millisecond))[0]
	require.Eventually(t, func() bool {
		return b.status(t, j.ID) == status.Queued
	}, 5*time.Second, 10*time.Millisecond)

	require.NoError(t, srv.Kill())
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "promote due jobs")
	}, 10*time.Second, 10*time.Millisecond, "the scheduler did not notice the outage")
	require.NoError(t, srv.Restart())

	// The restarted server is empty: no scripts, no subscription until the client reconnects.
	for range 3 {
		j := b.schedule(t, 1, pipeline.WithDelay(100*time.Millisecond))[0]
		require.Eventually(t, func() bool {
			return b.status(t, j.ID) == status.Queued
		}, 10*time.Second, 10*time.Millisecond)
		requireNotEarly(t, b, j)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned during the outage: %v", err)
	default:
	}
}

// BenchmarkPromote promotes b.N due jobs, BatchSize at a time.
func BenchmarkPromote(b *testing.B) {
	_, bu := setup(b, setupOpts{client: pipeline.ClientConfig{Now: behind(2 * time.Hour)}})
	for n := b.N; n > 0; n -= 10_000 {
		bu.schedule(b, min(n, 10_000), pipeline.WithDelay(time.Hour)) // due an hour ago
	}
	s := bu.scheduler(b, delayed.Config{})
	ctx := context.Background()
	b.ResetTimer()
	total := 0
	for total < b.N {
		moved, _, _, err := s.Promote(ctx, bu.queue)
		if err != nil {
			b.Fatal(err)
		}
		if moved == 0 {
			b.Fatalf("promoted %d of %d", total, b.N)
		}
		total += moved
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	if got := bu.xlen(b); got != int64(b.N) {
		b.Fatalf("XLEN %d, want %d", got, b.N)
	}
}

// BenchmarkPromoteMaxBatch times one promotion of MaxBatchSize due jobs (100-byte payloads):
// Redis serves no other client meanwhile, so this is the longest a scheduler holds it.
func BenchmarkPromoteMaxBatch(b *testing.B) {
	s, bu := setup(b, setupOpts{client: pipeline.ClientConfig{Now: behind(2 * time.Hour)}, cfg: delayed.Config{BatchSize: delayed.MaxBatchSize}})
	tasks := make([]pipeline.Task, delayed.MaxBatchSize)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "test", Payload: bytes.Repeat([]byte("x"), 100)}
	}
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		// Due an hour ago.
		if _, err := bu.client.EnqueueBatch(ctx, bu.queue, tasks, pipeline.WithDelay(time.Hour)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		moved, _, _, err := s.Promote(ctx, bu.queue)
		if err != nil {
			b.Fatal(err)
		}
		if moved != delayed.MaxBatchSize {
			b.Fatalf("promoted %d, want %d", moved, delayed.MaxBatchSize)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/delayed.MaxBatchSize, "us/job")
}

// BenchmarkDelayedLateness measures how late jobs reach the stream after their due time, with
// a scheduler running as workers run it: per round ~1000 jobs due over ~1s.
func BenchmarkDelayedLateness(b *testing.B) {
	const jobs = 1000
	s, bu := setup(b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()

	var lateness []int64 // ms
	early := 0
	last := "0"
	b.ResetTimer()
	for range b.N {
		tasks := make([]pipeline.Task, jobs)
		for i := range tasks {
			d := 200*time.Millisecond + time.Duration(i)*time.Second/jobs
			tasks[i] = pipeline.Task{Type: "test", Payload: []byte("x"), Opts: []pipeline.Option{pipeline.WithDelay(d)}}
		}
		enq, err := bu.client.EnqueueBatch(ctx, bu.queue, tasks)
		if err != nil {
			b.Fatal(err)
		}
		due := make(map[string]int64, jobs)
		for _, j := range enq {
			due[j.ID] = j.RunAt.UnixMilli()
		}
		for seen := 0; seen < jobs; {
			res, err := bu.rdb.XRead(ctx, &redis.XReadArgs{
				Streams: []string{bu.q.Stream(), last}, Count: 500, Block: 5 * time.Second,
			}).Result()
			if err != nil {
				b.Fatalf("read the stream after %d of %d jobs: %v", seen, jobs, err)
			}
			for _, m := range res[0].Messages {
				last = m.ID
				id, _ := m.Values[keys.EntryUUID].(string)
				d, ok := due[id]
				if !ok {
					continue
				}
				l := entryMS(b, m.ID) - d
				if l < 0 {
					early++
				}
				lateness = append(lateness, l)
				seen++
			}
		}
	}
	b.StopTimer()
	if testing.Verbose() {
		hist := map[int64]int{}
		for _, l := range lateness {
			hist[l/5*5]++
		}
		b.Logf("lateness histogram (5ms buckets): %v", hist)
	}
	slices.Sort(lateness)
	pct := func(p float64) float64 { return float64(lateness[int(p*float64(len(lateness)-1))]) }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lateness[len(lateness)-1]), "max-ms")
	b.ReportMetric(float64(early), "early")
	b.ReportMetric(0, "ns/op") // a round is mostly waiting for due times
	if early > 0 {
		b.Errorf("%d jobs reached the stream before they were due (min lateness %d ms)", early, lateness[0])
	}
}

// OnPromote hears each promotion that moved jobs, with the lag of its most overdue job: jobs
// due an hour ago (by a producer's clock an hour behind) are promoted about an hour late.
func TestOnPromoteReportsLag(t *testing.T) {
	t.Parallel()
	_, b := setup(t, setupOpts{client: pipeline.ClientConfig{Now: behind(time.Hour)}})
	b.schedule(t, 3, pipeline.WithDelay(time.Second))
	type call struct {
		queue string
		moved int
		lag   time.Duration
	}
	calls := make(chan call, 10)
	s := b.scheduler(t, delayed.Config{OnPromote: func(queue string, moved int, lag time.Duration) {
		calls <- call{queue, moved, lag}
	}})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	c := <-calls
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, b.queue, c.queue)
	require.Equal(t, 3, c.moved)
	require.Greater(t, c.lag, time.Hour-2*time.Second, "lag of jobs due an hour ago")
	require.Less(t, c.lag, time.Hour+time.Minute)
	require.Empty(t, calls, "a promotion that moved nothing is not reported")
}

// promote.lua announces the jobs it moves into the stream (queued, with the attempts recorded so
// far), all of one call in one message.
func TestPromoteAnnouncesEvents(t *testing.T) {
	t.Parallel()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	s, b := setup(t, setupOpts{client: pipeline.ClientConfig{Now: fixedClock(t0)}})
	next := jobtest.Listen(t, b.rdb, b.q.Events())
	jobs := b.schedule(t, 2, pipeline.WithRunAt(t0.Add(time.Second)))
	moved, _, _ := promote(t, s, b.queue)
	require.Equal(t, 2, moved)
	got := next()
	require.ElementsMatch(t, []events.Event{{ID: jobs[0].ID, Status: "queued"}, {ID: jobs[1].ID, Status: "queued"}}, got)
}
