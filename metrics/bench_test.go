package metrics_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/metrics"
	"github.com/conveyorq/conveyor/pipeline"
)

// BenchmarkWorker is the cost of the metrics: one worker drains b.N no-op jobs (100-byte
// payloads, concurrency 200) bare, and with everything the CLI's --metrics-addr wires in
// (the hooks, the Redis hook, the queue collector) and a scrape every second. It
// reports jobs/s and the process's CPU time per job (the worker's, plus the loop that waits
// for it, alike in both). The VM drifts and is shared, so run the two in pairs of fresh
// processes (each on its own private redis-server), alternating which goes first; the
// command is in docs/BENCHMARKS.md ("Metrics cost") with the numbers.
func BenchmarkWorker(b *testing.B) {
	b.Run("bare", func(b *testing.B) { drain(b, false) })
	b.Run("metrics", func(b *testing.B) { drain(b, true) })
}

var payload100 = []byte(`{"user":12345,"action":"send-welcome-email","template":"welcome-v2","locale":"en-GB","pad":"xxxxxxx"}`)

func drain(b *testing.B, withMetrics bool) {
	rdb := redistest.Client(b)
	q := redistest.UniqueName(b)
	ctx := context.Background()
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(b, err)
	jobtest.Fill(b, c, q, "noop", payload100, b.N)
	cfg := pipeline.WorkerConfig{Queues: []string{q}, Concurrency: 200, ReadBatch: 200}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var m *metrics.Worker
	if withMetrics {
		reg := prometheus.NewRegistry()
		var err error
		if m, err = metrics.NewWorker(reg); err != nil {
			b.Fatal(err)
		}
		rdb.AddHook(m.RedisHook())
		cfg.Hooks = m.Hooks()
		insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
		require.NoError(b, err)
		qc, err := metrics.NewQueueCollector(insp,
			metrics.QueueCollectorConfig{Queues: cfg.Queues})
		if err != nil {
			b.Fatal(err)
		}
		reg.MustRegister(qc)
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case <-t.C:
					_, _ = reg.Gather()
				}
			}
		}()
	}
	w, err := pipeline.NewWorker(rdb, cfg)
	require.NoError(b, err)
	w.Handle("noop", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })
	cpu0 := cpuTime()
	b.ResetTimer()
	go func() { _ = w.Run(wctx) }()
	jobtest.WaitCompleted(rdb, "", q, b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/job")
}

// cpuTime is the CPU time (user and system) the process has used: the worker's cost per job,
// which other processes on a busy machine disturb less than its throughput.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkJobSeries is the job series' work per attempt: what pipeline.WorkerHooks.Attempts
// does with a chunk of 50 outcomes of one (queue, type), told from two goroutines as the
// worker's two finish writers tell them. pipeline's BenchmarkAttemptsWritten is the other
// half: making the Attempts of a written chunk.
func BenchmarkJobSeries(b *testing.B) {
	m, err := metrics.NewWorker(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	hook := m.Hooks().Attempts
	const chunk = 50
	began := time.Now()
	b.SetParallelism(1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		batch := make([]pipeline.Attempt, chunk)
		for i := range batch {
			batch[i] = pipeline.Attempt{Queue: "bench", Type: "noop", Began: began,
				Took: time.Duration(i) * 100 * time.Microsecond, Entered: began.Add(-time.Duration(i) * time.Millisecond)}
		}
		n := 0
		for pb.Next() {
			// One call per chunk; each iteration is one attempt.
			if n++; n == chunk {
				hook(batch)
				n = 0
			}
		}
		hook(batch[:n])
	})
}

// BenchmarkRedisHook is the Redis hook's work per call that succeeds (a worker makes a few
// calls per batch of jobs, not per job).
func BenchmarkRedisHook(b *testing.B) {
	m, err := metrics.NewWorker(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	next := func(context.Context, redis.Cmder) error { return nil }
	h := m.RedisHook().ProcessHook(next)
	cmd := redis.NewStatusCmd(context.Background(), "ping")
	b.ReportAllocs()
	for b.Loop() {
		_ = h(context.Background(), cmd)
	}
}
