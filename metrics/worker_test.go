package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/metrics"
	"github.com/conveyorq/conveyor/pipeline"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// value reads one series from reg: the counter's or gauge's value, or a histogram's sample
// count; 0 when the series does not exist.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			want := map[string]string{}
			for i := 0; i+1 < len(labels); i += 2 {
				want[labels[i]] = labels[i+1]
			}
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue metric
				}
				delete(want, l.GetName())
			}
			if len(want) > 0 {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// A worker with the metrics wired in counts its jobs by queue, type and outcome (a job whose
// type has no handler under TypeUnhandled), times them, measures their queue latency, and
// counts its scheduler's promotions and its recovery scans. The series pass promlint. The
// deprecated Middleware, still added here as programs written for it do, counts nothing twice.
func TestWorkerMetrics(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	queue := redistest.UniqueName(t)
	ctx := t.Context()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	m, err := metrics.NewWorker(reg)
	require.NoError(t, err)
	rdb.AddHook(m.RedisHook())
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{queue}, Logger: testLogger(t),
		Backoff: pipeline.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond},
		Hooks:   m.Hooks(), RecoveryInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	w.Use(m.Middleware)
	w.Handle("ok", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })
	w.Handle("flaky", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		if j.Attempt == 1 {
			return nil, errors.New("first attempt fails")
		}
		return nil, nil
	})
	w.Handle("dead", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, errors.New("always") })

	var ids []string
	for _, task := range []struct {
		typ  string
		opts []pipeline.Option
	}{{"ok", nil}, {"ok", nil}, {"ok", []pipeline.Option{pipeline.WithDelay(20 * time.Millisecond)}},
		{"flaky", nil}, {"flaky", nil},
		{"dead", []pipeline.Option{pipeline.WithMaxRetries(0)}}, {"dead", []pipeline.Option{pipeline.WithMaxRetries(0)}},
		{"nobody-handles-this", []pipeline.Option{pipeline.WithMaxRetries(0)}}} {
		j, err := client.Enqueue(ctx, queue, pipeline.Task{Type: task.typ}, task.opts...)
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	jobtest.RunWorker(t, w)
	for _, id := range ids {
		require.Eventually(t, func() bool {
			j, err := client.Get(ctx, queue, id)
			return err == nil && j.Status.Final()
		}, 10*time.Second, 5*time.Millisecond)
	}
	require.Eventually(t, func() bool { return value(t, reg, "conveyor_recovery_scans_total", "queue", queue) >= 1 },
		10*time.Second, 5*time.Millisecond)

	jobs := func(typ, outcome string) float64 {
		return value(t, reg, "conveyor_jobs_total", "queue", queue, "type", typ, "outcome", outcome)
	}
	// An outcome is counted just after it is written, so maybe after its status was read.
	require.Eventually(t, func() bool {
		return value(t, reg, "conveyor_job_queue_latency_seconds", "queue", queue) == 10 &&
			value(t, reg, "conveyor_job_duration_seconds", "queue", queue, "type", "dead") == 2
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 3.0, jobs("ok", "completed"))
	require.Equal(t, 2.0, jobs("flaky", "retry"))
	require.Equal(t, 2.0, jobs("flaky", "completed"))
	require.Equal(t, 2.0, jobs("dead", "dead"))
	require.Equal(t, 0.0, jobs("dead", "retry"))
	require.Equal(t, 1.0, jobs(metrics.TypeUnhandled, "dead"))
	require.Equal(t, 3.0, value(t, reg, "conveyor_job_duration_seconds", "queue", queue, "type", "ok"))
	require.Equal(t, 10.0, value(t, reg, "conveyor_job_queue_latency_seconds", "queue", queue),
		"one latency per attempt: 8 jobs, 2 retries")
	// The delayed job and the two retries went through the scheduler.
	require.Equal(t, 3.0, value(t, reg, "conveyor_scheduler_promoted_total", "queue", queue))
	require.GreaterOrEqual(t, value(t, reg, "conveyor_scheduler_lag_seconds", "queue", queue), 1.0)
	require.Equal(t, 0.0, value(t, reg, "conveyor_recovered_jobs_total", "queue", queue, "result", "requeued"))
	require.Equal(t, 0.0, value(t, reg, "conveyor_redis_errors_total", "kind", "reply"))

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// The Redis hook counts calls that failed, by kind, and not the answers that are no trouble.
func TestRedisHookCountsErrors(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	m, err := metrics.NewWorker(reg)
	require.NoError(t, err)
	rdb.AddHook(m.RedisHook())
	key := redistest.UniqueName(t)

	require.ErrorIs(t, rdb.Get(ctx, key).Err(), redis.Nil)
	// A recoverer scanning a queue before any worker created its group (a race at start-up)
	// is answered NOGROUP: an answer, not trouble.
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: key + ":stream", Values: []string{"f", "v"}}).Err())
	_, err = rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key + ":stream", Group: "g", Start: "-", End: "+", Count: 1}).Result()
	require.Error(t, err, "NOGROUP")
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, rdb.Get(canceled, key).Err())
	require.Zero(t, value(t, reg, "conveyor_redis_errors_total", "kind", "reply"))

	require.NoError(t, rdb.Set(ctx, key, "a string", 0).Err())
	require.Error(t, rdb.LPush(ctx, key, "x").Err(), "WRONGTYPE")
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, key, "x")
		p.LPush(ctx, key, "y")
		return nil
	})
	require.Error(t, err)
	require.Equal(t, 2.0, value(t, reg, "conveyor_redis_errors_total", "kind", "reply"), "one per call, a pipeline is one")

	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = dead.Close() })
	dead.AddHook(m.RedisHook())
	require.Error(t, dead.Ping(ctx).Err())
	require.Equal(t, 1.0, value(t, reg, "conveyor_redis_errors_total", "kind", "connection"))
}

