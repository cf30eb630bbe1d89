// Command limits measures issue 18's flow-control limits on a private redis-server. It has two
// modes.
//
// Mode rate runs a global rate limit (Limit{Rate, Interval}) shared by 4 workers. The queue
// holds a backlog for the whole run. Every job's start time (started_at) is read back. The
// observed rate over the window after a warm-up is compared with the limit (target: within 5%).
// Every span of starts is also checked against what the GCRA allows. That is the rate plus one
// interval's burst, plus the tokens a worker may hold for up to 100 ms (pipeline's tokenLife). A
// span over it is a failure, not a figure.
//
// Mode perkey runs a per-key concurrency limit (Limit{PerKey, Concurrency}) over 100 limit keys
// that the run never reaches. The keys (WithLimitKey) are spread round-robin over the jobs. It
// is compared with the same worker and the same jobs with no limit, on a drain of a preloaded
// backlog. The two alternate round by round, the order swapped each round, so the VM's drift
// cancels out. The ratio is read per round (target: the median within 10% of the unlimited
// worker). The run checks that the limit was never reached (QueueStats.Limited 0).
//
// The workers are pipeline.Workers in this process, each on a Redis client of its own. What 4
// worker processes share is Redis, and the limit's state is there either way. It starts its own
// redis-server (internal/redistest: loopback, no persistence) and never touches another.
//
//	go run ./cmd/limits                         # 10,000/s over 10 s; 100,000 jobs x 3 rounds
//	go run ./cmd/limits -rate 5000 -window 30s  # another rate
//	go run ./cmd/limits -only perkey -rounds 5
//
// It exits 1 on an error or a span over the GCRA's bound, and 2 on bad flags. A target not met
// is reported, not an exit code: the figure is the result.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

const (
	jobType   = "noop"
	batchSize = 1000
	// maxLimitRate is pipeline.Limit.Rate's bound, checked here so that a bad -rate fails
	// before any setup.
	maxLimitRate = 1_000_000_000
)

type options struct {
	only        string
	rate        int
	interval    time.Duration
	workers     int
	window      time.Duration
	warmup      time.Duration
	jobs        int
	keys        int
	keyLimit    int
	rounds      int
	concurrency int
	readBatch   int
	jsonOut     string
	timeout     time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("limits", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.only, "only", "", "run one benchmark: rate or perkey (default both)")
	fs.IntVar(&o.rate, "rate", 10000, "rate: jobs per -interval")
	fs.DurationVar(&o.interval, "interval", time.Second, "rate: the limit's interval")
	fs.IntVar(&o.workers, "workers", 4, "rate: workers sharing the limit")
	fs.DurationVar(&o.window, "window", 10*time.Second, "rate: how long the observed rate is measured")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "rate: time left out at the start (the GCRA's burst, the first deferrals)")
	fs.IntVar(&o.jobs, "jobs", 100000, "perkey: jobs per drain")
	fs.IntVar(&o.keys, "keys", 100, "perkey: limit keys, spread round-robin over the jobs")
	fs.IntVar(&o.keyLimit, "key-limit", 50, "perkey: each key's concurrency (above what the run reaches)")
	fs.IntVar(&o.rounds, "rounds", 3, "perkey: rounds of the pair")
	fs.IntVar(&o.concurrency, "concurrency", 300, "each worker's concurrency")
	fs.IntVar(&o.readBatch, "read-batch", 150, "each worker's read batch")
	fs.StringVar(&o.jsonOut, "json-out", "", "also write the report as JSON to this file")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound of the whole run")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.only != "" && o.only != "rate" && o.only != "perkey":
		return o, fmt.Errorf("-only %q: want rate or perkey", o.only)
	case o.rate < 1 || o.rate > maxLimitRate:
		return o, fmt.Errorf("-rate %d: want 1..%d", o.rate, maxLimitRate)
	case o.interval < time.Millisecond || o.interval%time.Millisecond != 0:
		return o, fmt.Errorf("-interval %s: want whole milliseconds, at least 1ms", o.interval)
	case o.workers < 1:
		return o, fmt.Errorf("-workers %d: want at least 1", o.workers)
	case o.window < o.interval || o.warmup < 0:
		return o, fmt.Errorf("-window %s -warmup %s: want a window of at least one interval and no negative warm-up", o.window, o.warmup)
	case o.jobs < 1 || o.keys < 1 || o.keyLimit < 1 || o.rounds < 1:
		return o, errors.New("-jobs, -keys, -key-limit and -rounds must be at least 1")
	case o.concurrency < 1 || o.readBatch < 1:
		return o, errors.New("-concurrency and -read-batch must be at least 1")
	}
	return o, nil
}

// report is the run's result (-json-out).
type report struct {
	Rate   *rateResult   `json:"rate,omitempty"`
	PerKey *perKeyResult `json:"perkey,omitempty"`
}

