package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/cmd/conveyor/internal/torture"
	"github.com/conveyorq/conveyor/handlers"
	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newTortureCmd) }

type tortureFlags struct {
	list, short, json, keep bool
	duration                time.Duration
	jobs                    int
	seed                    uint64
	nemeses                 []string
	workers, concurrency    int
	parallel                int
	appendFsync             string
}

func newTortureCmd(a *app) *cobra.Command {
	var tf tortureFlags
	cmd := &cobra.Command{
		Use:   "torture [NAME...] [--short] [--parallel N] [--nemesis N,...] [--json]",
		Short: "Run the torture suite: a workload under faults, checked against a ledger of its own",
		Long: `Run named torture scenarios on this machine: each starts a redis-server of its own (AOF,
appendfsync always), three worker processes (this binary's worker command) and a producer, and
while the scenario's nemeses strike on a seeded schedule (workers SIGKILLed, SIGSTOPped or
SIGTERMed, redis-server SIGKILLed and restarted or SIGSTOPped, connections cut and replies lost
by a proxy, the script cache flushed) the producer publishes plain, delayed, retried and failing
jobs. Every acknowledged publish, every handler start and end and every stored outcome is written
to a ledger of append-only files apart from Redis; at the end every job is classified: lost,
committed twice, run more often than its design needs (allowed up to faults x concurrency), run
before its due time, or run without being published. The dead set must be exactly the jobs
designed to fail, and nothing may be left pending, queued, in progress or scheduled.

--list names the scenarios; --short runs each named scenario (all when none is named) at its
short size, a few seconds; a named scenario without --short runs at its long size. --duration
and --jobs set the size, --nemesis replaces the scenario's nemeses (kill-worker, stop-worker,
term-worker, redis-restart, redis-stop, proxy-reset, script-flush, maxmemory), --seed changes the
workload and the schedule. --parallel N runs up to N scenarios at once, each on servers and
workers of its own (their log lines interleave, each naming its scenario; the report keeps the
order the scenarios were named in). The exit code is 1 when any scenario broke an invariant; the
report names the jobs and why. docs/RELIABILITY.md, "Torture suite", has the figures of recent
runs.

The cluster-* scenarios run on a Redis Cluster of 3 masters with a replica each (appendfsync
always; the producer publishes durably, waiting for the replica) with the cluster nemeses
slot-move (the queue's slot migrated to another master under load), replica-promote (CLUSTER
FAILOVER on the replica of the queue's master) and master-kill (that master SIGKILLed, its
replica takes over, the node restarts as a replica). A nemesis a scenario's topology cannot
take (proxy-reset, redis-restart or redis-stop on a cluster; a cluster nemesis on one server)
is refused (exit 2).

The sentinel-* scenarios run on a Redis Sentinel set (a master and a replica, appendfsync always
and min-replicas-to-write 1, three sentinels; the producer publishes durably, the workers get a
Sentinel URL) with the Sentinel nemeses sentinel-failover (a coordinated SENTINEL FAILOVER: the
master's writes paused until its replica has them) and sentinel-master-kill (the master
SIGKILLed, the sentinels promote the replica, the node restarts and rejoins as a replica). Those
two are refused elsewhere, and proxy-reset, redis-restart, redis-stop and the cluster nemeses on
a Sentinel set.

encryption-mixed seals payloads and results (a key file of the run's own in $CONVEYOR_KEYS) and
rotates the key under load as an operator would: the workers replaced with the new key listed
first, then the producer switched, then 'conveyor keys rotate' run again and again while the
nemeses strike, and once more at the end. Then every stored payload and result must open with
the new key alone to what was published, and no value of Redis be under the old key or plain.
cluster-encryption does the same on a cluster, under slot-move, replica-promote, master-kill
and kill-worker, and scans every master.

The clock-step nemesis steps one worker's wall clock 2 to 30 s forward or back (the worker reads
an offset from a file the suite writes, every 100 ms), holds it a tick or two, then sets it
right: what the worker stamps moves (attempt times, a retry's due time), while due times,
promotion, recovery and leases go by Redis's clock. The ledger keeps the true time, so a job
that starts before the due time its producer set is still early.`,
		Example: `  conveyor torture --list
  conveyor torture --short --json
  conveyor torture --short --parallel 4
  conveyor torture mixed --duration 30m --jobs 200000
  conveyor torture kill-worker --nemesis kill-worker,redis-stop --seed 7`,
		RunE: func(cmd *cobra.Command, args []string) error { return a.torture(cmd, args, tf) },
	}
	f := cmd.Flags()
	f.BoolVar(&tf.list, "list", false, "print the scenarios' names, one a line")
	f.BoolVar(&tf.short, "short", false, "run at the short size (every scenario when none is named)")
	f.BoolVar(&tf.json, "json", false, `print {"scenarios": [...]} with each scenario's figures`)
	f.BoolVar(&tf.keep, "keep", false, "keep each run's directory (ledgers, logs, AOF); a failed run's is always kept")
	f.DurationVar(&tf.duration, "duration", 0, "how long the nemeses strike (default the scenario's size)")
	f.IntVar(&tf.jobs, "jobs", 0, "jobs published (default the scenario's size)")
	f.Uint64Var(&tf.seed, "seed", 1, "seed of the workload and of the nemeses' schedule")
	f.StringSliceVar(&tf.nemeses, "nemesis", nil, "nemeses to use instead of the scenario's (comma-separated)")
	f.IntVar(&tf.workers, "workers", 3, "worker processes")
	f.IntVar(&tf.concurrency, "concurrency", 4, "concurrency of each worker")
	f.IntVar(&tf.parallel, "parallel", 1, "scenarios run at once")
	f.StringVar(&tf.appendFsync, "appendfsync", "always", "the redis-server's appendfsync: always, or everysec (which a crash of the host, not of the process, can lose the last second of)")
	return cmd
}

