// Command soak publishes many jobs to one queue of a private redis-server, and runs a worker
// until all of them completed. It samples Redis's memory along the way. That checks the
// arithmetic of docs/OPERATIONS.md ("Memory in Redis") at scale. It expects about QueuedBytes
// per unfinished job, and RetainedBytes per finished job kept for its retention. Once the
// retention has expired, it expects nothing per job.
//
// It starts its own redis-server (internal/redistest: loopback, no persistence) and never
// touches another. Samples are taken after the publish, and mid-run, when about half the jobs
// completed. Then after completion and, with -expire, after the retention expired. Each sample
// reads INFO memory's used_memory, the key counts, and MEMORY USAGE of representative keys.
// Those are a sample of job hashes, the stream, the stats hash and the set of queues. The
// command exits 1 when a sample is off the expected figure by more than -tolerance.
//
//	go run ./cmd/soak -jobs 1000000                          # default retention (24h): no expiry
//	go run ./cmd/soak -jobs 1000000 -retention 2m -expire    # and wait for the records to expire
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// The per-job figures of docs/OPERATIONS.md, "Memory in Redis" (100-byte payloads, no
// metadata): what the samples are checked against.
const (
	QueuedBytes   = 400
	RetainedBytes = 580
	// RehashBytes is what a retained record may hold on top of RetainedBytes: a job hash
	// converted from 6 listpack fields gets an 8-slot table, and adding its 9th field starts a
	// rehash to 16 slots. The rest of the write takes 6 rehash steps. When its 8 fields fill 7
	// or 8 slots (the server's random hash seed decides, for every record alike), the rehash
	// is left unfinished. The untouched record keeps both tables: 8 more pointers of 8 bytes.
	RehashBytes = 64
)

const (
	jobType    = "noop"
	queueName  = "soak"
	batchSize  = 1000
	publishers = 2
	hashSample = 100 // job hashes whose MEMORY USAGE each sample reads
	// maxPayloadBytes is a Client's default payload limit (ClientConfig.MaxPayloadBytes).
	maxPayloadBytes = 1 << 20
	// defaultRetention and defaultMinRetention are WorkerConfig.Retention's and
	// MinRetention's defaults.
	defaultRetention    = 24 * time.Hour
	defaultMinRetention = time.Minute
)

type options struct {
	jobs         int
	payloadBytes int
	retention    time.Duration
	minRetention time.Duration
	expire       bool
	concurrency  int
	readBatch    int
	tolerance    float64
	queuedBytes  float64
	retainBytes  float64
	jsonOut      string
	timeout      time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.jobs, "jobs", 1_000_000, "jobs to publish and run")
	fs.IntVar(&o.payloadBytes, "payload-bytes", 100, "payload size of every job (the doc's figures are for 100)")
	fs.DurationVar(&o.retention, "retention", defaultRetention, "WorkerConfig.Retention: how long completed records are kept")
	fs.DurationVar(&o.minRetention, "min-retention", 0, "WorkerConfig.MinRetention (0: the default, 1m)")
	fs.BoolVar(&o.expire, "expire", false, "after completion, wait for the retention to expire and sample again (use a short -retention)")
	fs.IntVar(&o.concurrency, "concurrency", 300, "WorkerConfig.Concurrency")
	fs.IntVar(&o.readBatch, "batch", 150, "WorkerConfig.ReadBatch")
	fs.Float64Var(&o.tolerance, "tolerance", 0.10, "largest accepted relative deviation of a sample from the expected memory")
	fs.Float64Var(&o.queuedBytes, "queued-bytes", QueuedBytes, "expected bytes per unfinished job")
	fs.Float64Var(&o.retainBytes, "retained-bytes", RetainedBytes, "expected bytes per retained finished job")
	fs.StringVar(&o.jsonOut, "json-out", "", "also write the samples as JSON to this file")
	fs.DurationVar(&o.timeout, "timeout", 0, "bound of the whole run (0: 2m + 1s per 2000 jobs, plus the retention with -expire)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.jobs < 2*hashSample:
		return o, fmt.Errorf("-jobs must be at least %d", 2*hashSample)
	case o.payloadBytes < 1 || o.payloadBytes > maxPayloadBytes:
		return o, fmt.Errorf("-payload-bytes must be 1 to %d", maxPayloadBytes)
	case o.retention <= 0:
		return o, errors.New("-retention must be positive: the soak measures retained records")
	case o.expire && o.retention > time.Hour:
		return o, fmt.Errorf("-expire with -retention %s would wait that long: give a shorter -retention", o.retention)
	case o.tolerance <= 0:
		return o, errors.New("-tolerance must be positive")
	}
	if o.timeout == 0 {
		o.timeout = 2*time.Minute + time.Duration(o.jobs/2000)*time.Second
		if o.expire {
			o.timeout += max(o.retention, o.minRetention, defaultMinRetention) + 2*time.Minute
		}
	}
	return o, nil
}

