package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/handlers"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

func init() { addCommand(newDemoCmd) }

// The demo's setup: a few workers with short retry delays, so that a whole run of retries,
// delays and dead jobs fits in a few seconds.
const (
	demoWorkers     = 3
	demoConcurrency = 4
	demoDeadline    = 15 * time.Second // for all jobs to finish
	// demoVisibility is short so that the jobs of the worker the demo kills come back soon.
	demoVisibility = 1500 * time.Millisecond
)

var demoBackoff = pipeline.Backoff{Base: 100 * time.Millisecond, Max: time.Second}

// demoKind is one kind of job the demo publishes, and what it shows.
type demoKind struct {
	jobType string
	count   int
	shows   string
	task    func(i int) pipeline.Task
}

// demoMix is what the demo publishes.
var demoMix = []demoKind{
	{handlers.TypeEcho, 12, "returns its payload as its result", func(i int) pipeline.Task {
		return pipeline.Task{Type: handlers.TypeEcho, Payload: fmt.Appendf(nil, `{"hello":"world","n":%d}`, i)}
	}},
	{handlers.TypeSleep, 8, "waits 0.5-1.6s as a delayed job, then sleeps 200-550ms", func(i int) pipeline.Task {
		return pipeline.Task{Type: handlers.TypeSleep, Payload: fmt.Appendf(nil, `{"ms":%d}`, 200+50*i),
			Opts: []pipeline.Option{pipeline.WithDelay(500*time.Millisecond + time.Duration(i)*150*time.Millisecond)}}
	}},
	{handlers.TypeFlaky, 5, "fails twice, is retried with backoff, completes on attempt 3", func(int) pipeline.Task {
		return pipeline.Task{Type: handlers.TypeFlaky, Payload: []byte(`{"fail_times":2}`)}
	}},
	{handlers.TypeFail, 3, "always fails: 3 attempts (max retries 2), then the dead set", func(int) pipeline.Task {
		return pipeline.Task{Type: handlers.TypeFail, Payload: []byte(`{"message":"demo: this job always fails"}`),
			Opts: []pipeline.Option{pipeline.WithMaxRetries(2)}}
	}},
}

func newDemoCmd(a *app) *cobra.Command {
	var pf produceFlags
	var serveAddr string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch jobs run, retry, wait and die on three in-process workers",
		Long: `Publish a mix of jobs (immediate, delayed, flaky, failing) to a fresh queue, run them on
three in-process workers, show progress and print a summary. It takes a few seconds.

The demo uses the Redis of --redis or $CONVEYOR_REDIS_URL when one is given, and an embedded
in-process Redis otherwise, so it runs anywhere. On a real Redis it works in a queue of its own
(demo-<random>) and deletes that queue's keys at the end.

With --produce-only it runs no workers: it publishes a steady mix of demo jobs to --queue on
the configured Redis (one every --every; echo, sleep, delayed, flaky, and now and then a
poison job that always fails with no retries) until SIGINT or SIGTERM, or --count jobs, for
workers elsewhere to run (the Docker Compose demo's producer).

With --serve ADDR it also serves the HTTP API and the dashboard on ADDR while it runs (open the
URL it prints to watch the jobs move), and after the summary it keeps serving, with the two
workers that were not killed still running (a dead job replayed from the dashboard runs), until
SIGINT or SIGTERM, then exits 0. A non-loopback ADDR needs $` + envAPIToken + `.`,
		Example: `  conveyor demo
  conveyor demo --serve 127.0.0.1:8080
  conveyor demo --produce-only --queue demo --every 200ms --redis redis://localhost:6379/0`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			serving := cmd.Flags().Changed("serve")
			if pf.only {
				if serving {
					return usageErrorf("--serve does not go with --produce-only (run 'conveyor serve' beside it)")
				}
				if pf.count == 0 {
					// Producing until stopped, a signal is its normal end: exit 0 then.
					cmd.Annotations = map[string]string{annotationEndsOnSignal: ""}
				}
				return a.produce(cmd, &pf)
			}
			if pf.changed(cmd) {
				return usageErrorf("--queue, --every and --count go with --produce-only")
			}
			var token string
			if serving {
				var err error
				if token, err = checkDemoServe(serveAddr, a.getenv); err != nil {
					return err
				}
				// Serving, the demo's normal end is Ctrl-C after the summary: exit 0 then.
				cmd.Annotations = map[string]string{annotationEndsOnSignal: ""}
			}
			logs := a.log
			if !cmd.Flags().Changed("log-level") {
				logs = logs.Level(zerolog.ErrorLevel) // the summary tells the story
			}
			return a.demo(cmd.Context(), logs, demoServe{on: serving, addr: serveAddr, token: token, log: a.log})
		},
	}
	pf.flags(cmd)
	cmd.Flags().StringVar(&serveAddr, "serve", "", "also serve the HTTP API and dashboard on this host:port, and keep serving after the summary until Ctrl-C")
	return cmd
}

