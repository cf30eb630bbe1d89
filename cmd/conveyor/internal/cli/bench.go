package cli

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/keyspace"
	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newBenchCmd) }

type benchOptions struct {
	jobs         int
	payloadBytes int
	concurrency  int
	partitions   int
	producers    int
	mode         string
	timeout      time.Duration
	json         bool
	keep         bool
}

// benchReport is the --json output.
type benchReport struct {
	Mode         string  `json:"mode"`
	Jobs         int     `json:"jobs"`
	PayloadBytes int     `json:"payload_bytes"`
	Concurrency  int     `json:"concurrency"`
	Partitions   int     `json:"partitions"`
	Producers    int     `json:"producers"`
	EnqueuePerS  float64 `json:"enqueue_per_s"`
	JobsPerS     float64 `json:"jobs_per_s"`
	ElapsedS     float64 `json:"elapsed_s"`
	// LatencyMS holds the publish-to-start latency percentiles p50, p90, p99 and max in
	// milliseconds, to the microsecond (0.42 is 420 µs).
	LatencyMS map[string]float64 `json:"latency_ms"`
}

func newBenchCmd(a *app) *cobra.Command {
	o := benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench [--jobs N] [--payload-bytes B] [--concurrency C] [--mode live|drain] [--partitions P] [--producers N]",
		Short: "Measure throughput and latency on your Redis",
		Long: `Measure Conveyor on the configured Redis: publish --jobs no-op jobs of --payload-bytes to a
fresh queue, run them on one in-process worker of --concurrency, and report the publish rate,
the throughput and the latency from publish to handler start (p50, p90, p99, max), in
milliseconds to the hundredth (0.42 ms); with --json, "latency_ms" holds them as numbers to
the thousandth (microseconds).

--mode live (the default) publishes while the worker runs, as in production; --mode drain
publishes everything first, then times the worker draining the backlog (latency then mostly
measures the backlog). The queue's keys are deleted afterwards unless --keep is given.

--partitions P makes the benchmark queue one of P partitions (see 'conveyor queues create'),
so that on Redis Cluster it spreads over up to P shards; --producers N publishes from N
goroutines at once (batches of 100 each), so that one producer's round trips do not cap the
rate the shards could take.

For the side-by-side comparison with asynq, watermill-redisstream and raw go-redis, see
bench/ and docs/BENCHMARKS.md.`,
		Example: `  conveyor bench
  conveyor bench --redis redis://my-redis:6379/0 --jobs 200000 --concurrency 200 --payload-bytes 1024
  conveyor bench --mode drain --json
  conveyor bench --cluster --redis redis://node1:7000 --partitions 3 --producers 4`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return a.bench(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVarP(&o.jobs, "jobs", "n", 100_000, "jobs to run")
	f.IntVar(&o.payloadBytes, "payload-bytes", 100, "payload size of each job (at least 8)")
	f.IntVarP(&o.concurrency, "concurrency", "c", 200, "the worker's concurrency")
	f.IntVar(&o.partitions, "partitions", 1, fmt.Sprintf("partitions of the benchmark queue, 1 to %d", maxPartitions))
	f.IntVar(&o.producers, "producers", 1, "goroutines publishing at once")
	f.StringVar(&o.mode, "mode", "live", "live (publish while the worker runs) or drain (publish first)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	f.BoolVar(&o.json, "json", false, "print one JSON object instead of a table")
	f.BoolVar(&o.keep, "keep", false, "keep the benchmark queue's keys")
	return cmd
}

func (o benchOptions) validate() error {
	var errs []error
	if o.jobs < 1 {
		errs = append(errs, usageErrorf("--jobs must be at least 1"))
	}
	if o.payloadBytes < 8 || o.payloadBytes > maxPayloadBytes {
		errs = append(errs, usageErrorf("--payload-bytes must be 8 to %d", maxPayloadBytes))
	}
	if o.concurrency < 1 {
		errs = append(errs, usageErrorf("--concurrency must be at least 1"))
	}
	if o.partitions < 1 || o.partitions > maxPartitions {
		errs = append(errs, usageErrorf("--partitions must be 1 to %d", maxPartitions))
	}
	if o.producers < 1 {
		errs = append(errs, usageErrorf("--producers must be at least 1"))
	}
	if o.mode != "live" && o.mode != "drain" {
		errs = append(errs, usageErrorf("--mode must be live or drain, not %q", o.mode))
	}
	if o.timeout <= 0 {
		errs = append(errs, usageErrorf("--timeout must be positive"))
	}
	return errors.Join(errs...)
}

func (a *app) bench(ctx context.Context, o benchOptions) (err error) {
	rdb, err := a.redis()
	if err != nil {
		return err
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", redactURL(a.redisURL), err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	queue, err := benchQueue(ctx, rdb, a.prefix, o.partitions)
	if err != nil {
		return err
	}
	if !o.keep {
		defer func() {
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer ccancel()
			err = errors.Join(err, deleteQueue(cctx, rdb, a.prefix, queue))
		}()
	}
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: a.prefix})
	if err != nil {
		return err
	}
	if o.partitions > 1 {
		insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: a.prefix})
		if err != nil {
			return err
		}
		if _, err := insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: o.partitions}); err != nil {
			return err
		}
	}

	// Each job's payload starts with its publish time, so the handler can measure latency.
	latencies := make([]int64, o.jobs)
	var seen atomic.Int64
	worker, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{
		Queues: []string{queue}, Prefix: a.prefix, Concurrency: o.concurrency, Logger: a.log,
		// The bench leaves nothing behind: its jobs would stay in the history of all queues,
		// which deleting its queue does not touch. A flush every 5 s costs nothing the bench
		// could measure. Nor does it leave its queue and type in the heartbeats' sightings
		// (keys.SeenQueues), which outlive the worker by a day.
		DisableHistory: true, DisableHeartbeat: true,
	})
	if err != nil {
		return err
	}
	worker.Handle("bench", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		if len(j.Payload) >= 8 {
			sent := int64(binary.BigEndian.Uint64(j.Payload))
			if i := seen.Add(1) - 1; i < int64(len(latencies)) {
				latencies[i] = time.Now().UnixNano() - sent
			}
		}
		return nil, nil
	})
	wctx, stopWorker := context.WithCancel(ctx)
	var werr error
	workerDone := make(chan struct{}) // closed when worker.Run returned, with werr set
	started := false
	startWorker := func() error {
		started = true
		go func() { werr = worker.Run(wctx); close(workerDone) }()
		select {
		case <-worker.Ready():
			return nil
		case <-workerDone:
			return fmt.Errorf("worker: %w", werr)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() {
		stopWorker()
		if !started {
			return // a failed drain-mode publish: the worker never ran
		}
		<-workerDone
		if werr != nil && err == nil {
			err = werr
		}
	}()

	if !o.json {
		fmt.Fprintf(a.stdout, "Benchmarking %d no-op jobs of %d bytes, concurrency %d, %s mode, %s, %s, on %s (queue %s)\n",
			o.jobs, o.payloadBytes, o.concurrency, o.mode, plural(o.partitions, "partition"), plural(o.producers, "producer"),
			redactURL(a.redisURL), queue)
	}
	// Producers take chunks of 100 jobs from a shared counter until all are published.
	publish := func() (time.Duration, error) {
		start := time.Now()
		const chunk = 100
		var next atomic.Int64
		errs := make(chan error, o.producers)
		for range o.producers {
			go func() {
				tasks := make([]pipeline.Task, chunk)
				for {
					done := int(next.Add(chunk)) - chunk
					if done >= o.jobs {
						errs <- nil
						return
					}
					n := min(chunk, o.jobs-done)
					now := uint64(time.Now().UnixNano())
					for i := range n {
						p := make([]byte, o.payloadBytes)
						binary.BigEndian.PutUint64(p, now)
						tasks[i] = pipeline.Task{Type: "bench", Payload: p}
					}
					if _, err := client.EnqueueBatch(ctx, queue, tasks[:n]); err != nil {
						errs <- fmt.Errorf("publish: %w", err)
						return
					}
				}
			}()
		}
		var err error
		for range o.producers {
			err = errors.Join(err, <-errs)
		}
		return time.Since(start), err
	}

	var pubTook, elapsed time.Duration
	if o.mode == "drain" {
		if pubTook, err = publish(); err != nil {
			return err
		}
		start := time.Now()
		if err := startWorker(); err != nil {
			return err
		}
		if err := a.benchWait(ctx, client, queue, o); err != nil {
			return err
		}
		elapsed = time.Since(start)
	} else {
		if err := startWorker(); err != nil {
			return err
		}
		start := time.Now()
		pubErr := make(chan error, 1)
		go func() {
			d, err := publish()
			pubTook = d
			pubErr <- err
		}()
		if err := a.benchWait(ctx, client, queue, o); err != nil {
			return err
		}
		elapsed = time.Since(start)
		if err := <-pubErr; err != nil {
			return err
		}
	}

	n := min(int(seen.Load()), len(latencies))
	lat := slices.Clone(latencies[:n])
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return durationMS(time.Duration(lat[min(len(lat)-1, int(p*float64(len(lat))))]))
	}
	r := benchReport{
		Mode: o.mode, Jobs: o.jobs, PayloadBytes: o.payloadBytes, Concurrency: o.concurrency,
		Partitions: o.partitions, Producers: o.producers,
		EnqueuePerS: float64(o.jobs) / pubTook.Seconds(), JobsPerS: float64(o.jobs) / elapsed.Seconds(),
		ElapsedS:  elapsed.Seconds(),
		LatencyMS: map[string]float64{"p50": pct(0.50), "p90": pct(0.90), "p99": pct(0.99), "max": pct(1)},
	}
	if o.json {
		return json.NewEncoder(a.stdout).Encode(r)
	}
	tw := newTable(a.stdout)
	fmt.Fprintf(tw, "publish (EnqueueBatch, 100 a call)\t%.0f jobs/s\n", r.EnqueuePerS)
	fmt.Fprintf(tw, "throughput (%s)\t%.0f jobs/s\t(%d jobs in %s)\n", o.mode, r.JobsPerS, o.jobs, elapsed.Round(time.Millisecond))
	fmt.Fprintf(tw, "latency, publish to start\tp50 %.2f ms\tp90 %.2f ms\tp99 %.2f ms\tmax %.2f ms\n",
		r.LatencyMS["p50"], r.LatencyMS["p90"], r.LatencyMS["p99"], r.LatencyMS["max"])
	return tw.Flush()
}

