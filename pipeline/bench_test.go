package pipeline_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
)

// Benchmarks run against the package's private redis-server. Rerun with
//
//	go test -run=NONE -bench=. -benchtime=20000x ./pipeline/
//
// jobs/s is the number to compare; docs/BENCHMARKS.md records it and the peer comparison.

var payload100 = []byte(`{"user":12345,"action":"send-welcome-email","template":"welcome-v2","locale":"en-GB","pad":"xxxxxxx"}`)

func BenchmarkEnqueue(b *testing.B) {
	benchEnqueue(b, func(*redis.Client) string { return redistest.UniqueName(b) })
}

// benchEnqueue publishes b.N jobs one at a time into the queue made by queue, reporting jobs/s
// and Redis's script time a job.
func benchEnqueue(b *testing.B, queue func(rdb *redis.Client) string) {
	rdb := redistest.Client(b)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(b, err)
	q := queue(rdb)
	ctx := context.Background()
	b.ReportAllocs()
	u0 := scriptUsec(b, rdb)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Enqueue(ctx, q, pipeline.Task{Type: "noop", Payload: payload100}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(scriptUsec(b, rdb)-u0)/float64(b.N), "redis-us/job")
}

func BenchmarkEnqueueBatch(b *testing.B) {
	benchEnqueueBatch(b, func(*redis.Client) string { return redistest.UniqueName(b) })
}

// benchEnqueueBatch publishes b.N jobs in batches of 1,000 into the queue made by queue,
// reporting jobs/s and Redis's script time a job.
func benchEnqueueBatch(b *testing.B, queue func(rdb *redis.Client) string) {
	rdb := redistest.Client(b)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(b, err)
	q := queue(rdb)
	ctx := context.Background()
	tasks := make([]pipeline.Task, 1000)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "noop", Payload: payload100}
	}
	b.ReportAllocs()
	u0 := scriptUsec(b, rdb)
	b.ResetTimer()
	for done := 0; done < b.N; done += len(tasks) {
		n := min(len(tasks), b.N-done)
		if _, err := c.EnqueueBatch(ctx, q, tasks[:n]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(scriptUsec(b, rdb)-u0)/float64(b.N), "redis-us/job")
}

// BenchmarkEnqueueBatchBounded is BenchmarkEnqueueBatch into a queue with a bound that is set
// and never reached (docs/BENCHMARKS.md, "Bounded queues"): the cost of the count that
// enqueue.lua makes once a call.
func BenchmarkEnqueueBatchBounded(b *testing.B) {
	benchEnqueueBatch(b, func(rdb *redis.Client) string { return boundedBenchQueue(b, rdb) })
}

// BenchmarkEnqueueBounded is BenchmarkEnqueue into a queue with a bound set and never reached:
// a bounded single publish goes through enqueue.lua, not the one-job script.
func BenchmarkEnqueueBounded(b *testing.B) {
	benchEnqueue(b, func(rdb *redis.Client) string { return boundedBenchQueue(b, rdb) })
}

