package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/delayed"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/recovery"
	"github.com/conveyorq/conveyor/status"
)

// accountingSeconds is how long TestAccountingProperty runs its seeds for, from
// CONVEYOR_ACCOUNTING_SECONDS (docs/DEVELOPMENT.md); 0 runs the short default seed count.
func accountingSeconds(t *testing.T) int {
	v := os.Getenv("CONVEYOR_ACCOUNTING_SECONDS")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "CONVEYOR_ACCOUNTING_SECONDS")
	return n
}

// gauged are the statuses of live jobs, each with its gauge: the accounting's sum.
var gauged = []status.Status{status.Waiting, status.Scheduled, status.Queued, status.InProgress}

// TestAccountingProperty (issue 33): random operations on one queue (publishes with every
// option, workflows and batches, pause and resume, limits set and deleted, cancels, replays,
// workers run and stopped, a worker lost with its jobs pending and their recovery) and after
// each, with nothing moving jobs (no worker or scheduler runs between a step and its check):
// the gauges scheduled + queued + in_progress + waiting add up to the live job hashes; each
// List(X) lists exactly the gauge's count of jobs; the lists are disjoint and their union is
// the live jobs.
func TestAccountingProperty(t *testing.T) {
	t.Parallel()
	secs := accountingSeconds(t)
	for m, tc := range groupClients(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			deadline := time.Now().Add(time.Duration(secs) * time.Second)
			for seed := uint64(1); ; seed++ {
				if secs == 0 && seed > 2 || secs > 0 && seed > 1 && time.Now().After(deadline) {
					t.Logf("%d seeds", seed-1)
					return
				}
				steps := 30
				if secs > 0 {
					steps = 80
				}
				ok := t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
					newAccounting(t, tc.rdb, uint64(m)<<32|seed).run(t, steps)
				})
				if !ok {
					return
				}
			}
		})
	}
}

// accounting is one seed's run of TestAccountingProperty.
type accounting struct {
	b      *testBundle
	rng    *rand.Rand
	ids    []string // every job published, for cancels
	paused bool
	group  bool // a worker created the consumer group
	log    []string
	// seen counts the checks that found some job in each place, to show what a run covered.
	seen map[string]int
}

func newAccounting(t *testing.T, rdb redis.UniversalClient, seed uint64) *accounting {
	a := &accounting{b: setup(t, setupOpts{rdb: rdb}), rng: rand.New(rand.NewPCG(seed, 33)), seen: map[string]int{}}
	// The queue exists (for its group settings) with one plain job.
	a.publish(t)
	require.NoError(t, a.b.insp.SetGroups(t.Context(), a.b.queue, pipeline.GroupChange{Window: 2}))
	return a
}

func (a *accounting) run(t *testing.T, steps int) {
	ops := []struct {
		name   string
		weight int
		do     func(t *testing.T)
	}{
		{"publish", 10, a.publish},
		{"workflow", 3, a.workflow},
		{"pause", 1, a.pause},
		{"resume", 2, a.resume},
		{"limit", 2, a.limit},
		{"unlimit", 2, a.unlimit},
		{"cancel", 3, a.cancel},
		{"delete", 1, a.delete},
		{"runnow", 1, a.runNow},
		{"replay", 2, a.replay},
		{"work", 5, a.work},
		{"lose", 2, a.lose},
		{"recover", 2, a.recover},
		{"promote", 2, a.promote},
	}
	total := 0
	for _, op := range ops {
		total += op.weight
	}
	for step := range steps {
		n := a.rng.IntN(total)
		for _, op := range ops {
			if n -= op.weight; n < 0 {
				a.log = append(a.log, op.name)
				op.do(t)
				break
			}
		}
		a.check(t, step)
	}
	t.Logf("checks that found jobs in each place, of %d: %v", steps, a.seen)
}

// accTypes are the job types published, as often as each is listed: "hold" runs until its
// worker stops, "snooze" snoozes an hour (runnow brings it back).
var accTypes = []string{"ok", "ok", "fail", "retry", "hold", "snooze"}

// publish publishes 1 to 5 jobs.
func (a *accounting) publish(t *testing.T) {
	for range 1 + a.rng.IntN(5) {
		a.publishOne(t)
	}
}