// benchQueue names the benchmark queue with a random name. On a cluster the name's partitions
// sit on as many masters as there are partitions (or masters). So a run with P partitions
// measures P shards and not a chance draw of hash slots.
func benchQueue(ctx context.Context, rdb redis.UniversalClient, prefix string, partitions int) (string, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok || partitions == 1 {
		return "bench-" + randomHex(4), nil
	}
	var masters atomic.Int64 // ForEachMaster calls concurrently
	if err := cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { masters.Add(1); return nil }); err != nil {
		return "", err
	}
	want := min(partitions, int(masters.Load()))
	for range 1000 {
		name := "bench-" + randomHex(4)
		seen := map[string]bool{}
		for _, k := range keyspace.KeysOf(prefix, name, partitions) {
			node, err := cc.MasterForKey(ctx, k.Stream)
			if err != nil {
				return "", err
			}
			seen[node.Options().Addr] = true
		}
		if len(seen) >= want {
			return name, nil
		}
	}
	return "", fmt.Errorf("no queue name of 1000 spreads %d partitions over %d masters", partitions, want)
}

// durationMS is d in milliseconds, rounded to the microsecond.
func durationMS(d time.Duration) float64 {
	return float64(d.Round(time.Microsecond)) / float64(time.Millisecond)
}

// benchWait shows progress until every job completed.
func (a *app) benchWait(ctx context.Context, client *pipeline.Client, queue string, o benchOptions) error {
	var bar *progressbar.ProgressBar
	if !o.json && isTerminal(a.stderr) {
		bar = progressbar.NewOptions(o.jobs, progressbar.OptionSetWriter(a.stderr),
			progressbar.OptionSetWidth(30), progressbar.OptionShowCount(), progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("jobs"), progressbar.OptionThrottle(100*time.Millisecond))
		defer func() { _ = bar.Exit(); fmt.Fprintln(a.stderr) }()
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := client.Stats(ctx, queue)
		if err != nil {
			return err
		}
		if bar != nil {
			_ = bar.Set(int(st.Completed))
		}
		if st.Completed >= int64(o.jobs) {
			return nil
		}
		if st.Failed > 0 {
			return fmt.Errorf("%d benchmark jobs failed", st.Failed)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d jobs completed: %w", st.Completed, o.jobs, ctx.Err())
		case <-tick.C:
		}
	}
}
