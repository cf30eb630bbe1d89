// Command cancel measures issue 19's cancel of running jobs on a private redis-server. With
// -cluster it uses a private 3-master cluster.
//
// A pipeline.Worker runs -cancels jobs at once (its Concurrency is -cancels). Each handler
// blocks until its context ends. Once all have started, a Client on a Redis client of its own
// cancels them. It stands for another process, such as `conveyor cancel` or the HTTP API. It
// cancels them one at a time, each cancel waiting for the previous one's attempt to end. With
// -burst it cancels all at once, from 16 goroutines. For each cancel it records three times.
//
// Cancel-to-context runs from just before Client.Cancel to the handler seeing its context end.
// By then the worker heard the job's canceled event, checked the job's record and revoked its
// delivery.
//
// Cancel-to-canceled runs from the same moment to the worker ending the attempt canceled. A
// middleware sees *pipeline.JobError with OutcomeCanceled. The handler has returned, its outcome
// is discarded and its slot is free.
//
// The third is the Cancel call itself. The job is canceled in Redis when it returns.
//
// It reports p50, p99 and max (nearest rank) of each. It reports how many handlers were stopped
// by the event (ErrJobCanceled) rather than by the lease renewal's fallback
// (stream.ErrLeaseLost). The worker's visibility timeout is the default, 30 s, a renewal every
// 10 s. So the figures measure the event path. With -no-events the canceling client publishes no
// event (events.None), as an older version would. The lease renewal alone then stops the
// handlers, and -visibility-timeout sets how soon.
//
//	go run ./cmd/cancel                  # 100 cancels, standalone
//	go run ./cmd/cancel -cluster         # on a 3-master cluster (sharded Pub/Sub)
//	go run ./cmd/cancel -burst           # the 100 cancels at once
//	go run ./cmd/cancel -no-events -visibility-timeout 3s
//
// It exits 1 on an error, and 2 on bad flags. A handler that never stopped within -timeout is an
// error. A target not met is reported, not an exit code. The targets are cancel-to-context p99
// under 200 ms, and cancel-to-canceled p99 under 1 s.
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
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/stream"
)

const jobType = "block"

// WorkerConfig.VisibilityTimeout's default and least value.
const (
	defaultVisibilityTimeout = 30 * time.Second
	minVisibilityTimeout     = 300 * time.Millisecond
)

type options struct {
	cancels    int
	cluster    bool
	noEvents   bool
	burst      bool
	visibility time.Duration
	jsonOut    string
	timeout    time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.cancels, "cancels", 100, "running jobs canceled, one at a time")
	fs.BoolVar(&o.cluster, "cluster", false, "run on a private 3-master cluster instead of one server")
	fs.BoolVar(&o.burst, "burst", false, "cancel all the jobs at once (16 goroutines) rather than one at a time")
	fs.BoolVar(&o.noEvents, "no-events", false, "the canceling client publishes no events: the lease renewal alone stops the handlers")
	fs.DurationVar(&o.visibility, "visibility-timeout", defaultVisibilityTimeout, "the worker's visibility timeout (a lease renewal every third of it)")
	fs.StringVar(&o.jsonOut, "json-out", "", "also write the report as JSON to this file")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound of the whole run")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.cancels < 1 || o.cancels > 10000:
		return o, fmt.Errorf("-cancels %d: want 1..10000", o.cancels)
	case o.visibility < minVisibilityTimeout:
		return o, fmt.Errorf("-visibility-timeout %s: want at least %s", o.visibility, minVisibilityTimeout)
	}
	return o, nil
}

// stats are one measure's nearest-rank percentiles, in milliseconds.
type stats struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func summarize(ds []time.Duration) stats {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(float64(len(s))*p+0.999999) - 1
		return float64(s[max(0, min(i, len(s)-1))].Microseconds()) / 1000
	}
	return stats{P50: rank(0.50), P99: rank(0.99), Max: rank(1)}
}

