package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// results collects per-round values by variant and metric.
type results struct {
	vals     map[string]map[string]map[int]float64 // variant -> metric -> round -> value
	info     map[string]map[string]any             // variant -> key -> last value (leftovers, ...)
	errs     []string
	warnings []string
}

func newResults() *results {
	return &results{vals: map[string]map[string]map[int]float64{},
		info: map[string]map[string]any{}}
}

func (r *results) add(variant string, round int, m map[string]float64) {
	if r.vals[variant] == nil {
		r.vals[variant] = map[string]map[int]float64{}
	}
	for k, v := range m {
		if r.vals[variant][k] == nil {
			r.vals[variant][k] = map[int]float64{}
		}
		r.vals[variant][k][round] = v
	}
}

// inRounds lists a metric's values in round order.
func inRounds(byRound map[int]float64) []float64 {
	rounds := slices.Sorted(maps.Keys(byRound))
	xs := make([]float64, len(rounds))
	for i, round := range rounds {
		xs[i] = byRound[round]
	}
	return xs
}

func (r *results) setInfo(variant, key string, v any) {
	if r.info[variant] == nil {
		r.info[variant] = map[string]any{}
	}
	r.info[variant][key] = v
}

// runner runs the workloads on one private redis-server.
type runner struct {
	o       options
	addr    string
	admin   *redis.Client
	res     *results
	logw    io.Writer
	seq     int
	verbose bool
}

func (r *runner) logf(format string, args ...any) {
	if r.verbose {
		fmt.Fprintf(r.logw, "compare: "+format+"\n", args...)
	}
}

func runParent(ctx context.Context, o options, stdout, stderr io.Writer) int {
	srv, err := redistest.StartProcess()
	if err != nil {
		fmt.Fprintln(stderr, "compare: start redis-server:", err)
		return 1
	}
	defer srv.Stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		fmt.Fprintln(stderr, "compare: ping private redis-server:", err)
		return 1
	}
	machine := readMachine(ctx, admin)
	r := &runner{o: o, addr: srv.Addr, admin: admin, res: newResults(), logw: stderr, verbose: o.verbose || !o.jsonOut}
	r.logf("private redis-server %s on %s (pid %d); %d jobs, %d rounds", machine.RedisVersion, srv.Addr, srv.PID(), o.jobs, o.rounds)

	if kb, err := r.baselineRSS(ctx); err == nil {
		machine.ChildBaselineRSSMB = round3(float64(kb) / 1024)
	} else {
		r.res.warnings = append(r.res.warnings, fmt.Sprintf("baseline RSS: %v", err))
	}
	variants := variantsOf(o)
	start := time.Now()
	// Workload by workload, and within one workload round by round, with every system back to
	// back in a rotating order. So the runs a ratio compares are seconds apart, not minutes. The
	// drift of a shared VM's speed (up to 1.7x within minutes here) mostly cancels out.
	for _, w := range r.workloads() {
		for round := 1; round <= o.rounds; round++ {
			order := slices.Clone(o.systems)
			k := (round - 1) % len(order)
			order = append(order[k:], order[:k]...)
			for _, fam := range order {
				for i, v := range variants[fam] {
					if ctx.Err() != nil {
						fmt.Fprintln(stderr, "compare: interrupted")
						return 1
					}
					if w.perFamily && i > 0 {
						continue
					}
					r.runWorkload(ctx, v, round, w)
				}
			}
		}
	}
	machine.LoadAvgEnd = loadAvg()
	r.logf("done in %s", time.Since(start).Round(time.Second))

	rep := buildReport(o, machine, r.res)
	if o.jsonFile != "" {
		f, err := os.Create(o.jsonFile)
		if err == nil {
			err = writeJSON(f, rep)
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			fmt.Fprintln(stderr, "compare: -json-out:", err)
			return 1
		}
	}
	if o.jsonOut {
		if err := writeJSON(stdout, rep); err != nil {
			fmt.Fprintln(stderr, "compare:", err)
			return 1
		}
	} else {
		writeMarkdown(stdout, rep)
	}
	if len(r.res.errs) > 0 {
		fmt.Fprintf(stderr, "compare: %d workload(s) failed:\n", len(r.res.errs))
		for _, e := range r.res.errs {
			fmt.Fprintln(stderr, "  -", e)
		}
		return 1
	}
	return 0
}