// publishOne publishes one job with random options.
func (a *accounting) publishOne(t *testing.T) {
	r := a.rng
	typ := accTypes[r.IntN(len(accTypes))]
	opts := []pipeline.Option{pipeline.WithMaxRetries(1)}
	if r.IntN(4) == 0 {
		opts = append(opts, pipeline.WithPriority(1+r.IntN(4)))
	}
	debounce := false
	switch r.IntN(5) {
	case 0:
		opts = append(opts, pipeline.WithDelay(time.Hour))
	case 1:
		opts = append(opts, pipeline.WithDelay(time.Millisecond)) // due at the next promotion
	case 2:
		debounce = true
		opts = append(opts, pipeline.WithDebounce("d"+strconv.Itoa(r.IntN(2)), time.Duration(1+r.IntN(2))*time.Millisecond, time.Hour))
	case 3:
		opts = append(opts, pipeline.WithGroup("g"+strconv.Itoa(r.IntN(2))))
	}
	if r.IntN(5) == 0 && !debounce {
		opts = append(opts, pipeline.WithUnique("u"+strconv.Itoa(r.IntN(3)), time.Hour))
	}
	if r.IntN(3) == 0 {
		opts = append(opts, pipeline.WithLimitKey("k"+strconv.Itoa(r.IntN(2))))
	}
	j, err := a.b.client.Enqueue(t.Context(), a.b.queue, pipeline.Task{Type: typ, Payload: []byte("p")}, opts...)
	if err != nil {
		// A unique key held is a refusal the accounting needs nothing of.
		require.ErrorIs(t, err, pipeline.ErrUniqueHeld)
		return
	}
	a.ids = append(a.ids, j.ID)
}

// workflow publishes a chain or a batch with a callback.
func (a *accounting) workflow(t *testing.T) {
	r := a.rng
	task := func() pipeline.Task {
		return pipeline.Task{Type: accTypes[r.IntN(len(accTypes))], Payload: []byte("w")}
	}
	var wf *pipeline.WorkflowState
	var err error
	if r.IntN(2) == 0 {
		tasks := make([]pipeline.Task, 2+r.IntN(3))
		for k := range tasks {
			tasks[k] = task()
		}
		wf, err = a.b.client.Workflow(t.Context(), a.b.queue, pipeline.Chain(tasks...))
	} else {
		cb := task()
		wf, err = a.b.client.Batch(t.Context(), a.b.queue, pipeline.Batch{Jobs: []pipeline.Task{task(), task()}, Callback: &cb})
	}
	require.NoError(t, err)
	for _, tk := range wf.Tasks {
		a.ids = append(a.ids, tk.JobID)
	}
}

func (a *accounting) pause(t *testing.T) {
	require.NoError(t, a.b.insp.Pause(t.Context(), a.b.queue))
	a.paused = true
}

func (a *accounting) resume(t *testing.T) {
	require.NoError(t, a.b.insp.Resume(t.Context(), a.b.queue))
	a.paused = false
}

// limit sets a concurrency limit of 1 on the queue or a type, or a rate that defers into the
// scheduled set (1 an hour, per key or not).
func (a *accounting) limit(t *testing.T) {
	r := a.rng
	l := pipeline.Limit{Concurrency: 1}
	if r.IntN(2) == 0 {
		l = pipeline.Limit{Rate: 1, Interval: time.Hour}
	}
	if r.IntN(2) == 0 {
		l.Type = "ok"
	}
	l.PerKey = r.IntN(3) == 0
	require.NoError(t, a.b.insp.SetLimit(t.Context(), a.b.queue, l))
}

func (a *accounting) unlimit(t *testing.T) {
	for _, typ := range []string{"", "ok"} {
		for _, perKey := range []bool{false, true} {
			_, err := a.b.insp.DeleteLimit(t.Context(), a.b.queue, typ, perKey)
			require.NoError(t, err)
		}
	}
}

func (a *accounting) cancel(t *testing.T) {
	if len(a.ids) == 0 {
		return
	}
	// A job that finished is refused: only a live one changes.
	_ = a.b.client.Cancel(t.Context(), a.b.queue, a.ids[a.rng.IntN(len(a.ids))])
}