// demoRun is one run of the demo.
type demoRun struct {
	out, progress io.Writer
	queue, prefix string
	connect       func() (redis.UniversalClient, error)
	conns         []redis.UniversalClient
	client        *pipeline.Client
	logs          zerolog.Logger
	serve         demoServe
}

// demoServe is demo --serve's setting.
type demoServe struct {
	on          bool
	addr, token string
	log         zerolog.Logger // the server's log: the command's, not the demo's quieted one
}

func (a *app) demo(ctx context.Context, logs zerolog.Logger, serve demoServe) (err error) {
	d := &demoRun{out: a.stdout, progress: a.stderr, queue: "demo-" + randomHex(3), prefix: a.prefix, logs: logs, serve: serve}
	defer d.closeConns()
	if a.redisChosen() {
		fmt.Fprintf(d.out, "Using Redis at %s, in queue %s (its keys are deleted at the end).\n",
			redactURL(a.redisURL), d.queue)
		d.connect = func() (redis.UniversalClient, error) { return a.dial() }
	} else {
		if a.cluster {
			return usageErrorf("--cluster needs a Redis URL: give --redis or set %s", envRedisURL)
		}
		m, err := startEmbeddedRedis()
		if err != nil {
			return err
		}
		defer m.Close()
		fmt.Fprintf(d.out, "Using an embedded in-process Redis (set %s or --redis to use a real one).\n", envRedisURL)
		d.connect = func() (redis.UniversalClient, error) {
			return redis.NewClient(&redis.Options{Addr: m.Addr()}), nil
		}
	}
	rdb, err := d.open()
	if err != nil {
		return err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = rdb.Ping(pingCtx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("cannot reach Redis at %s: %w", redactURL(a.redisURL), err)
	}
	if a.redisChosen() {
		defer func() {
			// Clean up even when interrupted: ctx may be done.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if cerr := deleteQueue(cctx, rdb, d.prefix, d.queue); cerr != nil {
				err = errors.Join(err, fmt.Errorf("delete the demo's keys (%s:{%s}:*): %w", d.prefix, d.queue, cerr))
			}
		}()
	}
	if d.client, err = pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: d.prefix}); err != nil {
		return err
	}
	return d.run(ctx)
}

// startEmbeddedRedis starts the demo's in-process Redis, with TTLs that run out with the
// clock as on a real server. By default miniredis expires keys only when a test moves its
// time forward: the recovery lock of a worker the demo killed mid-scan would then never
// expire, and no survivor would recover that queue again. TIME, stream ids and idle times
// already follow the wall clock.
func startEmbeddedRedis() (*miniredis.Miniredis, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, fmt.Errorf("start the embedded Redis: %w", err)
	}
	m.ClockTTL(true)
	return m, nil
}