// report is the run's result (-json-out).
type report struct {
	Backend          string `json:"backend"`
	Cancels          int    `json:"cancels"`
	Events           bool   `json:"events"`
	Burst            bool   `json:"burst"`
	VisibilityMS     int64  `json:"visibility_timeout_ms"`
	CancelToContext  stats  `json:"cancel_to_context"`
	CancelToCanceled stats  `json:"cancel_to_canceled"`
	CancelCall       stats  `json:"cancel_call"`
	ByEvent          int    `json:"by_event"`    // handlers stopped with ErrJobCanceled
	ByRenewal        int    `json:"by_renewal"`  // with stream.ErrLeaseLost
	ContextMet       bool   `json:"context_met"` // cancel-to-context p99 under 200 ms
	CanceledMet      bool   `json:"canceled_met"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "cancel:", err)
		}
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rep, err := measure(ctx, o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "cancel:", err)
		return 1
	}
	printReport(stdout, rep)
	if o.jsonOut != "" {
		out, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(out, '\n'), 0o644); err != nil {
			fmt.Fprintln(stderr, "cancel:", err)
			return 1
		}
	}
	return 0
}

// clients starts the private server or cluster and returns two clients of it (the worker's and
// the canceler's) and a function that stops it all.
func clients(o options) (worker, canceler redis.UniversalClient, stop func(), err error) {
	if o.cluster {
		cl, err := redistest.StartClusterProcess()
		if err != nil {
			return nil, nil, nil, err
		}
		w := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
		return w, c, func() { _ = w.Close(); _ = c.Close(); _ = cl.Stop() }, nil
	}
	srv, err := redistest.StartProcess()
	if err != nil {
		return nil, nil, nil, err
	}
	w := redis.NewClient(&redis.Options{Addr: srv.Addr})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	return w, c, func() { _ = w.Close(); _ = c.Close(); _ = srv.Stop() }, nil
}

// attempt is what the worker saw of one job.
type attempt struct {
	started  chan struct{}
	stopped  chan struct{} // the handler saw its context end
	ended    chan error    // the middleware saw the attempt end
	stoppedT time.Time
	cause    error
	endedT   time.Time
}

func measure(ctx context.Context, o options, log io.Writer) (*report, error) {
	wrdb, crdb, stop, err := clients(o)
	if err != nil {
		return nil, fmt.Errorf("start redis: %w", err)
	}
	defer stop()
	if o.noEvents {
		events.SetMode(crdb, events.None)
	}
	client, err := pipeline.NewClient(crdb, pipeline.ClientConfig{})
	if err != nil {
		return nil, err
	}
	const queue = "cancel-bench"

	var mu sync.Mutex
	byID := map[string]*attempt{}
	get := func(id string) *attempt {
		mu.Lock()
		defer mu.Unlock()
		a := byID[id]
		if a == nil {
			a = &attempt{started: make(chan struct{}), stopped: make(chan struct{}), ended: make(chan error, 1)}
			byID[id] = a
		}
		return a
	}
	w, err := pipeline.NewWorker(wrdb, pipeline.WorkerConfig{Queues: []string{queue}, Concurrency: o.cancels,
		VisibilityTimeout: o.visibility, ShutdownTimeout: 5 * time.Second,
		Logger: zerolog.New(log).Level(zerolog.WarnLevel).With().Timestamp().Logger()})
	if err != nil {
		return nil, err
	}
	w.Handle(jobType, func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		a := get(j.ID)
		close(a.started)
		<-ctx.Done()
		a.stoppedT, a.cause = time.Now(), context.Cause(ctx)
		close(a.stopped)
		return nil, ctx.Err()
	})
	w.Use(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			a := get(msg.UUID)
			a.endedT = time.Now()
			a.ended <- err
			return out, err
		}
	})
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stopWorker(); <-done }()
	select {
	case <-w.Ready():
	case err := <-done:
		return nil, fmt.Errorf("worker: %w", err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}

	tasks := make([]pipeline.Task, o.cancels)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: jobType}
	}
	jobs, err := client.EnqueueBatch(ctx, queue, tasks)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		select {
		case <-get(j.ID).started:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %d running jobs: %w", o.cancels, ctx.Err())
		}
	}
	fmt.Fprintf(log, "cancel: %d jobs running; canceling them one at a time\n", o.cancels)

	rep := &report{Backend: "standalone", Cancels: o.cancels, Events: !o.noEvents, Burst: o.burst, VisibilityMS: o.visibility.Milliseconds()}
	if o.cluster {
		rep.Backend = "cluster (3 masters)"
	}
	begins := make([]time.Time, len(jobs))
	call := make([]time.Duration, len(jobs))
	cancelOne := func(i int) error {
		begins[i] = time.Now()
		if err := client.Cancel(ctx, queue, jobs[i].ID); err != nil {
			return fmt.Errorf("cancel %s: %w", jobs[i].ID, err)
		}
		call[i] = time.Since(begins[i])
		return nil
	}
	ended := func(i int) error {
		a := get(jobs[i].ID)
		var jerr error
		select {
		case jerr = <-a.ended:
		case <-ctx.Done():
			return fmt.Errorf("job %s: the attempt did not end: %w", jobs[i].ID, ctx.Err())
		}
		<-a.stopped // closed before the attempt ended
		var je *pipeline.JobError
		if !errors.As(jerr, &je) || je.Outcome != pipeline.OutcomeCanceled {
			return fmt.Errorf("job %s: the attempt ended with %v, not canceled", jobs[i].ID, jerr)
		}
		return nil
	}
	if o.burst {
		next := make(chan int)
		errs := make(chan error, len(jobs))
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for i := range next {
					errs <- cancelOne(i)
				}
			})
		}
		for i := range jobs {
			next <- i
		}
		close(next)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return nil, err
			}
		}
		for i := range jobs {
			if err := ended(i); err != nil {
				return nil, err
			}
		}
	} else {
		for i := range jobs {
			if err := cancelOne(i); err != nil {
				return nil, err
			}
			if err := ended(i); err != nil {
				return nil, err
			}
		}
	}
	var toCtx, toEnd []time.Duration
	for i, j := range jobs {
		a := get(j.ID)
		switch {
		case errors.Is(a.cause, pipeline.ErrJobCanceled):
			rep.ByEvent++
		case errors.Is(a.cause, stream.ErrLeaseLost):
			rep.ByRenewal++
		}
		toCtx = append(toCtx, a.stoppedT.Sub(begins[i]))
		toEnd = append(toEnd, a.endedT.Sub(begins[i]))
	}
	st, err := client.Stats(ctx, queue)
	if err != nil {
		return nil, err
	}
	if st.Canceled != int64(o.cancels) || st.Failed != 0 || st.Retried != 0 || st.Completed != 0 {
		return nil, fmt.Errorf("the queue's counters: canceled %d (want %d), failed %d, retried %d, completed %d",
			st.Canceled, o.cancels, st.Failed, st.Retried, st.Completed)
	}
	rep.CancelToContext, rep.CancelToCanceled, rep.CancelCall = summarize(toCtx), summarize(toEnd), summarize(call)
	rep.ContextMet = rep.CancelToContext.P99 < 200
	rep.CanceledMet = rep.CancelToCanceled.P99 < 1000
	return rep, nil
}

func printReport(w io.Writer, r *report) {
	how := "events"
	if !r.Events {
		how = "no events (lease renewal only)"
	}
	if r.Burst {
		how += ", all at once"
	}
	fmt.Fprintf(w, "%d cancels of running jobs, %s, %s, visibility timeout %s\n", r.Cancels, r.Backend, how,
		time.Duration(r.VisibilityMS)*time.Millisecond)
	fmt.Fprintf(w, "%-22s %9s %9s %9s\n", "", "p50 ms", "p99 ms", "max ms")
	for _, row := range []struct {
		name string
		s    stats
	}{{"cancel-to-context", r.CancelToContext}, {"cancel-to-canceled", r.CancelToCanceled}, {"Cancel call", r.CancelCall}} {
		fmt.Fprintf(w, "%-22s %9.2f %9.2f %9.2f\n", row.name, row.s.P50, row.s.P99, row.s.Max)
	}
	fmt.Fprintf(w, "stopped by the event: %d, by the lease renewal: %d\n", r.ByEvent, r.ByRenewal)
	fmt.Fprintf(w, "targets: cancel-to-context p99 < 200 ms: %v; cancel-to-canceled p99 < 1 s: %v\n", r.ContextMet, r.CanceledMet)
}
