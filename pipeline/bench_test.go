package pipeline_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
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
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(b, err)
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
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(b, err)
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
	drain(b, redistest.Client(b))
}

// BenchmarkEndToEndEvents is BenchmarkEndToEnd with the scripts' job events off (none) and on
// (sharded, the default on Redis 7). redis-us/job is the server's own time (INFO commandstats)
// per job, which a busy client machine disturbs less than jobs/s; spublish/job is counted.
// Run the two in alternating order, each in a process of its own (docs/BENCHMARKS.md, "Job
// events and long polls", has the loop): the first drain of a process runs on a fresher server.
func BenchmarkEndToEndEvents(b *testing.B) {
	for _, m := range []events.Mode{events.None, events.Sharded} {
		b.Run("events="+m.String(), func(b *testing.B) {
			rdb := redistest.Client(b)
			events.SetMode(rdb, m)
			drain(b, rdb)
		})
	}
}

// BenchmarkLimitsNotLimiting is BenchmarkEndToEnd without limits (plain) and with a rate and
// a concurrency limit on the queue that the drain never reaches (limits): what admission
// costs when it defers nothing. Run both in one process, alternating (docs/BENCHMARKS.md,
// "Issue 18: limits").
func BenchmarkLimitsNotLimiting(b *testing.B) {
	for _, limited := range []bool{false, true} {
		name := "plain"
		if limited {
			name = "limits"
		}
		b.Run(name, func(b *testing.B) {
			rdb := redistest.Client(b)
			drainWith(b, rdb, func(q string) {
				if !limited {
					return
				}
				in, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
				require.NoError(b, err)
				require.NoError(b, in.SetLimit(context.Background(), q, pipeline.Limit{
					Rate: pipeline.MaxLimitRate, Interval: time.Second, Concurrency: 100_000}))
			})
		})
	}
}

// drain publishes b.N no-op jobs, then times one worker draining them, and reports jobs/s and
// the server's time per job.
func drain(b *testing.B, rdb *redis.Client) { drainWith(b, rdb, nil) }

// drainWith is drain calling prepare with the queue once its jobs are published, before the
// worker starts.
func drainWith(b *testing.B, rdb *redis.Client, prepare func(q string)) {
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(b, err)
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
	if prepare != nil {
		prepare(q)
	}
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{q}, Concurrency: 200, ReadBatch: 200})
	require.NoError(b, err)
	w.Handle("noop", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
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
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec, publishes int64
	for line := range strings.SplitSeq(info, "\r\n") {
		if _, v, ok := strings.Cut(line, ",usec="); ok {
			v, _, _ = strings.Cut(v, ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			usec += n
		}
		if v, ok := strings.CutPrefix(line, "cmdstat_spublish:calls="); ok {
			v, _, _ = strings.Cut(v, ",")
			publishes, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	b.ReportMetric(float64(usec)/float64(b.N), "redis-us/job")
	// Counted, not timed: how many SPUBLISH calls the scripts made per job.
	b.ReportMetric(float64(publishes)/float64(b.N), "spublish/job")
}