type rateResult struct {
	Limit      int     `json:"limit"`
	IntervalMS int64   `json:"interval_ms"`
	Workers    int     `json:"workers"`
	Jobs       int     `json:"jobs"`
	WindowMS   int64   `json:"window_ms"`
	InWindow   int     `json:"in_window"`
	PerSecond  float64 `json:"observed_per_s"`
	LimitPerS  float64 `json:"limit_per_s"`
	Ratio      float64 `json:"ratio"`
	Met        bool    `json:"met"` // within 5%
	Busiest    []span  `json:"busiest"`
	PerWorker  []int   `json:"per_worker"`
	BacklogOK  bool    `json:"backlog_outlasted_window"`
	DrainMS    int64   `json:"drain_ms"`
	Violations int     `json:"gcra_violations"`
}

type span struct {
	SpanMS  int64 `json:"span_ms"`
	Most    int   `json:"most"`
	Allowed int   `json:"allowed"`
}

type perKeyResult struct {
	Jobs     int       `json:"jobs"`
	Keys     int       `json:"keys"`
	KeyLimit int       `json:"key_limit"`
	Plain    []float64 `json:"plain_per_s"`
	Limited  []float64 `json:"limited_per_s"`
	Ratios   []float64 `json:"ratios"`
	Median   float64   `json:"median_ratio"`
	Met      bool      `json:"met"` // within 10%
	Deferred int64     `json:"deferred"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "limits:", err)
		}
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	srv, err := redistest.StartProcess()
	if err != nil {
		fmt.Fprintln(stderr, "limits: start redis-server:", err)
		return 1
	}
	defer srv.Stop()
	b := &bench{o: o, addr: srv.Addr, log: stderr, start: time.Now()}
	rdb := b.client()
	defer rdb.Close()
	b.rdb = rdb

	var rep report
	var failed error
	if o.only == "" || o.only == "rate" {
		rep.Rate, err = b.rate(ctx)
		if err == nil && rep.Rate.Violations > 0 {
			err = fmt.Errorf("rate: %d spans over the GCRA's bound: %+v", rep.Rate.Violations, rep.Rate.Busiest)
		}
		failed = errors.Join(failed, err)
	}
	if failed == nil && (o.only == "" || o.only == "perkey") {
		rep.PerKey, err = b.perKey(ctx)
		if err == nil && rep.PerKey.Deferred > 0 {
			err = fmt.Errorf("perkey: the limit deferred %d jobs: raise -key-limit so that it is not reached", rep.PerKey.Deferred)
		}
		failed = errors.Join(failed, err)
	}
	printReport(stdout, &rep)
	if o.jsonOut != "" {
		out, _ := json.MarshalIndent(&rep, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(out, '\n'), 0o644); err != nil {
			failed = errors.Join(failed, err)
		}
	}
	if failed != nil {
		fmt.Fprintln(stderr, "limits:", failed)
		return 1
	}
	return 0
}

type bench struct {
	o     options
	addr  string
	rdb   *redis.Client
	log   io.Writer
	start time.Time
	seq   int
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "limits: %6.1fs "+format+"\n", append([]any{time.Since(b.start).Seconds()}, args...)...)
}

func (b *bench) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: b.addr, PoolSize: 32})
}

// fresh empties the server and names a new queue, so that no run sees another's state.
func (b *bench) fresh(ctx context.Context, name string) (string, error) {
	b.seq++
	return fmt.Sprintf("%s-%d", name, b.seq), b.rdb.FlushAll(ctx).Err()
}

// preload publishes n jobs to q, job i with limit key i % keys when keys > 0, and returns
// their ids.
func (b *bench) preload(ctx context.Context, c *pipeline.Client, q string, n, nkeys int) ([]string, error) {
	ids := make([]string, 0, n)
	tasks := make([]pipeline.Task, 0, batchSize)
	for i := 0; i < n; i += batchSize {
		tasks = tasks[:0]
		for k := i; k < min(n, i+batchSize); k++ {
			t := pipeline.Task{Type: jobType, Payload: []byte(`{}`)}
			if nkeys > 0 {
				t.Opts = []pipeline.Option{pipeline.WithLimitKey("tenant-" + strconv.Itoa(k%nkeys))}
			}
			tasks = append(tasks, t)
		}
		jobs, err := c.EnqueueBatch(ctx, q, tasks)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
	}
	return ids, nil
}

// workers runs n workers on q, each on a client of its own, until the returned stop is called.
func (b *bench) workers(ctx context.Context, q string, n int) (stop func() error, err error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, n)
	var clients []*redis.Client
	stop = func() error {
		cancel()
		var errs error
		for range n {
			errs = errors.Join(errs, <-done)
		}
		for _, c := range clients {
			c.Close()
		}
		return errs
	}
	for i := range n {
		rdb := b.client()
		clients = append(clients, rdb)
		w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{
			Queues: []string{q}, Name: fmt.Sprintf("%s-w%d", q, i), Concurrency: b.o.concurrency,
			ReadBatch: b.o.readBatch, ShutdownTimeout: 5 * time.Second,
			Logger: zerolog.New(b.log).Level(zerolog.WarnLevel).With().Timestamp().Logger(),
		})
		if err != nil {
			cancel()
			for range i {
				<-done
			}
			return nil, err
		}
		w.Handle(jobType, func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })
		go func() {
			if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				done <- err
				return
			}
			done <- nil
		}()
	}
	return stop, nil
}

// waitCompleted polls q's completed count every 10 ms until it is n and returns when that was
// seen.
func waitCompleted(ctx context.Context, c *pipeline.Client, q string, n int64) (time.Time, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := c.Stats(ctx, q)
		if err != nil {
			return time.Time{}, err
		}
		if st.Completed >= n {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d completed: %w", st.Completed, n, ctx.Err())
		case <-tick.C:
		}
	}
}

// rate runs the global rate limit benchmark.
func (b *bench) rate(ctx context.Context) (*rateResult, error) {
	o := b.o
	q, err := b.fresh(ctx, "rate")
	if err != nil {
		return nil, err
	}
	per := float64(o.interval) / float64(o.rate) // T, the GCRA's emission interval
	// A worker starts a leased token's job within pipeline's tokenLife of the token's grant.
	const tokenLifeMS = 100
	// The burst, the warm-up, the window and two intervals more: a backlog for the whole window.
	n := o.rate + int(float64(o.warmup+o.window+2*o.interval)/per)
	c, err := pipeline.NewClient(b.rdb, pipeline.ClientConfig{})
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	ids, err := b.preload(ctx, c, q, n, 0)
	if err != nil {
		return nil, err
	}
	b.logf("rate: published %d jobs in %s", n, time.Since(t0).Round(time.Millisecond))
	ins, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	if err != nil {
		return nil, err
	}
	if err := ins.SetLimit(ctx, q, pipeline.Limit{Rate: o.rate, Interval: o.interval}); err != nil {
		return nil, err
	}
	t1 := time.Now()
	stop, err := b.workers(ctx, q, o.workers)
	if err != nil {
		return nil, err
	}
	_, werr := waitCompleted(ctx, c, q, int64(n))
	drain := time.Since(t1)
	if err := errors.Join(werr, stop()); err != nil {
		return nil, err
	}
	b.logf("rate: %d jobs through %d workers at %d/%s in %s", n, o.workers, o.rate, o.interval, drain.Round(time.Millisecond))

	times, perWorker, err := admissions(ctx, b.rdb, q, ids)
	if err != nil {
		return nil, err
	}
	r := &rateResult{Limit: o.rate, IntervalMS: o.interval.Milliseconds(), Workers: o.workers, Jobs: n,
		WindowMS: o.window.Milliseconds(), DrainMS: drain.Milliseconds(),
		LimitPerS: float64(o.rate) / o.interval.Seconds()}
	for w := range o.workers {
		r.PerWorker = append(r.PerWorker, perWorker[fmt.Sprintf("%s-w%d", q, w)])
	}
	perMS := per / float64(time.Millisecond)
	ms := o.interval.Milliseconds()
	for _, s := range []int64{max(1, ms/10), ms, 5 * ms, times[len(times)-1] - times[0]} {
		most := busiest(times, s)
		// span/T starts, plus the burst, plus one millisecond for the truncation of the
		// stored times.
		allowed := int(float64(s+1+tokenLifeMS)/perMS) + o.rate
		r.Busiest = append(r.Busiest, span{SpanMS: s, Most: most, Allowed: allowed})
		if most > allowed {
			r.Violations++
		}
	}
	from := times[0] + o.warmup.Milliseconds()
	to := from + o.window.Milliseconds()
	r.BacklogOK = to < times[len(times)-1]
	for _, a := range times {
		if a >= from && a < to {
			r.InWindow++
		}
	}
	r.PerSecond = float64(r.InWindow) / o.window.Seconds()
	r.Ratio = r.PerSecond / r.LimitPerS
	r.Met = r.BacklogOK && r.Ratio >= 0.95 && r.Ratio <= 1.05
	return r, nil
}

// admissions reads back every job's start time (unix ms), sorted, and the
// jobs each worker ran.
func admissions(ctx context.Context, rdb *redis.Client, q string, ids []string) ([]int64, map[string]int, error) {
	k := keys.New(keys.DefaultPrefix, q)
	out := make([]int64, 0, len(ids))
	ran := map[string]int{}
	for chunk := range slices.Chunk(ids, 1000) {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, len(chunk))
		for i, id := range chunk {
			cmds[i] = pipe.HMGet(ctx, k.Job(id), keys.FieldStartedAt, keys.FieldWorker)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, nil, err
		}
		for i, cmd := range cmds {
			v := cmd.Val()
			s, _ := v[0].(string)
			at, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("job %s: %s %q: %w", chunk[i], keys.FieldStartedAt, s, err)
			}
			out = append(out, at)
			w, _ := v[1].(string)
			ran[w]++
		}
	}
	slices.Sort(out)
	return out, ran, nil
}

// busiest returns the most of the sorted times within span ms of one another ([a, a+span]).
func busiest(times []int64, span int64) int {
	most, j := 0, 0
	for i, a := range times {
		for times[j] < a-span {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// perKey runs the per-key concurrency benchmark: rounds of the pair (no limit, the per-key
// limit), the order swapped each round.
func (b *bench) perKey(ctx context.Context) (*perKeyResult, error) {
	o := b.o
	r := &perKeyResult{Jobs: o.jobs, Keys: o.keys, KeyLimit: o.keyLimit}
	for round := range o.rounds {
		var plain, limited float64
		order := []bool{false, true}
		if round%2 == 1 {
			order = []bool{true, false}
		}
		for _, withLimit := range order {
			rate, deferred, err := b.drain(ctx, withLimit)
			if err != nil {
				return nil, err
			}
			if withLimit {
				limited = rate
				r.Deferred += deferred
			} else {
				plain = rate
			}
		}
		r.Plain = append(r.Plain, plain)
		r.Limited = append(r.Limited, limited)
		r.Ratios = append(r.Ratios, limited/plain)
		b.logf("perkey: round %d: plain %.0f/s, per-key limit %.0f/s, ratio %.3f", round+1, plain, limited, limited/plain)
	}
	r.Median = median(r.Ratios)
	r.Met = r.Median >= 0.90
	return r, nil
}

// drain preloads the jobs (with their limit keys either way), sets the per-key limit when
// withLimit, and times one worker from its start to the last completion. It returns the jobs
// per second and how many jobs the limit deferred.
func (b *bench) drain(ctx context.Context, withLimit bool) (float64, int64, error) {
	o := b.o
	q, err := b.fresh(ctx, "perkey")
	if err != nil {
		return 0, 0, err
	}
	c, err := pipeline.NewClient(b.rdb, pipeline.ClientConfig{})
	if err != nil {
		return 0, 0, err
	}
	if _, err := b.preload(ctx, c, q, o.jobs, o.keys); err != nil {
		return 0, 0, err
	}
	if withLimit {
		ins, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
		if err != nil {
			return 0, 0, err
		}
		if err := ins.SetLimit(ctx, q, pipeline.Limit{PerKey: true, Concurrency: o.keyLimit}); err != nil {
			return 0, 0, err
		}
	}
	t0 := time.Now()
	stop, err := b.workers(ctx, q, 1)
	if err != nil {
		return 0, 0, err
	}
	end, werr := waitCompleted(ctx, c, q, int64(o.jobs))
	if err := errors.Join(werr, stop()); err != nil {
		return 0, 0, err
	}
	st, err := c.Stats(ctx, q)
	if err != nil {
		return 0, 0, err
	}
	return float64(o.jobs) / end.Sub(t0).Seconds(), st.Limited, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printReport(w io.Writer, rep *report) {
	if r := rep.Rate; r != nil {
		fmt.Fprintf(w, "rate limit %d/%dms across %d workers, %d jobs (backlog outlasted the window: %v)\n",
			r.Limit, r.IntervalMS, r.Workers, r.Jobs, r.BacklogOK)
		fmt.Fprintf(w, "  observed %.1f/s over %d ms against %.1f/s: ratio %.4f (target within 5%%: %s)\n",
			r.PerSecond, r.WindowMS, r.LimitPerS, r.Ratio, met(r.Met))
		for _, s := range r.Busiest {
			fmt.Fprintf(w, "  busiest %d ms: %d starts (GCRA bound %d)\n", s.SpanMS, s.Most, s.Allowed)
		}
		fmt.Fprintf(w, "  jobs per worker %v\n", r.PerWorker)
	}
	if r := rep.PerKey; r != nil {
		fmt.Fprintf(w, "per-key concurrency limit %d over %d keys, not reached (deferred %d), %d jobs a drain\n",
			r.KeyLimit, r.Keys, r.Deferred, r.Jobs)
		for i := range r.Ratios {
			fmt.Fprintf(w, "  round %d: unlimited %.0f/s, per-key limit %.0f/s, ratio %.3f\n", i+1, r.Plain[i], r.Limited[i], r.Ratios[i])
		}
		fmt.Fprintf(w, "  median ratio %.3f (target within 10%%: %s)\n", r.Median, met(r.Met))
	}
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
