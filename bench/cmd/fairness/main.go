// Command fairness checks issue 34's fairness targets as pass/fail, on a private redis-server
// (internal/redistest: loopback, no persistence), with pipeline.Client and pipeline.Worker in
// this process. It has two scenarios.
//
// Scenario weighted: three fair groups of weights 3, 2 and 1 in one queue, each with a backlog
// published before the worker starts (interleaved, so that publish order alone would give each
// a third). The handler records the order of starts. Over the first -starts starts each group's
// share must be within 10% (relative) of 3/6, 2/6 and 1/6, with every group's wait list still
// holding jobs at the last of them. The shares over every run of 300 consecutive starts are
// reported too (lowest and highest).
//
// Scenario noisy: ten tenants (groups) in one queue. Tenant 0 publishes 90% of -rate jobs/s,
// the nine others 10% together, open loop: a pacer per tenant publishes each job at its
// intended time (or as soon as it can when late), and the handler measures from that intended
// time to its start. A worker of -concurrency slots runs handlers that sleep -work, so it
// serves at most concurrency/work jobs/s; the defaults (10 slots, 2 ms) give 5,000/s, half
// the offered rate, so tenant 0's backlog grows for the whole run. It runs twice: with the fair
// groups (each job published WithGroup, the default window) and without (no group, one FIFO
// stream). It passes when, with groups, the nine's publish-to-start p99 is under -p99-bound,
// all their jobs started, and tenant 0's backlog did grow (else the run tested nothing).
//
//	go run ./cmd/fairness                          # both scenarios, full size (about a minute)
//	go run ./cmd/fairness -scenario noisy -seconds 3
//	go run ./cmd/fairness -json > fairness.json
//
// It exits 1 when a scenario fails (or errs), 2 on bad flags.
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
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

const jobType = "fair"

type options struct {
	scenario    string
	jobs        int
	starts      int
	window      int
	seconds     float64
	rate        int
	concurrency int
	work        time.Duration
	flush       time.Duration
	p99Bound    time.Duration
	json        bool
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
	fs := flag.NewFlagSet("fairness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.scenario, "scenario", "all", "weighted, noisy or all")
	fs.IntVar(&o.jobs, "jobs", 3000, "weighted: backlog of each group")
	fs.IntVar(&o.starts, "starts", 3000, "weighted: the first starts the shares are checked over")
	fs.IntVar(&o.window, "window", 0, "the queue's group window (0: the default, 20)")
	fs.Float64Var(&o.seconds, "seconds", 10, "noisy: how long each run publishes")
	fs.IntVar(&o.rate, "rate", 10000, "noisy: jobs per second offered, 90% by tenant 0")
	fs.IntVar(&o.concurrency, "concurrency", 10, "the worker's concurrency")
	fs.DurationVar(&o.work, "work", 2*time.Millisecond, "how long each handler sleeps")
	fs.DurationVar(&o.flush, "flush-interval", 0, "the worker's FlushInterval (0: its default, 2ms)")
	fs.DurationVar(&o.p99Bound, "p99-bound", 50*time.Millisecond, "noisy: the nine tenants' p99 bound with groups")
	fs.BoolVar(&o.json, "json", false, "print the report as one JSON object instead of tables")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound of the whole run")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.scenario != "all" && o.scenario != "weighted" && o.scenario != "noisy":
		return o, fmt.Errorf("-scenario %q: want weighted, noisy or all", o.scenario)
	case o.jobs < 1 || o.starts < shareSpan:
		return o, fmt.Errorf("-jobs %d -starts %d: want at least 1 job and %d starts", o.jobs, o.starts, shareSpan)
	case o.window < 0:
		return o, fmt.Errorf("-window %d: want 0 (the default) or more", o.window)
	case o.seconds <= 0 || o.rate < tenants:
		return o, fmt.Errorf("-seconds %g -rate %d: want a positive time and at least %d jobs/s", o.seconds, o.rate, tenants)
	case o.concurrency < 1 || o.work < 0 || o.flush < 0 || o.p99Bound <= 0:
		return o, errors.New("-concurrency must be at least 1, -work and -flush-interval not negative, -p99-bound positive")
	}
	return o, nil
}

