package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/metrics"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// clock is a settable clock for the collector's cache.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// A scrape costs a bounded number of Redis round trips however many queues there are, and
// scrapes within MaxAge cost none: 250 queues, 20 scrapes (5 of them at once) make one
// refresh of at most 1 + ceil(250/100) round trips (the queue list with the partition counts
// in one pipeline, then a pipeline per 100 queues); once MaxAge has passed, one more.
func TestQueueCollectorBoundsRedisCalls(t *testing.T) {
	t.Parallel()
	prefix := redistest.UniqueName(t)
	rdb := redistest.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	const queues = 250
	var fill sync.WaitGroup
	for w := range 10 {
		fill.Go(func() {
			for i := w; i < queues; i += 10 {
				tasks := make([]pipeline.Task, 1+i%3)
				for k := range tasks {
					tasks[k] = pipeline.Task{Type: "t"}
				}
				_, err := client.EnqueueBatch(context.Background(), fmt.Sprintf("q%03d", i), tasks)
				require.NoError(t, err)
			}
		})
	}
	fill.Wait()
	setter, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	require.NoError(t, setter.SetLimit(t.Context(), "q000", pipeline.Limit{Rate: 90, Interval: time.Minute}))
	require.NoError(t, setter.SetLimit(t.Context(), "q000", pipeline.Limit{Type: "t", PerKey: true, Concurrency: 3}))
	require.NoError(t, setter.SetLimit(t.Context(), "q249", pipeline.Limit{Type: "t", Rate: 5, Interval: 500 * time.Millisecond, Concurrency: 7}))

	counted := redis.NewClient(rdb.Options())
	t.Cleanup(func() { _ = counted.Close() })
	cc := redistest.CountCommands(counted)
	clk := &clock{t: time.Now()}
	insp, err := pipeline.NewInspector(counted, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	qc, err := metrics.NewQueueCollector(insp,
		metrics.QueueCollectorConfig{Now: clk.now})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(qc))
	require.NoError(t, counted.Ping(t.Context()).Err()) // the connection's set-up is not the collector's
	before := cc.RoundTrips()

	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			_, err := reg.Gather()
			require.NoError(t, err)
		})
	}
	wg.Wait()
	for range 15 {
		_, err := reg.Gather()
		require.NoError(t, err)
	}
	perRefresh := cc.RoundTrips() - before
	// The queue list, one stats pipeline per 100 queues and one of their latencies, one for
	// every queue's limits, and the heartbeats' index for the counts by reason (no worker is
	// live: no record to read, and the gauges of queues no worker reads split without a read).
	require.LessOrEqual(t, perRefresh, int64(3+2*((queues+99)/100)), "20 scrapes within MaxAge: one refresh")

	require.Equal(t, 1.0, value(t, reg, "conveyor_queue_jobs", "queue", "q000", "state", "queued"))
	require.Equal(t, 3.0, value(t, reg, "conveyor_queue_jobs", "queue", "q002", "state", "queued"))
	require.Equal(t, 2.0, value(t, reg, "conveyor_queue_enqueued_total", "queue", "q001"))
	require.Equal(t, 3.0, value(t, reg, "conveyor_queue_jobs_waiting", "queue", "q002", "reason", "no_worker_queue"))
	require.Equal(t, float64(queues), float64(testutil.CollectAndCount(qc, "conveyor_queue_completed_total")))
	// The configured limits, rates in jobs per second; a queue without limits has no series.
	require.Equal(t, 1.5, value(t, reg, "conveyor_queue_limit_rate", "queue", "q000", "type", "", "per_key", "false"))
	require.Equal(t, 3.0, value(t, reg, "conveyor_queue_limit_concurrency", "queue", "q000", "type", "t", "per_key", "true"))
	require.Equal(t, 10.0, value(t, reg, "conveyor_queue_limit_rate", "queue", "q249", "type", "t", "per_key", "false"))
	require.Equal(t, 7.0, value(t, reg, "conveyor_queue_limit_concurrency", "queue", "q249", "type", "t", "per_key", "false"))
	require.Equal(t, 2, testutil.CollectAndCount(qc, "conveyor_queue_limit_rate"))
	require.Equal(t, 2, testutil.CollectAndCount(qc, "conveyor_queue_limit_concurrency"))

	// Within MaxAge a new job is not seen; after it, one more refresh sees it.
	_, err = client.Enqueue(t.Context(), "q000", pipeline.Task{Type: "t"})
	require.NoError(t, err)
	clk.add(metrics.DefaultMaxAge - time.Millisecond)
	require.Equal(t, 1.0, value(t, reg, "conveyor_queue_jobs", "queue", "q000", "state", "queued"))
	clk.add(time.Millisecond)
	require.Equal(t, 2.0, value(t, reg, "conveyor_queue_jobs", "queue", "q000", "state", "queued"))
	require.Equal(t, 2*perRefresh, cc.RoundTrips()-before)
	require.Equal(t, 0.0, value(t, reg, "conveyor_queue_stats_age_seconds"))

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// With Queues, only those queues are exported, and a listed queue nothing was published to
// yet is there with zeros.
func TestQueueCollectorListedQueues(t *testing.T) {
	t.Parallel()
	prefix := redistest.UniqueName(t)
	rdb := redistest.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	for _, q := range []string{"a", "b"} {
		_, err := client.Enqueue(t.Context(), q, pipeline.Task{Type: "t"}, pipeline.WithDelay(time.Hour))
		require.NoError(t, err)
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	qc, err := metrics.NewQueueCollector(insp,
		metrics.QueueCollectorConfig{Queues: []string{"b", "new", "not{valid}"}})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(qc))
	require.Equal(t, 1.0, value(t, reg, "conveyor_queue_jobs", "queue", "b", "state", "scheduled"))
	require.Equal(t, 15, testutil.CollectAndCount(qc, "conveyor_queue_jobs"), "5 states of b, new and not{valid}")
	requireGaugedStates(t, reg)
	require.Equal(t, 0.0, value(t, reg, "conveyor_queue_enqueued_total", "queue", "new"))
	require.Equal(t, 1.0, value(t, reg, "conveyor_queue_enqueued_total", "queue", "b"))
	require.Equal(t, 0.0, value(t, reg, "conveyor_queue_paused", "queue", "b"))
}