// sample is Redis's memory at one point of the run.
type sample struct {
	Point      string `json:"point"`
	ElapsedMS  int64  `json:"elapsed_ms"`
	UsedMemory int64  `json:"used_memory"`
	// Growth is UsedMemory minus the empty server's.
	Growth    int64 `json:"growth"`
	Keys      int64 `json:"keys"`
	Expires   int64 `json:"expires"` // keys with a TTL: the retained records
	Unfinish  int64 `json:"unfinished"`
	Completed int64 `json:"completed"`
	// Expected is what docs/OPERATIONS.md predicts for the growth; ExpectedHigh adds
	// RehashBytes per retained record.
	Expected     int64   `json:"expected"`
	ExpectedHigh int64   `json:"expected_high"`
	Deviation    float64 `json:"deviation"` // off the nearer of the two, relative to it; 0 between
	// MEMORY USAGE of representative keys (a job hash: the mean over a sample).
	JobHash     int64  `json:"job_hash_bytes"`
	JobHashes   int    `json:"job_hashes_sampled"`
	Stream      int64  `json:"stream_bytes"`
	StreamLen   int64  `json:"stream_len"`
	Stats       int64  `json:"stats_bytes"`
	QueuesSet   int64  `json:"queues_set_bytes"`
	UsedRSS     int64  `json:"used_memory_rss"`
	ExpectedPer string `json:"expected_per_job"`
}

