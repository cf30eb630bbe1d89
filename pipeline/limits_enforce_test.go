package pipeline_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// gate is a handler that blocks each job until the test lets it go, and counts what runs: the
// jobs running now per group (the limit key, or "" for all), the most ever seen, and the
// starts in order.
type gate struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	started chan string // job ids, as they start
	release chan struct{}
	fail    bool
}

func newGate() *gate {
	return &gate{running: map[string]int{}, most: map[string]int{}, started: make(chan string, 1000),
		release: make(chan struct{}, 1000)}
}

func (g *gate) handler(group func(*pipeline.Job) string) pipeline.HandlerFunc {
	return func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		k := group(j)
		g.mu.Lock()
		g.running[k]++
		g.most[k] = max(g.most[k], g.running[k])
		g.mu.Unlock()
		g.started <- j.ID
		select {
		case <-g.release:
		case <-ctx.Done():
		}
		g.mu.Lock()
		g.running[k]--
		fail := g.fail
		g.mu.Unlock()
		if fail {
			return nil, pipeline.SkipRetry(errors.New("failing on purpose"))
		}
		return nil, nil
	}
}

func (g *gate) mostOf(k string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most[k]
}

// next waits for the next start.
func (g *gate) next(t *testing.T) string {
	t.Helper()
	return nextStart(t, g.started)
}

// nextStart waits for the next job id on started, the starts a test's gate handler reports.
func nextStart(t *testing.T, started <-chan string) string {
	t.Helper()
	select {
	case id := <-started:
		return id
	case <-time.After(20 * time.Second):
		t.Fatal("no job started within 20s")
		return ""
	}
}

// none asserts that no job has started (after the test made sure the worker had the chance:
// the jobs it would start were read and admitted or deferred, see waitLimited).
func (g *gate) none(t *testing.T) {
	t.Helper()
	select {
	case id := <-g.started:
		t.Fatalf("job %s started over the limit", id)
	default:
	}
}

func setLimit(t *testing.T, rdb redis.UniversalClient, queue string, l pipeline.Limit) {
	t.Helper()
	in, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	require.NoError(t, in.SetLimit(context.Background(), queue, l))
}

// waitLimited waits until n deferrals were counted in queue.
func waitLimited(t *testing.T, rdb redis.UniversalClient, queue string, n int64) {
	t.Helper()
	q := keys.New(keys.DefaultPrefix, queue)
	require.Eventually(t, func() bool {
		v, _ := rdb.HGet(context.Background(), q.Stats(), keys.StatLimited).Int64()
		return v >= n
	}, 20*time.Second, 5*time.Millisecond)
}

func publishN(t *testing.T, c *pipeline.Client, queue string, n int, opts ...pipeline.Option) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		j, err := c.Enqueue(context.Background(), queue, pipeline.Task{Type: "t"}, opts...)
		require.NoError(t, err)
		ids[i] = j.ID
	}
	return ids
}

func requireDoneOnce(t *testing.T, c *pipeline.Client, queue string, ids []string, want status.Status) {
	t.Helper()
	for _, id := range ids {
		var j *pipeline.Job
		require.Eventually(t, func() bool {
			var err error
			j, err = c.Get(context.Background(), queue, id)
			return err == nil && j.Status == want
		}, 20*time.Second, 5*time.Millisecond, "job %s", id)
		require.Equal(t, 1, j.Attempt, "job %s: a deferral is no attempt", id)
	}
}

// A concurrency limit of M: never more than M run at once, the (M+1)th starts only after one
// finishes, the deferred jobs are no attempts, and the slots are all given back.
func TestLimitConcurrency(t *testing.T) {
	t.Parallel()
	onBoth(t, func(t *testing.T, rdb redis.UniversalClient) { testLimitConcurrency(t, rdb) })
	// A job of a level above 1 is read from its level's stream, under a view of the queue
	// (keys.Queue.AtLevel), and is held to the queue's limits all the same.
	t.Run("Level3", func(t *testing.T) {
		t.Parallel()
		testLimitConcurrency(t, redistest.Client(t), pipeline.WithPriority(3))
	})
}