// report is the run's result (-json).
type report struct {
	Weighted *weightedResult `json:"weighted,omitempty"`
	Noisy    *noisyResult    `json:"noisy,omitempty"`
	Pass     bool            `json:"pass"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "fairness:", err)
		}
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	srv, err := redistest.StartProcess()
	if err != nil {
		fmt.Fprintln(stderr, "fairness: start redis-server:", err)
		return 1
	}
	defer srv.Stop()
	b := &bench{o: o, addr: srv.Addr, log: stderr, start: time.Now()}
	b.rdb = b.client()
	defer b.rdb.Close()

	rep := report{Pass: true}
	var failed error
	if o.scenario != "noisy" {
		rep.Weighted, err = b.weighted(ctx)
		failed = errors.Join(failed, err)
		rep.Pass = rep.Pass && err == nil && rep.Weighted.Pass
	}
	if o.scenario != "weighted" && ctx.Err() == nil {
		rep.Noisy, err = b.noisy(ctx)
		failed = errors.Join(failed, err)
		rep.Pass = rep.Pass && err == nil && rep.Noisy.Pass
	}
	if o.json {
		out, _ := json.MarshalIndent(&rep, "", "  ")
		fmt.Fprintf(stdout, "%s\n", out)
	} else {
		if rep.Weighted != nil {
			printWeighted(stdout, rep.Weighted)
		}
		if rep.Noisy != nil {
			printNoisy(stdout, rep.Noisy)
		}
	}
	if failed != nil {
		fmt.Fprintln(stderr, "fairness:", failed)
	}
	if failed != nil || !rep.Pass {
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
	fmt.Fprintf(b.log, "fairness: %6.1fs "+format+"\n", append([]any{time.Since(b.start).Seconds()}, args...)...)
}

func (b *bench) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: b.addr, PoolSize: 32})
}

// fresh empties the server and creates a new queue, with the group window of -window when it
// is set, so that no run sees another's state.
func (b *bench) fresh(ctx context.Context, name string, weights map[string]int) (string, *pipeline.Client, error) {
	b.seq++
	q := fmt.Sprintf("%s-%d", name, b.seq)
	if err := b.rdb.FlushAll(ctx).Err(); err != nil {
		return "", nil, err
	}
	ins, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	if err != nil {
		return "", nil, err
	}
	if _, err := ins.CreateQueue(ctx, q, pipeline.QueueOptions{}); err != nil {
		return "", nil, err
	}
	if b.o.window > 0 || len(weights) > 0 {
		if err := ins.SetGroups(ctx, q, pipeline.GroupChange{Window: b.o.window, Weights: weights}); err != nil {
			return "", nil, err
		}
	}
	c, err := pipeline.NewClient(b.rdb, pipeline.ClientConfig{})
	return q, c, err
}

// window is the queue's group window as the run sets it.
func (b *bench) window() int {
	if b.o.window > 0 {
		return b.o.window
	}
	return keys.DefaultGroupWindow
}

// worker runs one worker on q, on a Redis client of its own, with h for every job, until the
// returned stop is called.
func (b *bench) worker(ctx context.Context, q string, h pipeline.HandlerFunc) (stop func() error, err error) {
	rdb := b.client()
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{
		Queues: []string{q}, Name: q + "-w", Concurrency: b.o.concurrency, FlushInterval: b.o.flush, ShutdownTimeout: 5 * time.Second,
		Logger: zerolog.New(b.log).Level(zerolog.WarnLevel).With().Timestamp().Logger(),
	})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	w.Handle(jobType, h)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() error {
		cancel()
		err := <-done
		rdb.Close()
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}, nil
}

// pct returns the nearest-rank p-th percentile of sorted xs (0 for none).
func pct(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	k := int(float64(len(xs))*p/100+0.999999) - 1
	return xs[min(max(k, 0), len(xs)-1)]
}

// latency summarises publish-to-start times.
type latency struct {
	Jobs int     `json:"jobs"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

func summarize(xs []time.Duration) latency {
	s := slices.Clone(xs)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return latency{Jobs: len(s), P50: ms(pct(s, 50)), P99: ms(pct(s, 99)), Max: ms(pct(s, 100))}
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
