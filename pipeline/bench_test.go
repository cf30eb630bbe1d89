package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// Benchmarks run against the package's private redis-server. Rerun with
//
//	go test -run=NONE -bench=. -benchtime=20000x ./pipeline/
//
// jobs/s is the number to compare; docs/BENCHMARKS.md records it and the peer comparison.

var payload100 = []byte(`{"user":12345,"action":"send-welcome-email","template":"welcome-v2","locale":"en-GB","pad":"xxxxxxx"}`)

func BenchmarkEnqueue(b *testing.B) {
	rdb := redistest.Client(b)
	c := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	q := redistest.UniqueName(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Enqueue(ctx, q, pipeline.Task{Type: "noop", Payload: payload100}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

func BenchmarkEnqueueBatch(b *testing.B) {
	rdb := redistest.Client(b)
	c := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	q := redistest.UniqueName(b)
	ctx := context.Background()
	tasks := make([]pipeline.Task, 1000)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "noop", Payload: payload100}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += len(tasks) {
		n := min(len(tasks), b.N-done)
		if _, err := c.EnqueueBatch(ctx, q, tasks[:n]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkEndToEnd publishes b.N no-op jobs first, then times one worker draining them.
func BenchmarkEndToEnd(b *testing.B) {
	rdb := redistest.Client(b)
	c := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	q := redistest.UniqueName(b)
	ctx := context.Background()
	tasks := make([]pipeline.Task, 1000)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "noop", Payload: payload100}
	}
	for done := 0; done < b.N; done += len(tasks) {
		if _, err := c.EnqueueBatch(ctx, q, tasks[:min(len(tasks), b.N-done)]); err != nil {
			b.Fatal(err)
		}
	}
	w := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{q}, Concurrency: 200, ReadBatch: 200})
	w.Handle("noop", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.ResetTimer()
	go func() { _ = w.Run(wctx) }()
	stats := keys.New(keys.DefaultPrefix, q).Stats()
	for {
		n, _ := rdb.HGet(ctx, stats, keys.StatCompleted).Int()
		if n >= b.N {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