// baselineRSS runs an idle consumer child and returns its peak RSS in kB.
func (r *runner) baselineRSS(ctx context.Context) (int64, error) {
	c, err := startChild(r.o, "idle", r.addr, "idle", 0)
	if err != nil {
		return 0, err
	}
	defer r.stopChild(c)
	var ready readyMsg
	var done doneMsg
	if err := c.await(ctx, "READY", 30*time.Second, &ready); err != nil {
		return 0, err
	}
	if err := c.await(ctx, "DONE", 30*time.Second, &done); err != nil {
		return 0, err
	}
	return procStatusKB(c.pid(), "VmHWM")
}

// workload is one measurement run for one variant in one round.
type workload struct {
	name string
	run  func(context.Context, System, string) (map[string]float64, error)
	// perFamily workloads (the producer-only ones and the delayed one) run once per family,
	// with its first variant: the variants differ only in their consumer.
	perFamily bool
}

// workloads lists the workloads -workloads selects, in a fixed order.
func (r *runner) workloads() []workload {
	all := []workload{
		{"e2e", r.e2e, false}, {"live", r.live, false},
		{"enqueue", r.enqueue, true}, {"enqueue_batch", r.enqueueBatch, true},
		{"delayed", r.delayed, true},
	}
	var ws []workload
	for _, w := range all {
		if slices.Contains(r.o.workloads, w.name) {
			ws = append(ws, w)
		}
	}
	if slices.Contains(r.o.workloads, openloopPrefix) {
		ws = append(ws, r.openloopWorkloads()...)
	}
	return ws
}

// runWorkload runs workload w on variant v for one round.
func (r *runner) runWorkload(ctx context.Context, v string, round int, w workload) {
	sys, err := newSystem(v, r.o)
	if err != nil {
		r.res.errs = append(r.res.errs, err.Error())
		return
	}
	if w.name == "delayed" && !sys.Delayed() {
		return
	}
	r.seq++
	queue := fmt.Sprintf("bench-%d-%s-r%d-%s", r.seq, v, round, w.name)
	if err := r.admin.FlushAll(ctx).Err(); err != nil {
		r.res.errs = append(r.res.errs, fmt.Sprintf("FLUSHALL: %v", err))
		return
	}
	t0 := time.Now()
	m, err := w.run(ctx, sys, queue)
	if err != nil {
		msg := fmt.Sprintf("%s %s round %d: %v", v, w.name, round, err)
		r.res.errs = append(r.res.errs, msg)
		fmt.Fprintln(r.logw, "compare: FAILED:", msg)
		return
	}
	r.res.add(v, round, m)
	r.logf("round %d %-13s %-13s %6.1fs %s", round, v, w.name, time.Since(t0).Seconds(), brief(w.name, m))
}

func brief(w string, m map[string]float64) string {
	switch w {
	case "e2e":
		return fmt.Sprintf("%.0f jobs/s, preload %.0f/s, %.0f B/job, rss %.1f MiB, cpu %.1f+%.1f us/job",
			m["e2e_jobs_per_s"], m["preload_per_s"], m["redis_bytes_per_job"], m["peak_rss_mb"], m["worker_cpu_us_per_job"], m["redis_cpu_us_per_job"])
	case "live":
		return fmt.Sprintf("%.0f jobs/s (publish %.0f/s)", m["live_jobs_per_s"], m["live_publish_per_s"])
	case "enqueue":
		return fmt.Sprintf("%.0f/s", m["enqueue_per_s"])
	case "enqueue_batch":
		if v, ok := m["enqueue_batch_per_s"]; ok {
			return fmt.Sprintf("%.0f/s", v)
		}
		return "n/a"
	case "delayed":
		return fmt.Sprintf("lateness p50 %.1f ms, p99 %.1f ms, max %.1f ms, early %.0f",
			m["delayed_lateness_p50_ms"], m["delayed_lateness_p99_ms"], m["delayed_lateness_max_ms"], m["delayed_early"])
	}
	if rest, ok := strings.CutPrefix(w, openloopPrefix+"_"); ok {
		k := func(s string) float64 { return m[openloopPrefix+"_"+rest+"_"+s] }
		return fmt.Sprintf("latency p50 %.2f ms, p99 %.2f ms, max %.1f ms (p99 from send %.2f ms), %.0f samples, %.0f late publishes, publish %.0f/s",
			k("p50_ms"), k("p99_ms"), k("max_ms"), k("from_send_p99_ms"), k("samples"), k("late_publishes"), k("publish_per_s"))
	}
	return ""
}