// delete deletes a job (Inspector.Delete): only a scheduled or queued one goes.
func (a *accounting) delete(t *testing.T) {
	if len(a.ids) == 0 {
		return
	}
	_ = a.b.insp.Delete(t.Context(), a.b.queue, a.ids[a.rng.IntN(len(a.ids))])
}

// runNow moves a scheduled job into the stream now (refused for one waiting for a slot).
func (a *accounting) runNow(t *testing.T) {
	if len(a.ids) == 0 {
		return
	}
	_ = a.b.insp.RunNow(t.Context(), a.b.queue, a.ids[a.rng.IntN(len(a.ids))])
}

func (a *accounting) replay(t *testing.T) {
	_, err := a.b.insp.ReplayAll(t.Context(), a.b.queue)
	if err != nil {
		// A dead job whose unique key another job took stays dead.
		require.ErrorIs(t, err, pipeline.ErrUniqueHeld)
	}
}

// promote moves the due scheduled jobs into the stream, as a scheduler would, once.
func (a *accounting) promote(t *testing.T) {
	s, err := delayed.New(a.b.rdb, delayed.Config{Queues: []string{a.b.queue}})
	require.NoError(t, err)
	_, _, _, err = s.Promote(t.Context(), a.b.queue)
	require.NoError(t, err)
}

// work runs a worker (its scheduler and recoverer too) until no job is in the stream (or the
// queue is paused, or "hold" jobs take every slot) and the only jobs running are "hold" jobs,
// then stops it: what it holds goes back.
func (a *accounting) work(t *testing.T) {
	var mu sync.Mutex
	handled, holding := 0, 0
	count := func() {
		mu.Lock()
		handled++
		mu.Unlock()
	}
	const concurrency = 3
	handlers := map[string]pipeline.HandlerFunc{
		"hold": func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
			mu.Lock()
			holding++
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			holding--
			mu.Unlock()
			return nil, ctx.Err()
		},
		"ok": func(context.Context, *pipeline.Job) ([]byte, error) { count(); return nil, nil },
		"fail": func(context.Context, *pipeline.Job) ([]byte, error) {
			count()
			return nil, pipeline.SkipRetry(errors.New("dead on purpose"))
		},
		"retry":  func(context.Context, *pipeline.Job) ([]byte, error) { count(); return nil, errors.New("again") },
		"snooze": func(context.Context, *pipeline.Job) ([]byte, error) { count(); return nil, pipeline.Snooze(time.Hour) },
	}
	_, stop := a.b.startWorker(t, pipeline.WorkerConfig{Concurrency: concurrency, VisibilityTimeout: 3 * time.Second,
		ShutdownTimeout: time.Millisecond}, handlers)
	a.group = true
	require.Eventually(t, func() bool {
		s, err := a.b.client.Stats(context.Background(), a.b.queue)
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		// Lost entries (lose) are in progress too until recovered.
		lost := a.lostPending(t)
		return s.InProgress-lost == int64(holding) && (s.Queued-s.GroupWaiting == 0 || a.paused || holding == concurrency)
	}, 30*time.Second, 5*time.Millisecond) // 10x: a worker settles these in milliseconds
	require.NoError(t, stop())
}

// lose plays a worker lost with its jobs: a consumer that reads up to 3 entries of the
// queue's first level and never comes back. Its entries stay pending until recovered.
func (a *accounting) lose(t *testing.T) {
	if !a.group {
		// As a worker makes it.
		err := a.b.rdb.XGroupCreateMkStream(t.Context(), a.b.q.Stream(), keys.Group, "0").Err()
		if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
			require.NoError(t, err)
		}
		a.group = true
	}
	_, err := a.b.rdb.XReadGroup(t.Context(), &redis.XReadGroupArgs{Group: keys.Group, Consumer: "lost",
		Streams: []string{a.b.q.Stream(), ">"}, Count: 3, Block: -1}).Result()
	if !errors.Is(err, redis.Nil) {
		require.NoError(t, err)
	}
}