func (d *demoRun) run(ctx context.Context) error {
	start := time.Now()
	var srv *demoServer
	if d.serve.on {
		var err error
		srv, err = startDemoServer(d.serve.addr, d.serve.token, d.client, d.serve.log.With().Str("component", "api").Logger())
		if err != nil {
			return err
		}
		defer func() { _ = srv.stop() }()
		fmt.Fprintf(d.out, "Serving the dashboard at %s#/queues/%s (the API under %sv1/).\n", srv.url, d.queue, srv.url)
	}
	workers, attempts, crash, stop, err := d.startWorkers(ctx)
	if err != nil {
		return err
	}
	var tasks []pipeline.Task
	var parts []string
	for _, k := range demoMix {
		for i := range k.count {
			tasks = append(tasks, k.task(i))
		}
		parts = append(parts, fmt.Sprintf("%d %s", k.count, k.jobType))
	}
	fmt.Fprintf(d.out, "Started %d workers (demo-worker-1..%d, %d jobs at a time each).\n",
		demoWorkers, demoWorkers, demoConcurrency)
	published := time.Now()
	jobs, err := d.client.EnqueueBatch(ctx, d.queue, tasks)
	if err != nil {
		stop()
		return fmt.Errorf("publish: %w", err)
	}
	fmt.Fprintf(d.out, "Published %d jobs: %s.\n", len(jobs), strings.Join(parts, ", "))

	killed := make(chan killReport, 1)
	kctx, kcancel := context.WithCancel(ctx)
	go func() { killed <- d.killOne(kctx, crash) }()
	watchErr := d.watch(ctx, len(jobs))
	kcancel()
	report := <-killed
	if srv == nil {
		stop() // workers drain and return
	} else {
		defer stop() // the survivors keep running while the dashboard is served
	}
	if ctx.Err() != nil {
		return errors.New("demo interrupted")
	}
	final := make([]*pipeline.Job, 0, len(jobs))
	for _, j := range jobs {
		got, err := d.client.Get(ctx, d.queue, j.ID)
		if err != nil {
			return fmt.Errorf("read job %s: %w", j.ID, err)
		}
		final = append(final, got)
	}
	d.summary(final, workers, attempts, published, start, report)
	if srv == nil || watchErr != nil {
		return watchErr
	}
	fmt.Fprintf(d.out, "\nStill serving the dashboard at %s#/queues/%s, with %s still running;\n"+
		"replay a dead job there and watch it run. Ctrl-C stops.\n", srv.url, d.queue, survivors(workers, report.worker))
	<-ctx.Done()
	fmt.Fprintln(d.out, "Stopping.")
	if err := srv.stop(); err != nil {
		return err
	}
	return nil
}

// survivors names the workers that were not killed: "demo-worker-1 and demo-worker-3".
func survivors(workers []string, killed string) string {
	var alive []string
	for _, w := range workers {
		if w != killed {
			alive = append(alive, w)
		}
	}
	if len(alive) < 2 {
		return strings.Join(alive, "")
	}
	return strings.Join(alive[:len(alive)-1], ", ") + " and " + alive[len(alive)-1]
}

// killReport says which worker the demo killed, when, and what it held.
type killReport struct {
	worker string
	after  time.Duration
	held   int
}

// crash is how the demo kills a worker, to show recovery. The victim is the first worker to
// start a sleep job. Sleep jobs are the delayed ones, due from 500ms on, so it dies mid-run.
// From that moment the victim holds every job it runs until the kill, which follows at once.
// So it dies holding at least one job, however fast its jobs are and however loaded the
// machine. Waiting to see it hold one, as the demo did, could miss them all.
type crash struct {
	victim   atomic.Int32    // the victim's number (1-based); 0 until one starts a sleep job
	picked   chan int        // the victim's number, once
	killed   chan struct{}   // closed after the kill: the jobs the victim held return
	inflight []*atomic.Int64 // per worker, the jobs it runs now
	kill     func(i int)     // crashes worker i: its connection, then its context
}

// hold wraps worker i's handler h (for jobs of type jobType) with the crash's rules.
func (c *crash) hold(i int, jobType string, h pipeline.HandlerFunc) pipeline.HandlerFunc {
	return func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		c.inflight[i-1].Add(1)
		defer c.inflight[i-1].Add(-1)
		if jobType == handlers.TypeSleep && c.victim.CompareAndSwap(0, int32(i)) {
			c.picked <- i
		}
		res, err := h(ctx, j)
		if c.victim.Load() == int32(i) {
			select { // only the kill ends the job (or the demo's end, if interrupted first)
			case <-c.killed:
			case <-ctx.Done():
			}
		}
		return res, err
	}
}

