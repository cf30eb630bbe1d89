// Command compare benchmarks Conveyor against asynq, the stock watermill-redisstream Subscriber
// and plain go-redis streams on one private redis-server. It prints medians and ratios.
//
// It starts its own redis-server (no persistence, loopback only). Each round runs every system's
// workloads in a rotating order. Consumers run in a separate process: this binary re-executed
// with the hidden -role consume. So peak RSS and CPU are measured per system. Producers run in
// this process. See bench/README.md for what each number means.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command-line flags, shared by the parent and the consumer child.
type options struct {
	jobs          int
	rounds        int
	jsonOut       bool
	jsonFile      string
	payloadBytes  int
	systems       []string
	convConc      int
	convBatch     int
	asynqConc     []int
	watermillSubs []int
	timeout       time.Duration
	verbose       bool
	workloads     []string
	ol            openloopOptions

	// child only
	role   string
	system string // variant name, e.g. asynq_c10
	addr   string
	queue  string
	expect int
}

// defaultWorkloads run unless -workloads says otherwise; openloop (minutes long) only when named.
var defaultWorkloads = []string{"e2e", "live", "enqueue", "enqueue_batch", "delayed"}

var allFamilies = []string{"conveyor", "asynq", "watermill", "raw"}

// optionalFamilies run only when -systems names them: conveyor_metrics is Conveyor with the
// Prometheus metrics of package metrics wired in, to measure their cost against conveyor;
// conveyor_bounded is Conveyor with a max_waiting set far above what the run publishes;
// conveyor_keys is Conveyor with payloads and results encrypted (package keyring).
var optionalFamilies = []string{"conveyor_metrics", "conveyor_bounded", "conveyor_keys"}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.jobs, "jobs", 100000, "jobs per throughput workload (N)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds; every metric is the median over rounds")
	fs.BoolVar(&o.jsonOut, "json", false, "print one JSON object instead of markdown tables")
	fs.StringVar(&o.jsonFile, "json-out", "", "also write the JSON object to this file")
	fs.IntVar(&o.payloadBytes, "payload-bytes", 100, "payload size of every job")
	fs.BoolVar(&distinctPayloads, "distinct-payloads", false, "Conveyor's systems only: stamp every job's payload with a number of its own (Redis's Lua interns equal strings once, so one payload for all is cheaper than real traffic; sealed payloads all differ)")
	systems := fs.String("systems", strings.Join(allFamilies, ","), "comma list of systems to run")
	fs.IntVar(&o.convConc, "conveyor-concurrency", 300, "Conveyor WorkerConfig.Concurrency")
	fs.IntVar(&o.convBatch, "conveyor-batch", 150, "Conveyor WorkerConfig.ReadBatch")
	asynqConc := fs.String("asynq-concurrency", "10,50", "comma list of asynq Concurrency values; the best is reported as asynq")
	wmSubs := fs.String("watermill-subs", "1,4", "comma list of watermill subscription counts; the best is reported as watermill")
	fs.DurationVar(&o.timeout, "timeout", 0, "bound of each workload phase (0: 30s + 1s per 2000 jobs)")
	workloads := fs.String("workloads", strings.Join(defaultWorkloads, ","), "comma list of workloads to run: "+strings.Join(append(slices.Clone(defaultWorkloads), openloopPrefix), ", "))
	olCheck := registerOpenloopFlags(fs, &o.ol)
	fs.BoolVar(&o.verbose, "v", false, "log progress to stderr with -json too (it always does without -json)")
	// Hidden: the consumer child.
	fs.StringVar(&o.role, "role", "", "internal: consume")
	fs.StringVar(&o.system, "system", "", "internal: variant to consume with")
	fs.StringVar(&o.addr, "redis", "", "internal: redis address")
	fs.StringVar(&o.queue, "queue", "", "internal: queue or stream")
	fs.IntVar(&o.expect, "expect", 0, "internal: jobs to process before reporting DONE")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.asynqConc, err = intList(*asynqConc); err != nil {
		return o, fmt.Errorf("-asynq-concurrency: %w", err)
	}
	if o.watermillSubs, err = intList(*wmSubs); err != nil {
		return o, fmt.Errorf("-watermill-subs: %w", err)
	}
	if err := olCheck(); err != nil {
		return o, err
	}
	for _, w := range strings.Split(*workloads, ",") {
		if w = strings.TrimSpace(w); w == "" {
			continue
		}
		if !slices.Contains(defaultWorkloads, w) && w != openloopPrefix {
			return o, fmt.Errorf("-workloads: unknown workload %q", w)
		}
		o.workloads = append(o.workloads, w)
	}
	if len(o.workloads) == 0 {
		return o, errors.New("-workloads: none selected")
	}
	for _, s := range strings.Split(*systems, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		known := false
		for _, f := range append(slices.Clone(allFamilies), optionalFamilies...) {
			known = known || f == s
		}
		if !known {
			return o, fmt.Errorf("-systems: unknown system %q (known: %s)", s,
				strings.Join(append(slices.Clone(allFamilies), optionalFamilies...), ", "))
		}
		o.systems = append(o.systems, s)
	}
	switch {
	case len(o.systems) == 0:
		return o, errors.New("-systems: none selected")
	case o.jobs < 100:
		return o, errors.New("-jobs must be at least 100")
	case o.rounds < 1:
		return o, errors.New("-rounds must be at least 1")
	case o.payloadBytes < 32:
		return o, errors.New("-payload-bytes must be at least 32 (the delayed workload carries its due time in it)")
	case o.convConc < 1 || o.convBatch < 1:
		return o, errors.New("-conveyor-concurrency and -conveyor-batch must be positive")
	}
	if o.timeout == 0 {
		o.timeout = 30*time.Second + time.Duration(o.jobs/2000)*time.Second
	}
	return o, nil
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad value %q", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(2)
	}
	if o.role == "consume" {
		os.Exit(runChild(o))
	}
	if o.role != "" {
		fmt.Fprintf(os.Stderr, "compare: unknown -role %q\n", o.role)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runParent(ctx, o, os.Stdout, os.Stderr))
}