// BenchmarkEnqueueBoundedPaired measures what BenchmarkEnqueue and BenchmarkEnqueueBounded
// compare, on one redis-server and in one process: blocks of 500 single publishes go to an
// unbounded queue and to a bounded one in turn, each block's script time (INFO commandstats,
// evalsha) read apart. A burst of load from another process then hits both sides of a pair
// alike, where two runs of their own each meet their own: on a shared machine the median of
// the pairs' ratios holds still where the runs' ratio swings by tens of percent
// (docs/BENCHMARKS.md, "Bounded queues").
func BenchmarkEnqueueBoundedPaired(b *testing.B) {
	rdb := redistest.Client(b)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(b, err)
	ctx := context.Background()
	// Both queues made alike (CreateQueue), one of them then bounded: the pair differs in the
	// bound alone.
	bound, free := boundedBenchQueue(b, rdb), redistest.UniqueName(b)+"-free"
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(b, err)
	_, err = insp.CreateQueue(ctx, free, pipeline.QueueOptions{})
	require.NoError(b, err)
	const block = 500
	run := func(q string, n int) int64 {
		u0 := commandUsec(b, rdb, "evalsha")
		for range n {
			if _, err := c.Enqueue(ctx, q, pipeline.Task{Type: "noop", Payload: payload100}); err != nil {
				b.Fatal(err)
			}
		}
		return commandUsec(b, rdb, "evalsha") - u0
	}
	var freeUs, boundUs int64
	var ratios []float64
	b.ResetTimer()
	for done := 0; done < b.N; done += 2 * block {
		n := max(1, min(block, (b.N-done)/2))
		f, bd := run(free, n), run(bound, n)
		freeUs, boundUs = freeUs+f, boundUs+bd
		if f > 0 {
			ratios = append(ratios, float64(bd)/float64(f))
		}
	}
	b.StopTimer()
	if len(ratios) == 0 {
		return
	}
	slices.Sort(ratios)
	jobs := float64(max(2, b.N) / 2)
	b.ReportMetric(float64(freeUs)/jobs, "unbounded-script-us/job")
	b.ReportMetric(float64(boundUs)/jobs, "bounded-script-us/job")
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
}