func testLimitConcurrency(t *testing.T, rdb redis.UniversalClient, opts ...pipeline.Option) {
	ctx := context.Background()
	queue := redistest.UniqueName(t)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	publishN(t, c, queue, 1, opts...) // the queue exists
	const m = 2
	setLimit(t, rdb, queue, pipeline.Limit{Concurrency: m})
	g := newGate()
	ids := publishN(t, c, queue, 5, opts...)
	startWorkerOn(t, rdb, pipeline.WorkerConfig{Queues: []string{queue}, Concurrency: 10},
		map[string]pipeline.HandlerFunc{"t": g.handler(func(*pipeline.Job) string { return "" })})
	g.next(t)
	g.next(t)
	waitLimited(t, rdb, queue, 4) // the other four were read and deferred
	g.none(t)
	for range 4 {
		g.release <- struct{}{}
		g.next(t)
	}
	g.release <- struct{}{}
	g.release <- struct{}{}
	requireDoneOnce(t, c, queue, ids, status.Completed)
	require.Equal(t, m, g.mostOf(""))
	requireSlotsBack(t, rdb, keys.New(keys.DefaultPrefix, queue), "q")
	st, err := c.Stats(ctx, queue)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.Limited, int64(4))
}

// Per-key: each key gets its own M.
func TestLimitConcurrencyPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var keyOf sync.Map
	var ids []string
	for _, k := range []string{"a", "b"} {
		for _, id := range publishN(t, b.client, b.queue, 3, pipeline.WithLimitKey(k)) {
			keyOf.Store(id, k)
			ids = append(ids, id)
		}
	}
	setLimit(t, b.rdb, b.queue, pipeline.Limit{PerKey: true, Concurrency: 1})
	g := newGate()
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 10}, map[string]pipeline.HandlerFunc{"t": g.handler(func(j *pipeline.Job) string {
		k, _ := keyOf.Load(j.ID)
		s, _ := k.(string)
		return s
	})})
	first := []string{g.next(t), g.next(t)}
	ka, _ := keyOf.Load(first[0])
	kb, _ := keyOf.Load(first[1])
	require.NotEqual(t, ka, kb, "one job of each key runs")
	waitLimited(t, b.rdb, b.queue, 4)
	g.none(t)
	for range 4 {
		g.release <- struct{}{}
		g.next(t)
	}
	g.release <- struct{}{}
	g.release <- struct{}{}
	requireDoneOnce(t, b.client, b.queue, ids, status.Completed)
	require.Equal(t, 1, g.mostOf("a"))
	require.Equal(t, 1, g.mostOf("b"))
}

// A rate limit: at most rate starts in any window of the interval, give or take the life of a
// leased token (a worker starts a token's job within tokenLife of its grant), jobs are no
// attempts and none fails; four workers share the limit.
func TestLimitRate(t *testing.T) {
	t.Parallel()
	onBoth(t, testLimitRate)
}