// killOne kills the victim as soon as it is picked, as a crash would. Its connection to Redis
// goes first, so it cannot put its jobs back or write their outcomes. Its leases expire, and
// the other workers recover the jobs after the visibility timeout. It gives up when ctx ends.
func (d *demoRun) killOne(ctx context.Context, c *crash) killReport {
	start := time.Now()
	select {
	case <-ctx.Done():
		return killReport{}
	case i := <-c.picked:
		c.kill(i)
		held := c.inflight[i-1].Load() // no job starts once its connection is closed
		close(c.killed)
		return killReport{worker: fmt.Sprintf("demo-worker-%d", i), after: time.Since(start), held: int(held)}
	}
}

// startWorkers runs demoWorkers workers, each on its own connection, and waits until they
// consume. The crash kills one of them (see killOne); stop cancels the others and waits for
// them to drain.
func (d *demoRun) startWorkers(ctx context.Context) (names []string, attempts []*atomic.Int64, c *crash, stop func(), err error) {
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	var ready []<-chan struct{}
	var conns []redis.UniversalClient
	var cancels []context.CancelFunc
	c = &crash{picked: make(chan int, 1), killed: make(chan struct{}), inflight: make([]*atomic.Int64, demoWorkers)}
	for i := range c.inflight {
		c.inflight[i] = new(atomic.Int64) // all before any worker runs: the handlers read the slice
	}
	c.kill = func(i int) {
		_ = conns[i-1].Close()
		cancels[i-1]()
	}
	for i := 1; i <= demoWorkers; i++ {
		rdb, err := d.open()
		if err != nil {
			stop()
			return nil, nil, nil, nil, err
		}
		ictx, icancel := context.WithCancel(wctx)
		conns, cancels = append(conns, rdb), append(cancels, icancel)
		// What the victim says once picked (no Redis) is the demo's point, not news.
		logs := d.logs.Hook(zerolog.HookFunc(func(e *zerolog.Event, _ zerolog.Level, _ string) {
			if c.victim.Load() == int32(i) {
				e.Discard()
			}
		}))
		w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{
			Queues:            []string{d.queue},
			Prefix:            d.prefix,
			Name:              fmt.Sprintf("demo-worker-%d", i),
			Concurrency:       demoConcurrency,
			Backoff:           demoBackoff,
			VisibilityTimeout: demoVisibility,
			RecoveryInterval:  200 * time.Millisecond,
			ShutdownTimeout:   2 * time.Second,
			Logger:            logs,
		})
		if err != nil {
			stop()
			return nil, nil, nil, nil, err
		}
		n := new(atomic.Int64)
		handlers.Register(countAttempts{w, n, i, c})
		names, attempts = append(names, w.Name()), append(attempts, n)
		ready = append(ready, w.Ready())
		wg.Go(func() {
			if err := w.Run(ictx); err != nil {
				d.logs.Error().Err(err).Str("worker", w.Name()).Msg("demo worker stopped")
			}
		})
	}
	timeout := time.After(10 * time.Second)
	for _, r := range ready {
		select {
		case <-r:
		case <-timeout:
			stop()
			return nil, nil, nil, nil, errors.New("the demo's workers did not start within 10s")
		case <-ctx.Done():
			stop()
			return nil, nil, nil, nil, errors.New("demo interrupted")
		}
	}
	return names, attempts, c, stop, nil
}

// countAttempts registers handlers that count the attempts they run.
type countAttempts struct {
	r     pipeline.Registrar
	n     *atomic.Int64
	i     int    // the worker's number
	crash *crash // holds the victim's jobs until the kill
}

func (c countAttempts) Handle(jobType string, h pipeline.HandlerFunc) {
	h = c.crash.hold(c.i, jobType, h)
	c.r.Handle(jobType, func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		c.n.Add(1)
		return h(ctx, j)
	})
}