// phase bounds one phase of a workload by o.timeout with a clear error.
func (r *runner) phase(ctx context.Context, what string, f func(ctx context.Context) error) error {
	pctx, cancel := context.WithTimeout(ctx, r.o.timeout)
	defer cancel()
	err := f(pctx)
	if err != nil && pctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
		return fmt.Errorf("%s did not finish within %s (-timeout): %w", what, r.o.timeout, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// consumerRun is a consumer child from READY to DONE with the measurements around it.
type consumerRun struct {
	ready cpuReadings
	done  doneMsg
	start readyMsg
	// deltas from READY to DONE
	workerCPU     time.Duration // /proc/<pid>/task/*/schedstat
	workerCPUStat time.Duration // /proc/<pid>/stat utime+stime (10 ms resolution)
	redisCPU      time.Duration // INFO cpu used_cpu_sys+used_cpu_user
	hwmKB         int64         // /proc/<pid>/status VmHWM at DONE
}

// cpuReadings are the CPU readings taken when a consumer becomes ready.
type cpuReadings struct {
	sched, stat, redis time.Duration
}

func (r *runner) readCPU(ctx context.Context, pid int) (cpuReadings, error) {
	sched, err1 := procRuntime(pid)
	stat, err2 := procCPU(pid)
	red, err3 := redisCPU(ctx, r.admin)
	return cpuReadings{sched, stat, red}, errors.Join(err1, err2, err3)
}

// startConsumer starts the child, waits for READY and takes the CPU readings.
func (r *runner) startConsumer(ctx context.Context, v, queue string, n int) (*child, *consumerRun, error) {
	c, err := startChild(r.o, v, r.addr, queue, n)
	if err != nil {
		return nil, nil, err
	}
	run := &consumerRun{}
	if err := c.await(ctx, "READY", 30*time.Second, &run.start); err != nil {
		r.stopChild(c)
		return nil, nil, err
	}
	if run.ready, err = r.readCPU(ctx, c.pid()); err != nil {
		r.stopChild(c)
		return nil, nil, err
	}
	return c, run, nil
}

// finishConsumer waits for DONE and takes the measurements at that moment (the child stays
// alive until stopped, so its /proc entries are still there).
func (r *runner) finishConsumer(ctx context.Context, c *child, run *consumerRun, p Producer) error {
	if err := c.await(ctx, "DONE", r.o.timeout, &run.done); err != nil {
		diag := ""
		if m, ierr := p.Inspect(ctx); ierr == nil {
			diag = fmt.Sprintf("; queue state: %v", m)
		}
		return fmt.Errorf("%w (-timeout)%s; consumer stderr tail:\n%s", err, diag, c.stderr.String())
	}
	end, err := r.readCPU(ctx, c.pid())
	if err != nil {
		return err
	}
	hwm, err := procStatusKB(c.pid(), "VmHWM")
	if err != nil {
		return err
	}
	run.workerCPU, run.workerCPUStat = end.sched-run.ready.sched, end.stat-run.ready.stat
	run.redisCPU, run.hwmKB = end.redis-run.ready.redis, hwm
	return nil
}

func (r *runner) stopChild(c *child) {
	if err := c.stop(); err != nil {
		r.res.warnings = append(r.res.warnings, err.Error())
		fmt.Fprintln(r.logw, "compare: warning:", err)
	}
}

func usPerJob(d time.Duration, n int) float64 {
	return float64(d) / float64(time.Microsecond) / float64(n)
}

func perSecond(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

// e2e: publish N first (no consumer running), then start the consumer process and time the
// drain from its readiness to N processed. It also measures Redis memory per queued job (the
// preload runs on an idle, freshly flushed server) and per job after the drain.
func (r *runner) e2e(ctx context.Context, sys System, queue string) (map[string]float64, error) {
	n := r.o.jobs
	p, err := sys.NewProducer(ctx, r.addr, queue)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	mem0, err := settledMemory(ctx, r.admin)
	if err != nil {
		return nil, err
	}
	rcpu0, err := redisCPU(ctx, r.admin)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := r.phase(ctx, fmt.Sprintf("preload of %d jobs", n), func(ctx context.Context) error {
		return p.Preload(ctx, n, makePayload(r.o.payloadBytes))
	}); err != nil {
		return nil, err
	}
	pubDur := time.Since(t0)
	rcpu1, err := redisCPU(ctx, r.admin)
	if err != nil {
		return nil, err
	}
	mem1, err := settledMemory(ctx, r.admin)
	if err != nil {
		return nil, err
	}

	c, run, err := r.startConsumer(ctx, sys.Name(), queue, n)
	if err != nil {
		return nil, err
	}
	defer r.stopChild(c)
	if err := r.finishConsumer(ctx, c, run, p); err != nil {
		return nil, fmt.Errorf("drain of %d jobs: %w", n, err)
	}
	drain := time.Duration(run.done.DoneNS - run.start.ReadyNS)
	m := map[string]float64{
		"e2e_jobs_per_s":               perSecond(n, drain),
		"preload_per_s":                perSecond(n, pubDur),
		"redis_bytes_per_job":          float64(mem1-mem0) / float64(n),
		"enqueue_redis_cpu_us_per_job": usPerJob(rcpu1-rcpu0, n),
		"peak_rss_mb":                  float64(run.hwmKB) / 1024,
		"worker_cpu_us_per_job":        usPerJob(run.workerCPU, n),
		"worker_cpu_us_per_job_stat":   usPerJob(run.workerCPUStat, n),
		"redis_cpu_us_per_job":         usPerJob(run.redisCPU, n),
		"cpu_us_per_job":               usPerJob(run.workerCPU+run.redisCPU, n),
		"e2e_extra_deliveries":         float64(run.done.Handled - int64(n)),
	}
	// What is left once every job is processed: conveyor must leave an empty stream and only
	// job hashes with a TTL.
	if left, err := p.Inspect(ctx); err == nil {
		r.res.setInfo(sys.Name(), "leftover", left)
	} else {
		r.res.warnings = append(r.res.warnings, fmt.Sprintf("%s: inspect after e2e: %v", sys.Name(), err))
	}
	if mem2, err := settledMemory(ctx, r.admin); err == nil {
		m["retained_bytes_per_job"] = float64(mem2-mem0) / float64(n)
	}
	return m, nil
}

// live: consumer ready first, then publish N from one producer at full speed; time from the
// first publish to N processed.
func (r *runner) live(ctx context.Context, sys System, queue string) (map[string]float64, error) {
	n := r.o.jobs
	p, err := sys.NewProducer(ctx, r.addr, queue)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	c, run, err := r.startConsumer(ctx, sys.Name(), queue, n)
	if err != nil {
		return nil, err
	}
	defer r.stopChild(c)
	t0 := time.Now()
	if err := r.phase(ctx, fmt.Sprintf("live publish of %d jobs", n), func(ctx context.Context) error {
		return p.Live(ctx, n, makePayload(r.o.payloadBytes))
	}); err != nil {
		return nil, err
	}
	pubDur := time.Since(t0)
	if err := r.finishConsumer(ctx, c, run, p); err != nil {
		return nil, fmt.Errorf("live consumption of %d jobs: %w", n, err)
	}
	total := time.Duration(run.done.DoneNS - t0.UnixNano())
	return map[string]float64{
		"live_jobs_per_s":            perSecond(n, total),
		"live_publish_per_s":         perSecond(n, pubDur),
		"live_peak_rss_mb":           float64(run.hwmKB) / 1024,
		"live_worker_cpu_us_per_job": usPerJob(run.workerCPU, n),
		"live_redis_cpu_us_per_job":  usPerJob(run.redisCPU, n),
		"live_extra_deliveries":      float64(run.done.Handled - int64(n)),
	}, nil
}

// enqueue: N/5 single publishes from one goroutine, no consumer.
func (r *runner) enqueue(ctx context.Context, sys System, queue string) (map[string]float64, error) {
	n := max(1, r.o.jobs/5)
	p, err := sys.NewProducer(ctx, r.addr, queue)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	payload := makePayload(r.o.payloadBytes)
	// One warm-up call (connection, script load) outside the timing.
	if err := p.EnqueueOne(ctx, payload); err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	rcpu0, err := redisCPU(ctx, r.admin)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := r.phase(ctx, fmt.Sprintf("%d single enqueues", n), func(ctx context.Context) error {
		for range n {
			if err := p.EnqueueOne(ctx, payload); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	d := time.Since(t0)
	rcpu1, err := redisCPU(ctx, r.admin)
	if err != nil {
		return nil, err
	}
	return map[string]float64{
		"enqueue_per_s":                    perSecond(n, d),
		"enqueue_one_redis_cpu_us_per_job": usPerJob(rcpu1-rcpu0, n),
	}, nil
}

// enqueueBatch: N jobs through the system's batch call (chunks of 1000), no consumer.
func (r *runner) enqueueBatch(ctx context.Context, sys System, queue string) (map[string]float64, error) {
	n := r.o.jobs
	p, err := sys.NewProducer(ctx, r.addr, queue)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	payload := makePayload(r.o.payloadBytes)
	if err := p.EnqueueBatch(ctx, 1, payload); errors.Is(err, errNotApplicable) {
		return map[string]float64{}, nil
	} else if err != nil {
		return nil, fmt.Errorf("enqueue batch: %w", err)
	}
	t0 := time.Now()
	if err := r.phase(ctx, fmt.Sprintf("batch enqueue of %d jobs", n), func(ctx context.Context) error {
		return p.EnqueueBatch(ctx, n, payload)
	}); err != nil {
		return nil, err
	}
	return map[string]float64{"enqueue_batch_per_s": perSecond(n, time.Since(t0))}, nil
}

// delayedCount is M, the number of delayed jobs: min(N/10, 2000).
func delayedCount(jobs int) int { return max(1, min(jobs/10, 2000)) }

// delayedDelay is each delayed job's delay.
const delayedDelay = time.Second

// delayed: with the consumer running, publish M jobs each due 1s later, spread over about 1s.
// The handler records start time minus intended due time, which the payload carries.
func (r *runner) delayed(ctx context.Context, sys System, queue string) (map[string]float64, error) {
	m := delayedCount(r.o.jobs)
	p, err := sys.NewProducer(ctx, r.addr, queue)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	c, run, err := r.startConsumer(ctx, sys.Name(), queue, m)
	if err != nil {
		return nil, err
	}
	defer r.stopChild(c)
	interval := time.Second / time.Duration(m)
	if err := r.phase(ctx, fmt.Sprintf("publish of %d delayed jobs", m), func(ctx context.Context) error {
		t0 := time.Now()
		for i := range m {
			if wait := time.Until(t0.Add(time.Duration(i) * interval)); wait > 0 {
				time.Sleep(wait)
			}
			due := time.Now().Add(delayedDelay)
			if err := p.EnqueueDelayed(ctx, makeDuePayload(due, r.o.payloadBytes), delayedDelay); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := r.finishConsumer(ctx, c, run, p); err != nil {
		return nil, fmt.Errorf("delayed jobs: %w", err)
	}
	lat := run.done.LatenessMS
	if len(lat) < m {
		return nil, fmt.Errorf("delayed jobs: %d lateness samples for %d jobs", len(lat), m)
	}
	early := 0
	for _, l := range lat {
		if l < 0 {
			early++
		}
	}
	return map[string]float64{
		"delayed_jobs":            float64(m),
		"delayed_lateness_p50_ms": percentile(lat, 50),
		"delayed_lateness_p99_ms": percentile(lat, 99),
		"delayed_lateness_max_ms": percentile(lat, 100),
		"delayed_lateness_min_ms": slices.Min(lat),
		"delayed_early":           float64(early),
	}, nil
}
