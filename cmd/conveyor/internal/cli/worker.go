package cli

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/handlers"
	"github.com/conveyorq/conveyor/keyspace"
	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newWorkerCmd) }

// maxQueueWeight bounds a --queue weight.
const maxQueueWeight = 1000

type workerFlags struct {
	queues           []string
	strictPriority   bool // --strict-priority: WorkerConfig.StrictPriority
	concurrency      int
	backoffBase      time.Duration
	backoffMax       time.Duration
	visibility       time.Duration
	recoveryInterval time.Duration
	shutdownTimeout  time.Duration
	retention        time.Duration
	name             string
	waitReplicas     int           // --wait-replicas: WorkerConfig.Replicas
	waitTimeout      time.Duration // --wait-timeout: WorkerConfig.ReplicaTimeout

	heartbeat time.Duration // --heartbeat-interval; 0 turns the heartbeat off
	cron      []string      // --cron 'SPEC TYPE PAYLOAD': schedules into the first --queue (schedules.go)

	queuesGiven bool // --queue was given (an empty one is an error, not the default queue)

	metricsAddr string          // --metrics-addr: serve /metrics there; empty: off
	httpAllow   []string        // --http-allow: destinations the http handler may reach
	guard       *handlers.Guard // made from httpAllow by config

	tortureLedger string // hidden --torture-ledger: run the torture handler, writing there (torture.go)
	tortureClock  string // hidden --torture-clock-file: the worker's clock offset, for the clock-step nemesis
}

// checkReplicas validates --wait-replicas and --wait-timeout, which worker and publish share:
// replicas in 0..maxReplicas, and a timeout that is positive when replicas are awaited.
func checkReplicas(replicas int, timeout time.Duration) error {
	var errs []error
	if replicas < 0 || replicas > maxReplicas {
		errs = append(errs, usageErrorf("--wait-replicas must be in 0..%d, not %d", maxReplicas, replicas))
	}
	if timeout < 0 || replicas > 0 && timeout == 0 {
		errs = append(errs, usageErrorf("--wait-timeout must be positive, not %s", timeout))
	}
	return errors.Join(errs...)
}

// drainNote logs, as soon as the first signal arrives, what the worker is waiting for.
func drainNote(a *app, w *pipeline.Worker, timeout time.Duration) {
	n := w.Running()
	a.log.Info().Str("worker", w.Name()).Int("running", n).Dur("shutdown_timeout", timeout).
		Msgf("draining %s (up to %s); signal again to stop now", plural(n, "job"), timeout)
}