func (a *app) torture(cmd *cobra.Command, args []string, tf tortureFlags) error {
	if tf.list {
		for _, s := range torture.Scenarios() {
			fmt.Fprintln(a.stdout, s.Name)
		}
		return nil
	}
	nemeses, err := torture.ParseNemeses(tf.nemeses)
	if err != nil {
		return usageErrorf("--nemesis: %v", err)
	}
	switch {
	case len(args) == 0 && !tf.short:
		return usageErrorf("name a scenario (--list names them) or give --short")
	case tf.duration < 0 || tf.jobs < 0:
		return usageErrorf("--duration and --jobs must not be negative")
	case tf.workers < 1 || tf.concurrency < 1 || tf.parallel < 1:
		return usageErrorf("--workers, --concurrency and --parallel must be at least 1")
	case tf.appendFsync != "always" && tf.appendFsync != "everysec":
		return usageErrorf("--appendfsync must be always or everysec, not %q", tf.appendFsync)
	}
	var scs []torture.Scenario
	if len(args) == 0 {
		for _, s := range torture.Scenarios() {
			if s.Defect != "" {
				fmt.Fprintf(a.stderr, "torture: skipped %s: it finds a known defect: %s; name it to run it\n", s.Name, s.Defect)
				continue
			}
			scs = append(scs, s)
		}
	}
	for _, name := range args {
		s, err := torture.Lookup(name)
		if err != nil {
			return usageErrorf("%v", err)
		}
		scs = append(scs, s)
	}
	for _, s := range scs {
		ns := s.Nemeses
		if len(nemeses) > 0 {
			ns = nemeses
		}
		if err := torture.CheckTopology(s.Topology, ns); err != nil {
			return usageErrorf("scenario %s: %v", s.Name, strings.TrimPrefix(err.Error(), "torture: "))
		}
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	opt := torture.Options{Bin: bin, Seed: tf.seed, Nemeses: nemeses, Workers: tf.workers,
		Concurrency: tf.concurrency, AppendFsync: tf.appendFsync, Keep: tf.keep, Log: &lockedWriter{w: a.stderr}}
	results, err := runScenarios(cmd.Context(), scs, tf, opt)
	if err != nil {
		return err
	}
	failed := 0
	for _, res := range results {
		if res.Report.Failed() {
			failed++
			for _, v := range res.Report.Violations {
				fmt.Fprintf(a.stderr, "torture %s: FAILED: %s\n", res.Name, v)
			}
			if res.Dir != "" {
				fmt.Fprintf(a.stderr, "torture %s: its ledgers and logs are in %s\n", res.Name, res.Dir)
			}
		}
	}
	if tf.json {
		if err := json.NewEncoder(a.stdout).Encode(struct {
			Scenarios []*torture.Result `json:"scenarios"`
		}{results}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SCENARIO\tNEMESES\tJOBS\tFAULTS\tLOST\tDUP COMMITS\tDUP EXEC (BOUND)\tEARLY\tMAX RECOVERY\tRESULT")
		for _, r := range results {
			verdict := "ok"
			if r.Report.Failed() {
				verdict = "FAILED"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d (%d)\t%d\t%s\t%s\n", r.Name, strings.Join(r.Nemeses, ","), r.Jobs, r.Faults,
				r.Lost, r.DuplicateCommits, r.DuplicateExecutions, r.Report.ExecutionBound, r.Early,
				time.Duration(r.MaxRecoveryMS)*time.Millisecond, verdict)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d torture scenarios broke an invariant", failed, len(results))
	}
	return nil
}

// runScenarios runs scs, up to tf.parallel at once, and returns their results in scs's order.
// The first scenario that cannot run (an error, not a broken invariant) stops the rest: their
// processes are killed and their directories removed, and its error is returned.
func runScenarios(ctx context.Context, scs []torture.Scenario, tf tortureFlags, opt torture.Options) ([]*torture.Result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	results := make([]*torture.Result, len(scs))
	sem := make(chan struct{}, tf.parallel)
	var wg sync.WaitGroup
	for i, s := range scs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		size := s.Long
		if tf.short {
			size = s.Short
		}
		if tf.duration > 0 {
			size.Duration = tf.duration
		}
		if tf.jobs > 0 {
			size.Jobs = tf.jobs
		}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := torture.Run(ctx, s, size, opt)
			if err != nil {
				cancel(fmt.Errorf("torture %s: %w", s.Name, err))
				return
			}
			results[i] = res
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return results, nil
}

// lockedWriter makes each Write whole when scenarios run at once and log to one stderr.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// tortureLedger is a worker's ledger when the hidden --torture-ledger flag names a directory:
// the torture handler and the commit hook write to it. Without the flag it is nil and does
// nothing.
type tortureLedger struct{ w *torture.Writer }

// openTortureLedger opens this process's ledger file and adds the commit hook to cfg.
func (wf *workerFlags) openTortureLedger(cfg *pipeline.WorkerConfig) (*tortureLedger, error) {
	if wf.tortureLedger == "" {
		return nil, nil
	}
	w, err := torture.OpenWriter(wf.tortureLedger, fmt.Sprintf("worker-%d", os.Getpid()))
	if err != nil {
		return nil, err
	}
	cfg.Hooks.Attempts = torture.CommitHook(w, cfg.Hooks.Attempts)
	return &tortureLedger{w: w}, nil
}

// openTortureClock sets cfg.Now to the clock the clock-step nemesis steps, when the worker
// was given one; the returned function stops its reads. Without the flag nothing is read.
func (wf *workerFlags) openTortureClock(cfg *pipeline.WorkerConfig) (func(), error) {
	if wf.tortureClock == "" {
		return func() {}, nil
	}
	c, err := torture.OpenClock(wf.tortureClock, torture.ClockPoll)
	if err != nil {
		return nil, err
	}
	cfg.Now = c.Now
	return c.Close, nil
}

func (l *tortureLedger) register(r handlers.Registrar) {
	if l != nil {
		r.Handle(torture.JobType, torture.Handler(l.w))
		r.Handle(torture.LimitedType, torture.Handler(l.w))
	}
}

func (l *tortureLedger) close() {
	if l != nil {
		_ = l.w.Close()
	}
}