// conveyor_queue_paused is 1 for a paused queue, read in the same refresh as the rest.
func TestQueueCollectorPaused(t *testing.T) {
	t.Parallel()
	prefix := redistest.UniqueName(t)
	rdb := redistest.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	for _, q := range []string{"a", "b"} {
		_, err := client.Enqueue(t.Context(), q, pipeline.Task{Type: "t"})
		require.NoError(t, err)
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	require.NoError(t, insp.Pause(t.Context(), "b"))
	qc, err := metrics.NewQueueCollector(insp, metrics.QueueCollectorConfig{})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(qc))
	require.Equal(t, 0.0, value(t, reg, "conveyor_queue_paused", "queue", "a"))
	require.Equal(t, 1.0, value(t, reg, "conveyor_queue_paused", "queue", "b"))
}

// While Redis is away the last reading is served, its age growing, and the failures are
// counted; with no reading at all the scrape fails, saying why.
func TestQueueCollectorRedisAway(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	queue := redistest.UniqueName(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	_, err = client.Enqueue(t.Context(), queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	clk := &clock{t: time.Now()}
	cfg := metrics.QueueCollectorConfig{Now: clk.now, Timeout: 300 * time.Millisecond}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	qc, err := metrics.NewQueueCollector(insp, cfg)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(qc))
	require.Equal(t, 1.0, value(t, reg, "conveyor_queue_jobs", "queue", queue, "state", "queued"))

	require.NoError(t, srv.Kill())
	clk.add(time.Minute)
	require.Equal(t, 1.0, value(t, reg, "conveyor_queue_jobs", "queue", queue, "state", "queued"), "the last reading")
	require.Equal(t, 60.0, value(t, reg, "conveyor_queue_stats_age_seconds"))
	require.Equal(t, 1.0, value(t, reg, "conveyor_queue_stats_errors_total"))

	fresh, err := metrics.NewQueueCollector(insp, cfg)
	require.NoError(t, err)
	reg2 := prometheus.NewRegistry()
	require.NoError(t, reg2.Register(fresh))
	_, err = reg2.Gather()
	require.Error(t, err)
	require.Contains(t, err.Error(), "read the queues")
}

func TestNewQueueCollectorRefusesBadConfig(t *testing.T) {
	_, err := metrics.NewQueueCollector(nil, metrics.QueueCollectorConfig{})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	insp, err := pipeline.NewInspector(redis.NewClient(&redis.Options{}), pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = metrics.NewQueueCollector(insp, metrics.QueueCollectorConfig{MaxAge: -time.Second})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}

// conveyor_queue_debounced_total counts the publishes that joined a pending debounced job;
// the job they made counts once in conveyor_queue_enqueued_total.
func TestQueueCollectorDebounced(t *testing.T) {
	t.Parallel()
	prefix := redistest.UniqueName(t)
	rdb := redistest.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	for range 4 {
		_, err := client.Enqueue(t.Context(), "d", pipeline.Task{Type: "t"}, pipeline.WithDebounce("k", time.Hour, time.Hour))
		require.NoError(t, err)
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	qc, err := metrics.NewQueueCollector(insp, metrics.QueueCollectorConfig{Queues: []string{"d"}})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(qc))
	require.Equal(t, 3.0, value(t, reg, "conveyor_queue_debounced_total", "queue", "d"))
	require.Equal(t, 1.0, value(t, reg, "conveyor_queue_enqueued_total", "queue", "d"))
	require.Equal(t, 1.0, value(t, reg, "conveyor_queue_jobs", "queue", "d", "state", "scheduled"))
}

// conveyor_queue_rejected_full_total and _dropped_full_total count a bounded queue's refusals
// and drops.
func TestQueueCollectorBoundedQueue(t *testing.T) {
	t.Parallel()
	prefix := redistest.UniqueName(t)
	rdb := redistest.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	for _, q := range []string{"r", "d"} {
		_, err = insp.CreateQueue(t.Context(), q, pipeline.QueueOptions{})
		require.NoError(t, err)
	}
	one, reject, drop := 1, pipeline.FullReject, pipeline.FullDropOldest
	_, err = insp.UpdateQueue(t.Context(), "r", pipeline.QueuePatch{MaxWaiting: &one, FullPolicy: &reject})
	require.NoError(t, err)
	_, err = insp.UpdateQueue(t.Context(), "d", pipeline.QueuePatch{MaxWaiting: &one, FullPolicy: &drop})
	require.NoError(t, err)
	for range 3 {
		_, err := client.Enqueue(t.Context(), "d", pipeline.Task{Type: "t"})
		require.NoError(t, err)
		_, err = client.Enqueue(t.Context(), "r", pipeline.Task{Type: "t"})
		require.True(t, err == nil || errors.Is(err, pipeline.ErrQueueFull), "%v", err)
	}
	qc, err := metrics.NewQueueCollector(insp, metrics.QueueCollectorConfig{Queues: []string{"r", "d"}})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(qc))
	require.Equal(t, 2.0, value(t, reg, "conveyor_queue_rejected_full_total", "queue", "r"))
	require.Equal(t, 2.0, value(t, reg, "conveyor_queue_dropped_full_total", "queue", "d"))
	require.Equal(t, 0.0, value(t, reg, "conveyor_queue_dropped_full_total", "queue", "r"))
}

// conveyor_queue_group_waiting counts a queue's jobs waiting for a place in their group's
// window; they are queued jobs too.
func TestQueueCollectorGroupWaiting(t *testing.T) {
	t.Parallel()
	prefix := redistest.UniqueName(t)
	rdb := redistest.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	_, err = client.Enqueue(t.Context(), "a", pipeline.Task{Type: "t"}, pipeline.WithGroup("g"))
	require.NoError(t, err)
	require.NoError(t, insp.SetGroups(t.Context(), "a", pipeline.GroupChange{Window: 1}))
	for range 3 {
		_, err = client.Enqueue(t.Context(), "a", pipeline.Task{Type: "t"}, pipeline.WithGroup("g"))
		require.NoError(t, err)
	}
	qc, err := metrics.NewQueueCollector(insp, metrics.QueueCollectorConfig{})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(qc))
	require.Equal(t, 3.0, value(t, reg, "conveyor_queue_group_waiting", "queue", "a"))
	require.Equal(t, 4.0, value(t, reg, "conveyor_queue_jobs", "queue", "a", "state", "queued"))
}