// lostPending is how many entries the lost consumer (lose) holds.
func (a *accounting) lostPending(t *testing.T) int64 {
	if !a.group {
		return 0
	}
	p, err := a.b.rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: a.b.q.Stream(), Group: keys.Group,
		Start: "-", End: "+", Count: 1000, Consumer: "lost"}).Result()
	require.NoError(t, err)
	return int64(len(p))
}

// recover runs a recoverer until the lost consumer's entries are back (or dead).
func (a *accounting) recover(t *testing.T) {
	if !a.group {
		return
	}
	r, err := recovery.NewRecoverer(a.b.rdb, recovery.Config{Queue: a.b.queue, VisibilityTimeout: 3 * time.Millisecond,
		Interval: time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, _, err := r.RunOnce(context.Background())
		require.NoError(t, err)
		p, err := a.b.rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: a.b.q.Stream(), Group: keys.Group,
			Start: "-", End: "+", Count: 1, Consumer: "lost"}).Result()
		require.NoError(t, err)
		return len(p) == 0
	}, 30*time.Second, time.Millisecond)
}

// liveJobs scans the queue's job hashes and returns the ids of those whose status is live.
func (a *accounting) liveJobs(t *testing.T) map[string]status.Status {
	ctx := t.Context()
	out := map[string]status.Status{}
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, a.b.q.JobPrefix()+"*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			st, err := c.HGet(ctx, k, keys.FieldStatus).Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return err
			}
			if slices.Contains(gauged, status.Status(st)) {
				mu.Lock()
				out[k[len(a.b.q.JobPrefix()):]] = status.Status(st)
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	switch c := a.b.rdb.(type) {
	case *redis.ClusterClient:
		require.NoError(t, c.ForEachMaster(ctx, scan))
	case *redis.Client:
		require.NoError(t, scan(ctx, c))
	default:
		t.Fatalf("client %T", a.b.rdb)
	}
	return out
}

// check is the property, read while nothing moves the queue's jobs.
func (a *accounting) check(t *testing.T, step int) {
	t.Helper()
	live := a.liveJobs(t)
	s, err := a.b.insp.Stats(t.Context(), a.b.queue)
	require.NoError(t, err)
	where := fmt.Sprintf("step %d after %v: stats %+v", step, a.log, *s)
	sum := s.Scheduled + s.Queued + s.InProgress + s.Waiting
	for name, n := range map[string]int64{"waiting": s.Waiting, "scheduled": s.Scheduled - s.LimitWaiting,
		"limit_waiting": s.LimitWaiting, "queued": s.Queued - s.GroupWaiting, "group_waiting": s.GroupWaiting,
		"in_progress": s.InProgress, "dead": s.Dead} {
		if n > 0 {
			a.seen[name]++
		}
	}
	listed := map[string]status.Status{}
	for _, st := range gauged {
		n, ok := s.Gauge(st)
		require.True(t, ok, st)
		got := a.listAll(t, st, 1+a.rng.IntN(7))
		for _, id := range got {
			prev, dup := listed[id]
			require.False(t, dup, "%s: job %s (%s) listed as %s and %s", where, id, live[id], prev, st)
			listed[id] = st
		}
		require.Len(t, got, int(n), "%s: List(%s) %v against its gauge", where, st, got)
	}
	for id, st := range live {
		_, ok := listed[id]
		require.True(t, ok, "%s: live job %s (%s) in no list", where, id, st)
	}
	for id, st := range listed {
		_, ok := live[id]
		require.True(t, ok, "%s: job %s listed as %s is not live", where, id, st)
	}
	require.EqualValues(t, len(live), sum, "%s: the gauges' sum against the live jobs", where)
}

// listAll is every page of List(st), each of at most limit jobs.
func (a *accounting) listAll(t *testing.T, st status.Status, limit int) []string {
	var out []string
	cursor := ""
	for range 100000 {
		p, err := a.b.insp.List(t.Context(), a.b.queue, st, pipeline.Page{Cursor: cursor, Limit: limit})
		require.NoError(t, err)
		require.LessOrEqual(t, len(p.Jobs), limit)
		for _, j := range p.Jobs {
			out = append(out, j.ID)
		}
		if p.Next == "" {
			return out
		}
		require.NotEqual(t, cursor, p.Next)
		cursor = p.Next
	}
	t.Fatalf("List(%s) never ends", st)
	return nil
}