// watch shows progress until total jobs have finished: a progress bar on a terminal, a line
// a second otherwise. It gives up after demoDeadline.
func (d *demoRun) watch(ctx context.Context, total int) error {
	var bar *progressbar.ProgressBar
	if isTerminal(d.progress) {
		bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(d.progress),
			progressbar.OptionSetWidth(20),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionShowDescriptionAtLineEnd(),
		)
	}
	deadline := time.Now().Add(demoDeadline)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastLine time.Time
	for {
		st, err := d.client.Stats(ctx, d.queue)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if st != nil {
			done := int(st.Completed + st.Failed + st.Canceled)
			finished := done >= total
			switch {
			case bar != nil:
				// Short enough for an 80-column terminal beside the bar.
				_ = bar.Set(done)
				bar.Describe(fmt.Sprintf("%d ok, %d dead, %d waiting, %d running",
					st.Completed, st.Failed, st.Scheduled, st.Queued+st.InProgress))
				if finished {
					_ = bar.Finish()
					fmt.Fprintln(d.progress)
				}
			case finished || time.Since(lastLine) >= time.Second:
				fmt.Fprintf(d.progress, "  %d/%d finished: %d completed, %d dead; %d waiting (delayed or retrying), %d queued, %d in progress\n",
					done, total, st.Completed, st.Failed, st.Scheduled, st.Queued, st.InProgress)
				lastLine = time.Now()
			}
			if finished {
				return nil
			}
		}
		if time.Now().After(deadline) {
			if bar != nil {
				_ = bar.Exit()
				fmt.Fprintln(d.progress)
			}
			return fmt.Errorf("not every job finished within %s", demoDeadline)
		}
		select {
		case <-ctx.Done():
			if bar != nil {
				_ = bar.Exit()
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// summary prints what happened: jobs by type, by status and by worker, and the time it took.
func (d *demoRun) summary(jobs []*pipeline.Job, workers []string, attempts []*atomic.Int64, published, start time.Time, killed killReport) {
	type row struct{ jobs, completed, failed, attempts int }
	byType := map[string]*row{}
	byStatus := map[status.Status]int{}
	lastRan := map[string]int{}
	var all row
	var last time.Time
	var failedExample, flakyExample *pipeline.Job
	for _, j := range jobs {
		r := byType[j.Type]
		if r == nil {
			r = &row{}
			byType[j.Type] = r
		}
		for _, r := range []*row{r, &all} {
			r.jobs++
			r.attempts += j.Attempt
			switch j.Status {
			case status.Completed:
				r.completed++
			case status.Failed:
				r.failed++
			}
		}
		byStatus[j.Status]++
		lastRan[j.Worker]++
		if j.CompletedAt.After(last) {
			last = j.CompletedAt
		}
		if j.Status == status.Failed && failedExample == nil {
			failedExample = j
		}
		if j.Type == handlers.TypeFlaky && j.Status == status.Completed && flakyExample == nil {
			flakyExample = j
		}
	}

	w := d.out
	fmt.Fprintf(w, "\nJobs by type\n")
	t := newTable(w)
	fmt.Fprintln(t, "  TYPE\tJOBS\tCOMPLETED\tDEAD\tATTEMPTS\tWHAT IT SHOWS")
	for _, k := range demoMix {
		r := byType[k.jobType]
		if r == nil {
			r = &row{}
		}
		fmt.Fprintf(t, "  %s\t%d\t%d\t%d\t%d\t%s\n", k.jobType, r.jobs, r.completed, r.failed, r.attempts, k.shows)
	}
	fmt.Fprintf(t, "  all\t%d\t%d\t%d\t%d\t\n", all.jobs, all.completed, all.failed, all.attempts)
	_ = t.Flush()

	fmt.Fprintf(w, "\nJobs by status\n")
	t = newTable(w)
	// The outcomes first, then the rest in the order of a job's life.
	order := []status.Status{status.Completed, status.Failed}
	for _, s := range status.All() {
		if !slices.Contains(order, s) {
			order = append(order, s)
		}
	}
	for _, s := range order {
		n := byStatus[s]
		if n == 0 && s != status.Completed && s != status.Failed {
			continue
		}
		note := ""
		switch s {
		case status.Completed:
			if flakyExample != nil {
				note = fmt.Sprintf("e.g. flaky %s: completed on attempt %d with %s; last error kept: %q",
					flakyExample.ID, flakyExample.Attempt, flakyExample.Result, flakyExample.LastError)
			}
		case status.Failed:
			if failedExample != nil {
				note = fmt.Sprintf("in the dead set, e.g. %s after %d attempts: %q",
					failedExample.ID, failedExample.Attempt, failedExample.LastError)
			}
		default:
			note = "unfinished"
		}
		fmt.Fprintf(t, "  %s\t%d\t%s\n", s.Word(), n, note)
	}
	_ = t.Flush()

	fmt.Fprintf(w, "\nJobs by worker\n")
	t = newTable(w)
	fmt.Fprintln(t, "  WORKER\tATTEMPTS RUN\tJOBS IT FINISHED")
	for i, name := range workers {
		note := ""
		if name == killed.worker {
			note = "  (killed)"
		}
		fmt.Fprintf(t, "  %s\t%d\t%d%s\n", name, attempts[i].Load(), lastRan[name], note)
	}
	_ = t.Flush()
	if killed.worker != "" {
		recovered := 0
		for _, j := range jobs {
			if strings.Contains(j.LastError, "lost: worker "+killed.worker) {
				recovered++
			}
		}
		fmt.Fprintf(w, "\nRecovery: %s was killed %s after publishing, holding %s. Its leases expired and\n"+
			"the other workers recovered %s after the %s visibility timeout (each lost run counts\n"+
			"as an attempt); none was lost.\n",
			killed.worker, killed.after.Round(10*time.Millisecond), plural(killed.held, "job"),
			plural(recovered, "job"), demoVisibility)
	}

	elapsed := time.Since(start).Round(10 * time.Millisecond)
	if !last.IsZero() {
		fmt.Fprintf(w, "\nElapsed: %s in all; %s from publishing to the last job finishing.\n",
			elapsed, last.Sub(published).Round(10*time.Millisecond))
	} else {
		fmt.Fprintf(w, "\nElapsed: %s.\n", elapsed)
	}
	self := selfCommand(os.Args[0], buildVersion())
	fmt.Fprintf(w, `
Next, with a Redis of your own (CONVEYOR_REDIS_URL or --redis), in two terminals:
  %[1]s worker
  %[1]s publish --type echo --payload '{"hello":"world"}'   # prints the job id
  %[1]s status <id>
`, self)
}

// selfCommand is how a person runs this binary again, for the hints it prints: "conveyor", or,
// for a binary that `go run` built (its path is in the go-build cache, argv0), the go run
// command: "go run ./cmd/conveyor" in a checkout (version "(devel)"), else the module path at
// the version that ran. A `go run` user has no conveyor on PATH.
func selfCommand(argv0, version string) string {
	dir := filepath.ToSlash(filepath.Dir(argv0))
	if !strings.Contains(dir, "/go-build") || !strings.HasSuffix(dir, "/exe") {
		return "conveyor"
	}
	if version == "" || version == "(devel)" {
		return "go run ./cmd/conveyor"
	}
	return "go run github.com/conveyorq/conveyor/cmd/conveyor@" + version
}

// buildVersion is the main module's version as the build recorded it ("(devel)" in a
// checkout); "" when unknown.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return ""
}

func (d *demoRun) open() (redis.UniversalClient, error) {
	rdb, err := d.connect()
	if err != nil {
		return nil, err
	}
	d.conns = append(d.conns, rdb)
	return rdb, nil
}

func (d *demoRun) closeConns() {
	for _, c := range d.conns {
		_ = c.Close()
	}
}

// deleteQueue deletes a throwaway queue (the demo's, the benchmark's) with all its keys, busy or
// not; a queue that never got a key is no error.
func deleteQueue(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) error {
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	if err != nil {
		return err
	}
	err = insp.DeleteQueue(ctx, queue, true)
	if errors.Is(err, pipeline.ErrQueueNotFound) {
		return nil
	}
	return err
}

// plural says "1 job", "3 jobs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
