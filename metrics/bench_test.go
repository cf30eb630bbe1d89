package metrics_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/metrics"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/stream"
)

// BenchmarkWorker is the cost of the metrics: one worker drains b.N no-op jobs (100-byte
// payloads, concurrency 200) bare, and with everything the CLI's --metrics-addr wires in
// (middleware, hooks, the Redis hook, the queue collector) and a scrape every second. It
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
	c := pipeline.NewClient(rdb, pipeline.ClientConfig{})
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
		qc, err := metrics.NewQueueCollector(pipeline.NewInspector(rdb, pipeline.InspectorConfig{}),
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
	w := pipeline.NewWorker(rdb, cfg)
	if m != nil {
		w.Use(m.Middleware)
	}
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

// BenchmarkMiddleware is the middleware's own work per job (label lookup, a counter, two
// histograms, the entry's time), around a handler that does nothing, from 200 goroutines as
// a worker's slots call it.
func BenchmarkMiddleware(b *testing.B) {
	m, err := metrics.NewWorker(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	h := m.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	q := keys.New(keys.DefaultPrefix, "bench")
	b.SetParallelism(100)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		msg := message.NewMessage("id", payload100)
		msg.Metadata[stream.StreamKey] = q.Stream()
		msg.Metadata[stream.EntryIDKey] = strconv.FormatInt(time.Now().UnixMilli(), 10) + "-0"
		msg.Metadata[pipeline.MetaType] = "noop"
		for pb.Next() {
			_, _ = h(msg)
		}
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