func testLimitRate(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	queue := redistest.UniqueName(t)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	publishN(t, c, queue, 1)
	const rate, interval = 5, 250 * time.Millisecond
	setLimit(t, rdb, queue, pipeline.Limit{Rate: rate, Interval: interval})
	ids := publishN(t, c, queue, 24)
	for range 4 {
		startWorkerOn(t, rdb, pipeline.WorkerConfig{Queues: []string{queue}, Concurrency: 10},
			map[string]pipeline.HandlerFunc{"t": echo})
	}
	requireDoneOnce(t, c, queue, ids, status.Completed)
	q := keys.New(keys.DefaultPrefix, queue)
	var at []int64
	for _, id := range ids {
		v, err := rdb.HGet(ctx, q.Job(id), keys.FieldStartedAt).Int64()
		require.NoError(t, err)
		at = append(at, v)
	}
	// The first job, published before the limit, may or may not have been admitted under it.
	slices.Sort(at)
	for i := range at {
		for j := i + 1; j < len(at); j++ {
			// At most rate tokens granted in any window of the interval, so at most rate per
			// window of the windows that tile [t_i - tokenLife, t_j] (+1 ms: the times are whole
			// milliseconds): the tokens of the starts in [t_i, t_j] were granted at most
			// tokenLife before t_i.
			span := at[j] - at[i] + 1 + pipeline.TokenLife.Milliseconds()
			windows := (span + interval.Milliseconds() - 1) / interval.Milliseconds()
			require.LessOrEqual(t, int64(j-i+1), rate*windows, "starts %d..%d at %v", i, j, at)
		}
	}
	st, err := c.Stats(ctx, queue)
	require.NoError(t, err)
	require.Positive(t, st.Limited)
	require.Zero(t, st.Failed)
}

// The slots of a job come back when it fails, is canceled, or its worker shuts down.
func TestLimitReleases(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"failure", "cancel", "shutdown", "delete", "raise"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ids := publishN(t, b.client, b.queue, 2, pipeline.WithMaxRetries(0))
			setLimit(t, b.rdb, b.queue, pipeline.Limit{Concurrency: 1})
			g := newGate()
			g.fail = how == "failure"
			h := map[string]pipeline.HandlerFunc{"t": g.handler(func(*pipeline.Job) string { return "" })}
			_, stop := b.startWorker(t, pipeline.WorkerConfig{Concurrency: 10, ShutdownTimeout: 50 * time.Millisecond}, h)
			first := g.next(t)
			waitLimited(t, b.rdb, b.queue, 1)
			g.none(t)
			in, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
			require.NoError(t, err)
			switch how {
			case "failure":
				g.release <- struct{}{}
			case "cancel":
				require.NoError(t, b.client.Cancel(context.Background(), b.queue, first))
			case "shutdown":
				require.NoError(t, stop())
				b.startWorker(t, pipeline.WorkerConfig{Concurrency: 10}, h)
			case "delete":
				ok, err := in.DeleteLimit(context.Background(), b.queue, "", false)
				require.NoError(t, err)
				require.True(t, ok)
			case "raise":
				require.NoError(t, in.SetLimit(context.Background(), b.queue, pipeline.Limit{Concurrency: 2}))
			}
			second := g.next(t)
			if how == "shutdown" {
				// The put-back job and the waiting one both run on the new worker, one at a time.
				g.release <- struct{}{}
				g.next(t)
			}
			_ = second
			close(g.release)
			for _, id := range ids {
				b.waitFinal(t, id)
			}
			requireSlotsBack(t, b.rdb, b.q, "q")
		})
	}
}

// waitFinal waits until job id is final.
func (b *testBundle) waitFinal(t *testing.T, id string) *pipeline.Job {
	t.Helper()
	var j *pipeline.Job
	require.Eventually(t, func() bool {
		var err error
		j, err = b.client.Get(context.Background(), b.queue, id)
		return err == nil && j.Status.Final()
	}, 20*time.Second, 5*time.Millisecond, "job %s", id)
	return j
}

// requireSlotsBack waits until no slot of instance inst of queue q is taken: a worker gives
// its spare slots back once they sit unused (leaseIdle), and every slot when it stops.
func requireSlotsBack(t *testing.T, rdb redis.UniversalClient, q keys.Queue, inst string) {
	t.Helper()
	set := q.LimitPrefix() + "c:" + inst
	require.Eventually(t, func() bool {
		n, err := rdb.SCard(context.Background(), set).Result()
		return err == nil && n == 0
	}, 20*time.Second, 5*time.Millisecond, "every slot of %s given back", inst)
}

// onBoth runs test on a standalone server and on the 3-master cluster.
func onBoth(t *testing.T, test func(*testing.T, redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		test(t, redistest.Client(t))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		test(t, redistest.StartCluster(t).Client(t))
	})
}