// boundedBenchQueue makes a queue bounded far above what a benchmark publishes.
func boundedBenchQueue(b *testing.B, rdb *redis.Client) string {
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(b, err)
	q := redistest.UniqueName(b)
	_, err = insp.CreateQueue(context.Background(), q, pipeline.QueueOptions{})
	require.NoError(b, err)
	bound := 1 << 30
	_, err = insp.UpdateQueue(context.Background(), q, pipeline.QueuePatch{MaxWaiting: &bound})
	require.NoError(b, err)
	return q
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

// BenchmarkLimitsNotLimiting pairs, in each run, a drain of b.N no-op jobs from one queue
// without limits (plain) with one from a queue with a rate and a concurrency limit that the
// drain never reaches (limits): what admission costs when it defers nothing. Each drain has a
// server of its own (a server that kept the other's jobs would be slower for the second), and
// the order alternates from run to run. limits/plain is the ratio of their jobs/s, the number
// to read on a shared machine (docs/BENCHMARKS.md, "Issue 18: limits"):
//
//	go test -run XXX -bench BenchmarkLimitsNotLimiting -benchtime 20000x -count 3 ./pipeline/
func BenchmarkLimitsNotLimiting(b *testing.B) {
	notLimiting := []pipeline.Limit{{Rate: pipeline.MaxLimitRate, Interval: time.Second, Concurrency: 100_000}}
	pairedDrains(b, flowSpec{queues: 1}, flowSpec{queues: 1, limits: notLimiting}, "limits/plain")
}

// BenchmarkFlowNotLimiting is the benchmark (a): a worker on 3 queues weighted 6, 3
// and 1, each with a rate limit and a concurrency limit that are never reached, against the
// plain worker on one queue, both draining b.N no-op jobs published first (drain) and
// consuming them while 4 goroutines publish them (live); drain-no-limits is the drain of the
// 3 queues without limits, to tell the queues' cost from the limits'. The ratios flow/plain
// are the numbers to read (the target: 0.9 or more):
//
//	go test -run XXX -bench BenchmarkFlowNotLimiting -benchtime 20000x -count 3 ./pipeline/
func BenchmarkFlowNotLimiting(b *testing.B) {
	// Two scopes, so each job is held to both: the queue's rate and its type's concurrency.
	notLimiting := []pipeline.Limit{
		{Rate: pipeline.MaxLimitRate, Interval: time.Second},
		{Type: "noop", Concurrency: 100_000},
	}
	flow := flowSpec{queues: 3, weights: []int{6, 3, 1}, limits: notLimiting}
	for _, live := range []bool{false, true} {
		name := "drain"
		if live {
			name = "live"
		}
		b.Run(name, func(b *testing.B) {
			pairedDrains(b, flowSpec{queues: 1, live: live}, flowSpec{queues: flow.queues, weights: flow.weights,
				limits: flow.limits, live: live}, "flow/plain")
		})
	}
	// The same drain without the limits: what the 3 weighted queues cost alone.
	b.Run("drain-no-limits", func(b *testing.B) {
		pairedDrains(b, flowSpec{queues: 1}, flowSpec{queues: flow.queues, weights: flow.weights}, "flow/plain")
	})
}

// BenchmarkEncryptionCost is issue 35's cost of encryption at rest: jobs of 1 KiB payloads
// whose handler returns them as 1 KiB results, published while one worker consumes them
// (live: the publish's seal, the worker's open and the result's seal) and drained after they
// were published (drain: the worker's side), with the keys against without. keys/plain is
// the ratio of their jobs/s (the target: 0.9 or more):
//
//	go test -run XXX -bench BenchmarkEncryptionCost -benchtime 20000x -count 3 ./pipeline/
func BenchmarkEncryptionCost(b *testing.B) {
	k, err := keyring.Parse("k1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, keyring.KeySize)))
	require.NoError(b, err)
	kib := []byte(`{"pad":"` + strings.Repeat("x", 1024-10) + `"}`)
	for _, live := range []bool{true, false} {
		name := "drain"
		if live {
			name = "live"
		}
		b.Run(name, func(b *testing.B) {
			pairedDrains(b, flowSpec{queues: 1, live: live, payload: kib, echo: true},
				flowSpec{queues: 1, live: live, payload: kib, echo: true, keys: k}, "keys/plain")
		})
	}
}

// flowSpec is one side of a paired benchmark: how many queues the worker reads (the jobs
// spread evenly over them), their weights (none: first come, first served), the limits set on
// each, and whether the jobs are published while the worker runs (live) or before it starts.
type flowSpec struct {
	queues  int
	weights []int
	limits  []pipeline.Limit
	live    bool
	// payload is the jobs' payload (payload100 when nil); keys encrypts at rest (the Client's
	// and the worker's); echo makes the handler return the payload as its result.
	payload []byte
	keys    *keyring.Keyring
	echo    bool
}

// drainResult is what one drain measured: jobs/s, and the CPU time per job of the server and
// of this process (the worker, and the publishers when live).
type drainResult struct{ rate, redisCPU, clientCPU float64 }

// pairedDrains runs base and other in each run, each on a fresh server, alternating their
// order, and reports both rates, their ratio (named ratio) and the CPU per job of each.
func pairedDrains(b *testing.B, base, other flowSpec, ratio string) {
	b.Helper()
	if b.N > 1 { // not the benchmark's first, one-job run
		if pairs.n == 0 {
			// The first drain of a process runs slower (the heap and the goroutine stacks
			// grow to their working size), whichever side it is: one drain, not measured, first.
			runFlow(b, redistest.Start(b).Client(b), base, b.N)
		}
		pairs.n++
	}
	specs := []flowSpec{base, other}
	var res [2]drainResult
	order := []int{0, 1}
	if pairs.n%2 == 0 {
		order = []int{1, 0}
	}
	for _, k := range order {
		res[k] = runFlow(b, redistest.Start(b).Client(b), specs[k], b.N)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(res[0].rate, "base-jobs/s")
	b.ReportMetric(res[1].rate, "jobs/s")
	b.ReportMetric(res[1].rate/res[0].rate, ratio)
	b.ReportMetric(res[0].redisCPU, "base-redis-cpu-us/job")
	b.ReportMetric(res[1].redisCPU, "redis-cpu-us/job")
	b.ReportMetric(res[0].clientCPU, "base-client-cpu-us/job")
	b.ReportMetric(res[1].clientCPU, "client-cpu-us/job")
}

// pairs counts pairedDrains' runs, to alternate their order.
var pairs struct{ n int }

// runFlow publishes n no-op jobs over spec's queues (before the worker starts, or while it
// runs when spec.live) and measures one worker consuming them all.
func runFlow(b *testing.B, rdb *redis.Client, spec flowSpec, n int) drainResult {
	ctx := context.Background()
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Keys: spec.keys})
	require.NoError(b, err)
	in, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(b, err)
	cfg := pipeline.WorkerConfig{Concurrency: 200, ReadBatch: 200, Keys: spec.keys}
	payload := payload100
	if spec.payload != nil {
		payload = spec.payload
	}
	counts := make([]int, spec.queues)
	for k := range spec.queues {
		q := fmt.Sprintf("q%d", k)
		cfg.Queues = append(cfg.Queues, q)
		if spec.weights != nil {
			if cfg.QueueWeights == nil {
				cfg.QueueWeights = map[string]int{}
			}
			cfg.QueueWeights[q] = spec.weights[k]
		}
		counts[k] = n / spec.queues
		if k < n%spec.queues {
			counts[k]++
		}
		if len(spec.limits) > 0 {
			_, err := in.CreateQueue(ctx, q, pipeline.QueueOptions{})
			require.NoError(b, err)
		}
		for _, l := range spec.limits {
			require.NoError(b, in.SetLimit(ctx, q, l))
		}
	}
	// publish sends the jobs in batches of 100 from 4 goroutines, round-robin over the queues.
	publish := func() {
		tasks := make([]pipeline.Task, 100)
		for i := range tasks {
			tasks[i] = pipeline.Task{Type: "noop", Payload: payload}
		}
		var mu sync.Mutex
		left := append([]int(nil), counts...)
		next := 0
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					mu.Lock()
					q, m := -1, 0
					for range len(left) {
						k := next % len(left)
						next++
						if left[k] > 0 {
							q, m = k, min(left[k], len(tasks))
							left[k] -= m
							break
						}
					}
					mu.Unlock()
					if q < 0 {
						return
					}
					if _, err := c.EnqueueBatch(ctx, cfg.Queues[q], tasks[:m]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	if !spec.live {
		publish()
	}
	w, err := pipeline.NewWorker(rdb, cfg)
	require.NoError(b, err)
	w.Handle("noop", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		if spec.echo {
			return j.Payload, nil
		}
		return nil, nil
	})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() { defer close(done); _ = w.Run(wctx) }()
	<-w.Ready()
	redis0, client0, t0 := redisCPU(b, rdb), processCPU(), time.Now()
	if spec.live {
		publish()
	}
	for k, q := range cfg.Queues {
		stats := keys.New(keys.DefaultPrefix, q).Stats()
		for {
			got, _ := rdb.HGet(ctx, stats, keys.StatCompleted).Int()
			if got >= counts[k] {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	elapsed := time.Since(t0)
	return drainResult{
		rate:      float64(n) / elapsed.Seconds(),
		redisCPU:  float64((redisCPU(b, rdb) - redis0).Microseconds()) / float64(n),
		clientCPU: float64((processCPU() - client0).Microseconds()) / float64(n),
	}
}

// drain publishes b.N no-op jobs, then times one worker draining them, and reports jobs/s and
// the server's time per job.
func drain(b *testing.B, rdb *redis.Client) { drainWith(b, rdb, nil) }

// drainWith is drain calling prepare with the queue once its jobs are published, before the
// worker starts.
func drainWith(b *testing.B, rdb *redis.Client, prepare func(q string)) {
	drainHandler(b, rdb, prepare, func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })
}

// drainHandler is drainWith with h as the jobs' handler.
func drainHandler(b *testing.B, rdb *redis.Client, prepare func(q string), h pipeline.HandlerFunc) {
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
	w.Handle("noop", h)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	redisCPU0, clientCPU0 := redisCPU(b, rdb), processCPU()
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
	// CPU spent per job by the server and by this process (the worker): on a machine whose
	// cores are busy, throughput follows their sum more than any latency.
	b.ReportMetric(float64((redisCPU(b, rdb)-redisCPU0).Microseconds())/float64(b.N), "redis-cpu-us/job")
	b.ReportMetric(float64((processCPU()-clientCPU0).Microseconds())/float64(b.N), "client-cpu-us/job")
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

// redisCPU is the CPU time the server has used (INFO cpu, user and system).
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for line := range strings.SplitSeq(info, "\r\n") {
		for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, _ := strconv.ParseFloat(v, 64)
				sec += x
			}
		}
	}
	return time.Duration(sec * float64(time.Second))
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