// Two Workers cannot register on one registry: the second says why.
func TestNewWorkerTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := metrics.NewWorker(reg)
	require.NoError(t, err)
	_, err = metrics.NewWorker(reg)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "conveyor_jobs_total") || strings.Contains(err.Error(), "duplicate"), err.Error())
}

// A middleware that refuses a job returns an error of its own, which is counted as outcome
// "error" (the worker writes it as a failed attempt, which is not counted again).
func TestWorkerMetricsCountRefusals(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	queue := redistest.UniqueName(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.NewWorker(reg)
	require.NoError(t, err)
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{queue}, Logger: testLogger(t), Hooks: m.Hooks()})
	require.NoError(t, err)
	w.Use(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if msg.Metadata.Get("refuse") == "yes" {
				return nil, errors.New("rate limited")
			}
			return h(msg)
		}
	})
	w.Handle("ok", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	_, err = client.Enqueue(t.Context(), queue, pipeline.Task{Type: "ok", Metadata: map[string]string{"refuse": "yes"}},
		pipeline.WithMaxRetries(0))
	require.NoError(t, err)
	_, err = client.Enqueue(t.Context(), queue, pipeline.Task{Type: "ok"})
	require.NoError(t, err)
	jobtest.RunWorker(t, w)
	require.Eventually(t, func() bool {
		return value(t, reg, "conveyor_job_duration_seconds", "queue", queue, "type", "ok") == 2
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 1.0, value(t, reg, "conveyor_jobs_total", "queue", queue, "type", "ok", "outcome", metrics.OutcomeError))
	require.Equal(t, 1.0, value(t, reg, "conveyor_jobs_total", "queue", queue, "type", "ok", "outcome", metrics.OutcomeCompleted))
	require.Zero(t, value(t, reg, "conveyor_jobs_total", "queue", queue, "type", "ok", "outcome", "dead"))
	require.Equal(t, 2.0, value(t, reg, "conveyor_job_queue_latency_seconds", "queue", queue))
}