// A worker that dies holding a slot: recovery gives the slot back with the job, and the job
// waiting for it runs.
func TestLimitReleaseOnRecovery(t *testing.T) {
	t.Parallel()
	const vt = 1500 * time.Millisecond
	b := setup(t)
	ctx := t.Context()
	ids := publishN(t, b.client, b.queue, 2)
	setLimit(t, b.rdb, b.queue, pipeline.Limit{Concurrency: 1})

	victimRDB := redis.NewClient(&redis.Options{Addr: b.addr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = victimRDB.Close() })
	victim, err := pipeline.NewWorker(victimRDB, pipeline.WorkerConfig{Queues: []string{b.queue}, Name: "victim",
		VisibilityTimeout: vt, ShutdownTimeout: 100 * time.Millisecond, DisableRecovery: true, Logger: testLogger(t)})
	require.NoError(t, err)
	g := newGate()
	victim.Handle("t", g.handler(func(*pipeline.Job) string { return "" }))
	vctx, stopVictim := context.WithCancel(context.Background())
	victimDone := make(chan struct{})
	go func() { defer close(victimDone); _ = victim.Run(vctx) }()
	t.Cleanup(func() { stopVictim(); <-victimDone })
	g.next(t)
	waitLimited(t, b.rdb, b.queue, 1)
	_ = victimRDB.Close() // the victim dies: no renewal, no put-back

	b.startWorker(t, pipeline.WorkerConfig{Name: "rescuer", VisibilityTimeout: vt, RecoveryInterval: 100 * time.Millisecond},
		map[string]pipeline.HandlerFunc{"t": echo})
	for _, id := range ids {
		j := b.waitFinal(t, id)
		require.Equal(t, status.Completed, j.Status)
		require.Equal(t, "rescuer", j.Worker)
	}
	requireSlotsBack(t, b.rdb, b.q, "q")
	_ = ctx
}

// Many jobs under a concurrency limit they never reach, finished in batches while nobody waits
// for a slot (finish.lua gathers the releases and removes them with one SREM per set at the end
// of each call), with a per-key limit beside it: every slot is given back, no job names one.
func TestLimitReleasesInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []string
	for _, k := range []string{"a", "b"} {
		ids = append(ids, publishN(t, b.client, b.queue, 60, pipeline.WithLimitKey(k))...)
	}
	setLimit(t, b.rdb, b.queue, pipeline.Limit{Concurrency: 1000})
	setLimit(t, b.rdb, b.queue, pipeline.Limit{PerKey: true, Concurrency: 1000})
	h := map[string]pipeline.HandlerFunc{"t": func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil }}
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 50}, h)
	for _, id := range ids {
		require.Equal(t, status.Completed, b.waitFinal(t, id).Status)
	}
	for _, inst := range []string{"q", "qk:a", "qk:b"} {
		requireSlotsBack(t, b.rdb, b.q, inst)
	}
}

// loseAdmits is a go-redis hook that lets the admission scripts (the calls that name the
// queue's limits hash) run on the server and loses their replies while lose is positive.
type loseAdmits struct {
	limits     string
	lose, lost atomic.Int64
}

func (*loseAdmits) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *loseAdmits) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); err != nil || !l.lost1(cmd) {
			return err
		}
		return io.EOF
	}
}

func (l *loseAdmits) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if l.lost1(c) {
				err = io.EOF
			}
		}
		return err
	}
}

// lost1 loses cmd's reply when it is an admission and replies are still to be lost.
func (l *loseAdmits) lost1(cmd redis.Cmder) bool {
	if cmd.Err() != nil || cmd.Name() != "evalsha" && cmd.Name() != "eval" ||
		!slices.Contains(cmd.Args(), any(l.limits)) || l.lose.Add(-1) < 0 {
		return false
	}
	l.lost.Add(1)
	cmd.SetErr(io.EOF)
	return true
}