// conveyor_queue_jobs_waiting counts a queue's jobs by why they wait, with a series for every
// reason (0 when none waits for it), so a reason's series never vanishes: a queue no live
// worker reads (issue 33's "emials").
func TestQueueCollectorWaiting(t *testing.T) {
	t.Parallel()
	prefix := redistest.UniqueName(t)
	rdb := redistest.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	_, err = client.Enqueue(t.Context(), "emials", pipeline.Task{Type: "send"})
	require.NoError(t, err)
	_, err = client.Enqueue(t.Context(), "emials", pipeline.Task{Type: "send"}, pipeline.WithDelay(time.Hour))
	require.NoError(t, err)
	qc, err := metrics.NewQueueCollector(insp, metrics.QueueCollectorConfig{})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(qc))
	require.Equal(t, 1.0, value(t, reg, "conveyor_queue_jobs_waiting", "queue", "emials", "reason", "no_worker_queue"))
	require.Equal(t, 1.0, value(t, reg, "conveyor_queue_jobs_waiting", "queue", "emials", "reason", "due"))
	require.Equal(t, 0.0, value(t, reg, "conveyor_queue_jobs_waiting", "queue", "emials", "reason", "ready"))
	require.Equal(t, len(status.Reasons()), testutil.CollectAndCount(qc, "conveyor_queue_jobs_waiting"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}