type report struct {
	Jobs         int      `json:"jobs"`
	PayloadBytes int      `json:"payload_bytes"`
	Retention    string   `json:"retention"`
	MinRetention string   `json:"min_retention"`
	Redis        string   `json:"redis"`
	Baseline     int64    `json:"baseline_used_memory"`
	PublishMS    int64    `json:"publish_ms"`
	RunMS        int64    `json:"run_ms"`
	Samples      []sample `json:"samples"`
	Failures     []string `json:"failures"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "soak:", err)
		}
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rep, err := soak(ctx, o, stderr)
	if rep != nil {
		printReport(stdout, rep)
		if o.jsonOut != "" {
			b, _ := json.MarshalIndent(rep, "", "  ")
			if werr := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); werr != nil {
				fmt.Fprintln(stderr, "soak:", werr)
				return 1
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	if len(rep.Failures) > 0 {
		for _, f := range rep.Failures {
			fmt.Fprintln(stderr, "soak: off the arithmetic:", f)
		}
		return 1
	}
	return 0
}

// soaker holds the run's connections and what the samples need.
type soaker struct {
	o     options
	rdb   *redis.Client
	q     keys.Queue
	base  int64
	start time.Time
	ids   []string // job ids whose hashes are sampled
	rep   *report
	logw  io.Writer
}

func (s *soaker) logf(format string, args ...any) {
	fmt.Fprintf(s.logw, "soak: %6.1fs "+format+"\n", append([]any{time.Since(s.start).Seconds()}, args...)...)
}

func soak(ctx context.Context, o options, stderr io.Writer) (*report, error) {
	srv, err := redistest.StartProcess()
	if err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16})
	defer rdb.Close()
	s := &soaker{o: o, rdb: rdb, q: keys.New(keys.DefaultPrefix, queueName), start: time.Now(), logw: stderr,
		rep: &report{Jobs: o.jobs, PayloadBytes: o.payloadBytes, Retention: o.retention.String(),
			MinRetention: cmp.Or(o.minRetention, defaultMinRetention).String()}}
	info, err := redisInfo(ctx, rdb, "server")
	if err != nil {
		return nil, err
	}
	s.rep.Redis = info["redis_version"]
	if s.base, _, err = s.settled(ctx); err != nil {
		return nil, err
	}
	s.rep.Baseline = s.base
	s.logf("private redis-server %s on %s (pid %d), used_memory %d; %d jobs, retention %s",
		s.rep.Redis, srv.Addr, srv.PID(), s.base, o.jobs, o.retention)

	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		return s.rep, err
	}
	t0 := time.Now()
	if err := s.publish(ctx, client); err != nil {
		return s.rep, err
	}
	s.rep.PublishMS = time.Since(t0).Milliseconds()
	s.logf("published %d jobs in %s", o.jobs, time.Since(t0).Round(time.Millisecond))
	if err := s.sample(ctx, client, "published", false); err != nil {
		return s.rep, err
	}

	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{
		Queues: []string{queueName}, Concurrency: o.concurrency, ReadBatch: o.readBatch,
		Retention: o.retention, MinRetention: o.minRetention, ShutdownTimeout: 5 * time.Second,
		// The soak measures the jobs' memory and waits for every key with a TTL to expire. The
		// queue's history buckets (kept an hour and a day, a few hundred bytes each) would hold
		// that wait for a day. So would the worker's heartbeat record.
		DisableHistory: true, DisableHeartbeat: true,
		Logger: zerolog.New(stderr).Level(zerolog.WarnLevel).With().Timestamp().Logger(),
	})
	if err != nil {
		return s.rep, err
	}
	w.Handle(jobType, func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	t1 := time.Now()
	go func() { done <- w.Run(wctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		stopWorker()
		return <-done
	}
	defer func() { _ = stop() }()

	if err := s.waitCompleted(ctx, client, int64(o.jobs/2), done); err != nil {
		return s.rep, err
	}
	if err := s.sample(ctx, client, "mid-run", false); err != nil {
		return s.rep, err
	}
	if err := s.waitCompleted(ctx, client, int64(o.jobs), done); err != nil {
		return s.rep, err
	}
	s.rep.RunMS = time.Since(t1).Milliseconds()
	s.logf("all %d jobs completed in %s", o.jobs, time.Since(t1).Round(time.Millisecond))
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		return s.rep, fmt.Errorf("worker: %w", err)
	}
	if err := s.sample(ctx, client, "completed", false); err != nil {
		return s.rep, err
	}
	if !o.expire {
		return s.rep, nil
	}
	s.logf("waiting for the retained records to expire (retention %s)", o.retention)
	if err := s.waitExpired(ctx); err != nil {
		return s.rep, err
	}
	return s.rep, s.sample(ctx, client, "expired", true)
}

// publish enqueues o.jobs jobs in batches of batchSize from a few goroutines, keeping a spread
// of ids for the job-hash samples.
func (s *soaker) publish(ctx context.Context, c *pipeline.Client) error {
	payload := []byte(`"` + strings.Repeat("x", max(0, s.o.payloadBytes-2)) + `"`)[:s.o.payloadBytes]
	batches := (s.o.jobs + batchSize - 1) / batchSize
	every := max(1, batches/hashSample)
	var next atomic.Int64
	var mu sync.Mutex
	errs := make([]error, publishers)
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			tasks := make([]pipeline.Task, batchSize)
			for i := range tasks {
				tasks[i] = pipeline.Task{Type: jobType, Payload: payload}
			}
			for {
				b := int(next.Add(1) - 1)
				if b >= batches || ctx.Err() != nil {
					errs[g] = ctx.Err()
					return
				}
				n := min(batchSize, s.o.jobs-b*batchSize)
				jobs, err := c.EnqueueBatch(ctx, queueName, tasks[:n])
				if err != nil {
					errs[g] = err
					return
				}
				if b%every == 0 {
					mu.Lock()
					s.ids = append(s.ids, jobs[0].ID)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitCompleted polls the completed counter until it reaches n.
func (s *soaker) waitCompleted(ctx context.Context, c *pipeline.Client, n int64, done <-chan error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		st, err := c.Stats(ctx, queueName)
		if err != nil {
			return err
		}
		if st.Completed >= n {
			return nil
		}
		if st.Failed > 0 {
			return fmt.Errorf("%d jobs failed", st.Failed)
		}
		if time.Since(last) > 10*time.Second {
			s.logf("%d of %d completed", st.Completed, s.o.jobs)
			last = time.Now()
		}
		select {
		case err := <-done:
			return fmt.Errorf("worker stopped early: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d completed jobs: %w", n, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitExpired polls until no job hash is left (Redis expires them in its background cycle).
func (s *soaker) waitExpired(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := time.Now()
	for {
		kv, err := keyspace(ctx, s.rdb)
		if err != nil {
			return err
		}
		if kv["expires"] == 0 {
			return nil
		}
		if time.Since(last) > 15*time.Second {
			s.logf("%d records with a TTL left", kv["expires"])
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the records to expire: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// sample reads the memory figures, compares the growth with the doc's arithmetic and records
// the sample. After expiry (gone) the expectation is no memory per job: the growth is compared
// with what the retained records held, and must be a small part of it.
func (s *soaker) sample(ctx context.Context, c *pipeline.Client, point string, gone bool) error {
	used, rss, err := s.settled(ctx)
	if err != nil {
		return err
	}
	st, err := c.Stats(ctx, queueName)
	if err != nil {
		return err
	}
	kv, err := keyspace(ctx, s.rdb)
	if err != nil {
		return err
	}
	sm := sample{Point: point, ElapsedMS: time.Since(s.start).Milliseconds(), UsedMemory: used,
		Growth: used - s.base, Keys: kv["keys"], Expires: kv["expires"], UsedRSS: rss,
		Completed: st.Completed, Unfinish: st.Enqueued - st.Completed}
	// The retained records are the keys with a TTL: on a slow run the first may have expired
	// before the last job completed.
	retained := min(sm.Completed, sm.Expires)
	sm.Expected = int64(float64(sm.Unfinish)*s.o.queuedBytes + float64(retained)*s.o.retainBytes)
	sm.ExpectedHigh = sm.Expected + retained*RehashBytes
	sm.ExpectedPer = fmt.Sprintf("%d x %.0f + %d x %.0f", sm.Unfinish, s.o.queuedBytes, retained, s.o.retainBytes)
	if gone {
		sm.Expected, sm.ExpectedHigh = 0, 0
		sm.ExpectedPer = "0 per job"
	}
	// MEMORY USAGE with SAMPLES 0 reads every element: exact, and cheap for these keys except
	// the stream, which is read once per sample.
	usage := func(key string) (int64, error) {
		n, err := s.rdb.MemoryUsage(ctx, key, 0).Result()
		if errors.Is(err, redis.Nil) {
			return 0, nil
		}
		return n, err
	}
	var sum int64
	for _, id := range s.ids {
		n, err := usage(s.q.Job(id))
		if err != nil {
			return err
		}
		if n > 0 {
			sum += n
			sm.JobHashes++
		}
	}
	if sm.JobHashes > 0 {
		sm.JobHash = sum / int64(sm.JobHashes)
	}
	if sm.Stream, err = usage(s.q.Stream()); err != nil {
		return err
	}
	if sm.StreamLen, err = s.rdb.XLen(ctx, s.q.Stream()).Result(); err != nil {
		return err
	}
	if sm.Stats, err = usage(s.q.Stats()); err != nil {
		return err
	}
	if sm.QueuesSet, err = usage(keys.Queues(keys.DefaultPrefix)); err != nil {
		return err
	}
	if gone {
		// Nothing per job is left: what remains must be a small part of what the records held.
		// The index of completed jobs keeps its last keys.FinishedIndexCap ids (about 1 MB)
		// until later jobs push them out: bounded, not per job, so it is left out.
		index, err := usage(s.q.Completed())
		if err != nil {
			return err
		}
		held := float64(s.o.jobs) * s.o.retainBytes
		sm.Deviation = float64(sm.Growth-index) / held
		if sm.Deviation > s.o.tolerance {
			s.rep.Failures = append(s.rep.Failures, fmt.Sprintf("%s: %d bytes left after expiry, %.1f%% of the %.0f the records held", point, sm.Growth, 100*sm.Deviation, held))
		}
	} else {
		// A record takes RetainedBytes, or RehashBytes more: both are the arithmetic.
		switch {
		case sm.Growth < sm.Expected:
			sm.Deviation = float64(sm.Growth-sm.Expected) / float64(sm.Expected)
		case sm.Growth > sm.ExpectedHigh:
			sm.Deviation = float64(sm.Growth-sm.ExpectedHigh) / float64(sm.ExpectedHigh)
		}
		if sm.Deviation > s.o.tolerance || sm.Deviation < -s.o.tolerance {
			s.rep.Failures = append(s.rep.Failures, fmt.Sprintf("%s: grew %d bytes, expected %d to %d (%s, + %d per retained record), %+.1f%%", point, sm.Growth, sm.Expected, sm.ExpectedHigh, sm.ExpectedPer, RehashBytes, 100*sm.Deviation))
		}
	}
	s.rep.Samples = append(s.rep.Samples, sm)
	s.logf("%-9s used_memory %d (+%d), expected +%d (%+.1f%%), keys %d, job hash %d B, stream %d B",
		point, used, sm.Growth, sm.Expected, 100*sm.Deviation, sm.Keys, sm.JobHash, sm.Stream)
	return nil
}

// settled reads used_memory and used_memory_rss (one INFO memory) after a pause, so that the
// client buffers of the pipelines just sent have been released by the server's cron.
func (s *soaker) settled(ctx context.Context) (used, rss int64, err error) {
	select {
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	m, err := redisInfo(ctx, s.rdb, "memory")
	if err != nil {
		return 0, 0, err
	}
	rss, _ = strconv.ParseInt(m["used_memory_rss"], 10, 64)
	used, err = strconv.ParseInt(m["used_memory"], 10, 64)
	return used, rss, err
}

// redisInfo returns one INFO section as a map.
func redisInfo(ctx context.Context, rdb *redis.Client, section string) (map[string]string, error) {
	txt, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for line := range strings.SplitSeq(txt, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// keyspace returns db0's keys and expires counts from INFO keyspace.
func keyspace(ctx context.Context, rdb *redis.Client) (map[string]int64, error) {
	m, err := redisInfo(ctx, rdb, "keyspace")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{"keys": 0, "expires": 0}
	for part := range strings.SplitSeq(m["db0"], ",") {
		if k, v, ok := strings.Cut(part, "="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			out[k] = n
		}
	}
	return out, nil
}

func printReport(w io.Writer, rep *report) {
	fmt.Fprintf(w, "## Soak: %d jobs, %d-byte payloads, retention %s (min %s), redis %s\n\n",
		rep.Jobs, rep.PayloadBytes, rep.Retention, rep.MinRetention, rep.Redis)
	fmt.Fprintf(w, "empty server used_memory %d; publish %.1fs, run %.1fs\n\n",
		rep.Baseline, float64(rep.PublishMS)/1000, float64(rep.RunMS)/1000)
	fmt.Fprintln(w, "| point | used_memory growth | expected (OPERATIONS.md) | off by | per job | keys | with TTL | job hash | stream (entries) | stats hash |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, s := range rep.Samples {
		fmt.Fprintf(w, "| %s | %s | %s (%s) | %+.1f%% | %.0f | %d | %d | %d | %s (%d) | %d |\n",
			s.Point, mb(s.Growth), mb(s.Expected), s.ExpectedPer, 100*s.Deviation,
			float64(s.Growth)/float64(rep.Jobs), s.Keys, s.Expires, s.JobHash, mb(s.Stream), s.StreamLen, s.Stats)
	}
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