// Admission whose reply is lost (the script ran: a grant took its slot, a deferral moved the
// job on): the worker asks again message by message, a granted job is granted as it was and
// runs once, a deferred one is refused and runs when its slot frees; the limit is never
// exceeded and every slot comes back.
func TestLimitAdmissionReplyLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	ids := publishN(t, b.client, b.queue, 4)
	setLimit(t, b.rdb, b.queue, pipeline.Limit{Concurrency: 1})
	hook := &loseAdmits{limits: b.q.Limits()}
	hook.lose.Store(3)
	hooked := redis.NewClient(&redis.Options{Addr: b.addr(t)})
	t.Cleanup(func() { _ = hooked.Close() })
	hooked.AddHook(hook)
	g := newGate()
	startWorkerOn(t, hooked, pipeline.WorkerConfig{Queues: []string{b.queue}, Concurrency: 10},
		map[string]pipeline.HandlerFunc{"t": g.handler(func(*pipeline.Job) string { return "" })})
	for range ids {
		g.next(t)
		g.release <- struct{}{}
	}
	requireDoneOnce(t, b.client, b.queue, ids, status.Completed)
	require.Equal(t, 1, g.mostOf(""))
	require.Positive(t, hook.lost.Load())
	requireSlotsBack(t, b.rdb, b.q, "q")
	_ = ctx
}

// Jobs deferred by a rate are scheduled T apart (T = interval/rate), not a whole millisecond
// apart: rounding each deferred job's due time up to the millisecond used to space them at
// least 1 ms apart, capping any rate at about 1,000/s per scope and halving rates whose T is
// not a whole millisecond (900/s ran at 501/s).
func TestLimitRateDefersTApart(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := context.Background()
	queue := redistest.UniqueName(t)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	publishN(t, c, queue, 1)
	const rate, interval, n = 10, 15 * time.Millisecond, 150
	setLimit(t, rdb, queue, pipeline.Limit{Rate: rate, Interval: interval})
	publishN(t, c, queue, n)
	// No scheduler: the deferred jobs stay in the scheduled set for the test to read. One read
	// takes the whole backlog, so one admission (one pipeline of admit.lua calls, microseconds
	// apart) defers them all: jobs admitted by later calls, as the clock moves on, would leave
	// gaps in the deferred jobs' schedule that no fault of the horizon makes (CI under load saw
	// 81 deferrals over 126 ms, against 122, with reads of 10).
	startWorkerOn(t, rdb, pipeline.WorkerConfig{Queues: []string{queue}, Concurrency: 2 * n, ReadBatch: 2 * n,
		DisableScheduler: true}, map[string]pipeline.HandlerFunc{"t": echo})
	q := keys.New(keys.DefaultPrefix, queue)
	require.Eventually(t, func() bool {
		l, _ := rdb.XLen(ctx, q.Stream()).Result()
		st, _ := c.Stats(ctx, queue)
		return l == 0 && st != nil && st.Limited+st.Completed == n+1
	}, 20*time.Second, 5*time.Millisecond)
	due, err := rdb.ZRangeWithScores(ctx, q.Scheduled(), 0, -1).Result()
	require.NoError(t, err)
	require.Greater(t, len(due), 50)
	// Each is due T after the previous, by the due times Redis stored (whole milliseconds,
	// rounded up from the exact times, so 1 or 2 ms apart for a T of 1.5 ms, and never more
	// than 1 ms off k T after the first).
	perMS := float64(interval.Milliseconds()) / rate
	for k := 1; k < len(due); k++ {
		require.InDelta(t, perMS, due[k].Score-due[k-1].Score, 1, "job %d of %d: due at %.0f, the previous at %.0f",
			k, len(due), due[k].Score, due[k-1].Score)
		require.InDelta(t, float64(k)*perMS, due[k].Score-due[0].Score, 1, "job %d of %d: due at %.0f, the first at %.0f",
			k, len(due), due[k].Score, due[0].Score)
	}
}