func newWorkerCmd(a *app) *cobra.Command {
	var wf workerFlags
	cmd := &cobra.Command{
		Use:   "worker [--queue Q]... [--concurrency N]",
		Short: "Run the ready handlers on queues until SIGINT or SIGTERM",
		Long: `Run the ready handlers (echo, sleep, fail, flaky, http, noop; 'conveyor handlers' lists
their payloads, with examples) on the given queues until SIGINT or SIGTERM. Each worker also
promotes due delayed jobs and recovers jobs whose worker died, so any number of workers may
run side by side.

A failed attempt is retried after a delay that doubles from --backoff-base up to --backoff-max,
with jitter. On SIGINT or SIGTERM the worker says how many jobs it is draining, stops reading,
lets running jobs finish for up to --shutdown-timeout, puts back what did not finish, and exits
0: a signal is its normal way to end. A second signal ends it at once.

--metrics-addr serves Prometheus metrics on GET /metrics at that address: the worker's jobs by
outcome, durations, queue latency, scheduler, recoverer and Redis errors, and its queues' depths
and counters (read at most every 5s, whatever the scrape rate). README's Metrics section lists
every series.

The http handler refuses loopback, private, link-local (cloud metadata) and unspecified
destinations, checked on the address dialed; --http-allow names a CIDR prefix, an address or a
host name it may reach all the same (repeatable).

While Redis is unreachable the worker waits and retries, logging one line per backoff step and
one line when Redis is back. Give every worker of a queue its own --name (the default is
unique): a worker warns at start when a worker with its name was active in its queues within
the visibility timeout.

With --wait-replicas N each write of job outcomes waits until N replicas of the Redis master
have it. Outcomes fewer replicas confirm within --wait-timeout are on the master already: they
are logged (at most every 10s), not written again; if the master then fails before a replica
has them, their jobs run again.

--queue NAME=WEIGHT weighs the queues against each other when they compete for the worker's
slots: under a flood of work each gets a share of the jobs started in proportion to its weight
(a plain --queue NAME weighs 1), so a low queue still gets its share; while slots are free every
queue is read at once. With --strict-priority the weights are ranks: no queue is read while one
of a higher weight has work. A paused queue ('conveyor pause') is not read at all.

--cron 'SPEC TYPE [PAYLOAD]' (repeatable) is a periodic schedule into the first --queue: SPEC is a
cron expression (6 fields, seconds first, or 5; CRON_TZ=Zone first for a time zone), a
descriptor (@daily) or @every D; then the job type; then the JSON payload, if any. The worker
stores it in Redis at start, named cron-TYPE-HASH, and every worker runs the stored schedules:
each tick makes one job however many workers run ('conveyor schedules').`,
		Example: `  conveyor worker
  conveyor worker --queue emails --queue reports --concurrency 50 --backoff-max 1h
  conveyor worker --queue critical=6 --queue default=3 --queue low=1
  conveyor worker --queue critical=3 --queue low=1 --strict-priority
  conveyor worker --queue reports --cron '0 0 3 * * * echo {"report":"nightly"}' --cron '@every 30s noop'`,
		Args:        noArgs,
		Annotations: map[string]string{annotationEndsOnSignal: ""},
		RunE: func(cmd *cobra.Command, _ []string) error {
			wf.queuesGiven = cmd.Flags().Changed("queue")
			cfg, err := wf.config()
			if err != nil {
				return err
			}
			cfg.Keys = a.keys // encryption at rest (--keys)
			rdb, err := a.redis()
			if err != nil {
				return err
			}
			a.warnEviction(cmd.Context())
			cfg.Prefix, cfg.Logger = a.prefix, a.log
			stopMetrics, err := a.workerMetrics(wf.metricsAddr, rdb, &cfg)
			if err != nil {
				return err
			}
			defer stopMetrics() // after Run: a draining worker is still scraped
			ledger, err := wf.openTortureLedger(&cfg)
			if err != nil {
				return err
			}
			defer ledger.close()
			stopClock, err := wf.openTortureClock(&cfg)
			if err != nil {
				return err
			}
			defer stopClock()
			w, err := pipeline.NewWorker(rdb, cfg)
			if err != nil {
				return err
			}
			handlers.RegisterWith(w, wf.handlerOptions(a.log))
			ledger.register(w)
			a.log.Info().Str("worker", w.Name()).Str("redis", redactURL(a.redisURL)).
				Strs("handlers", slices.Sorted(maps.Keys(handlers.All()))).
				Msg("starting worker; SIGINT or SIGTERM stops it")
			ctx := cmd.Context()
			noted := make(chan struct{})
			stopNote := context.AfterFunc(ctx, func() {
				defer close(noted)
				drainNote(a, w, cfg.ShutdownTimeout)
			})
			defer func() {
				if !stopNote() {
					<-noted // it ran, or runs now: the command's output ends with it
				}
			}()
			return w.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringSliceVarP(&wf.queues, "queue", "q", []string{pipeline.DefaultQueue}, "queue to consume, NAME or NAME=WEIGHT (repeatable, or comma-separated); weights share the worker's slots among its queues")
	f.BoolVar(&wf.strictPriority, "strict-priority", false, "read the queue of the highest --queue weight first, the next only while it has no work")
	f.IntVarP(&wf.concurrency, "concurrency", "c", defaultConcurrency, "jobs run at once, across the queues")
	f.DurationVar(&wf.backoffBase, "backoff-base", defaultBackoffBase, "retry delay after the first failed attempt; it doubles with each attempt")
	f.DurationVar(&wf.backoffMax, "backoff-max", defaultBackoffMax, "longest retry delay")
	f.DurationVar(&wf.visibility, "visibility-timeout", defaultVisibilityTimeout, "a job whose worker stops renewing its lease this long is recovered")
	f.DurationVar(&wf.recoveryInterval, "recovery-interval", defaultRecoveryInterval, "time between two scans for jobs of dead workers")
	f.DurationVar(&wf.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "on SIGINT/SIGTERM, how long running jobs may finish before they are put back")
	f.DurationVar(&wf.retention, "retention", defaultRetention, "how long finished jobs' records are kept (0: delete them as jobs finish)")
	f.StringVar(&wf.name, "name", "", "consumer name, unique among live workers (default host-pid-random)")
	f.StringVar(&wf.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on GET /metrics at this host:port (default off)")
	f.StringArrayVar(&wf.httpAllow, "http-allow", nil, "a CIDR prefix, address or host name the http handler may reach although internal (repeatable)")
	f.IntVar(&wf.waitReplicas, "wait-replicas", 0, "after writing job outcomes, wait until this many replicas have them (Redis WAIT); fewer are logged, not retried")
	f.DurationVar(&wf.waitTimeout, "wait-timeout", defaultReplicaTimeout, "how long --wait-replicas waits for the replicas")
	f.DurationVar(&wf.heartbeat, "heartbeat-interval", defaultHeartbeatInterval, "how often the worker writes its heartbeat record for 'conveyor workers' (0: none)")
	f.StringArrayVar(&wf.cron, "cron", nil, "a periodic schedule 'SPEC TYPE [PAYLOAD]' into the first --queue, stored for every worker to run (repeatable; see 'conveyor schedules')")
	f.StringVar(&wf.tortureLedger, "torture-ledger", "", "run the torture handler, writing its ledger into this directory (for 'conveyor torture')")
	_ = f.MarkHidden("torture-ledger")
	f.StringVar(&wf.tortureClock, "torture-clock-file", "", "offset the worker's clock by the milliseconds this file says, read every 100ms (for 'conveyor torture' clock-step)")
	_ = f.MarkHidden("torture-clock-file")
	return cmd
}

// config validates the flags into a WorkerConfig (without Prefix and Logger); every error is
// a usage error.
func (wf *workerFlags) config() (pipeline.WorkerConfig, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, usageErrorf(format, args...)) }
	if wf.queuesGiven && len(wf.queues) == 0 {
		bad("--queue must name a queue, not be empty")
	}
	var names []string
	weights := map[string]int{}
	for _, arg := range wf.queues {
		q, weight, hasWeight := strings.Cut(arg, "=")
		if err := keyspace.ValidateQueue(q); err != nil {
			bad("--queue %q: %v (use letters, digits, '.', '_' and '-')", arg, errors.Unwrap(err))
			continue
		}
		w := 1
		if hasWeight {
			n, err := strconv.Atoi(weight)
			if err != nil || n < 1 || n > maxQueueWeight {
				bad("--queue %q: the weight must be a whole number from 1 to %d", arg, maxQueueWeight)
				continue
			}
			w = n
		}
		if old, dup := weights[q]; dup && old != w {
			bad("--queue %s is given twice with different weights (%d and %d)", q, old, w)
			continue
		}
		weights[q] = w
		names = append(names, q)
	}
	if wf.name != "" {
		if err := keyspace.ValidateQueue(wf.name); err != nil {
			bad("--name %q: invalid worker name: %v (use letters, digits, '.', '_' and '-')", wf.name, errors.Unwrap(err))
		}
	}
	if wf.concurrency < 1 {
		bad("--concurrency must be at least 1, not %d", wf.concurrency)
	}
	if wf.backoffBase <= 0 {
		bad("--backoff-base must be positive, not %s", wf.backoffBase)
	}
	if wf.backoffMax < wf.backoffBase {
		bad("--backoff-max (%s) must be at least --backoff-base (%s)", wf.backoffMax, wf.backoffBase)
	}
	for _, d := range []struct {
		flag     string
		val, min time.Duration
		why      string
	}{
		{"--visibility-timeout", wf.visibility, minVisibilityTimeout, "leases are renewed every third of it"},
		{"--recovery-interval", wf.recoveryInterval, time.Millisecond, ""},
		{"--shutdown-timeout", wf.shutdownTimeout, 0, ""},
	} {
		switch {
		case d.val <= 0:
			bad("%s must be positive, not %s", d.flag, d.val)
		case d.val < d.min && d.why != "":
			bad("%s is too short: at least %s (%s), not %s", d.flag, d.min, d.why, d.val)
		case d.val < d.min:
			bad("%s is too short: at least %s, not %s", d.flag, d.min, d.val)
		}
	}
	if wf.heartbeat < 0 {
		bad("--heartbeat-interval must not be negative, not %s (0 turns the heartbeat off)", wf.heartbeat)
	}
	if wf.retention < 0 {
		bad("--retention must not be negative, not %s", wf.retention)
	}
	if err := checkReplicas(wf.waitReplicas, wf.waitTimeout); err != nil {
		errs = append(errs, err)
	}
	if err := checkMetricsAddr(wf.metricsAddr); err != nil {
		errs = append(errs, err)
	}
	if err := wf.makeGuard(); err != nil {
		errs = append(errs, err)
	}
	first := pipeline.DefaultQueue
	if len(names) > 0 {
		first = names[0]
	}
	var periodic []pipeline.Periodic
	for _, v := range wf.cron {
		p, err := parseCronFlag(v, first)
		if err != nil {
			bad("%v", err)
			continue
		}
		periodic = append(periodic, p)
	}
	if len(errs) > 0 {
		return pipeline.WorkerConfig{}, errors.Join(errs...)
	}
	queues := names
	if len(queues) == 0 {
		queues = []string{pipeline.DefaultQueue}
	}
	var queueWeights map[string]int // none unless a weight was given: first come, first served
	for _, arg := range wf.queues {
		if strings.Contains(arg, "=") {
			queueWeights = weights
			break
		}
	}
	retention := wf.retention
	if retention == 0 {
		retention = pipeline.RetainNone
	}
	return pipeline.WorkerConfig{
		Queues:            slices.Compact(slices.Sorted(slices.Values(queues))),
		QueueWeights:      queueWeights,
		StrictPriority:    wf.strictPriority,
		Name:              wf.name,
		Concurrency:       wf.concurrency,
		Backoff:           pipeline.Backoff{Base: wf.backoffBase, Max: wf.backoffMax},
		Retention:         retention,
		VisibilityTimeout: wf.visibility,
		RecoveryInterval:  wf.recoveryInterval,
		ShutdownTimeout:   wf.shutdownTimeout,
		Replicas:          wf.waitReplicas,
		ReplicaTimeout:    wf.waitTimeout,
		Periodic:          periodic,

		HeartbeatInterval: wf.heartbeat,
		DisableHeartbeat:  wf.heartbeat == 0,
	}, nil
}
