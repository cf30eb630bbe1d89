package metrics

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/pipeline"
)

// Namespace starts the name of every series of this package.
const Namespace = "conveyor"

// TypeUnhandled is the type label of jobs whose type no handler of the worker takes.
const TypeUnhandled = "_unhandled"

// Outcome labels of conveyor_jobs_total besides pipeline.Outcome's.
const (
	OutcomeCompleted = "completed"
	// OutcomeError: a middleware refused the job: it returned an error of its own, no
	// *pipeline.JobError (see pipeline.Worker.Use); the job's record counts it as a failed
	// attempt.
	OutcomeError = "error"
)

// Buckets of the histograms, in seconds. Jobs run from a millisecond to minutes; latency and
// lag are milliseconds when all is well and minutes when a backlog builds.
var (
	DurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	LatencyBuckets  = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800}
)

// periodicTakeover is how late a worker that does not hold the schedules' lock enqueues a
// tick: the periodic scheduler's takeover delay, which package pipeline documents and keeps.
const periodicTakeover = 500 * time.Millisecond

// Results of conveyor_schedule_ticks_total. A tick enqueued as itself within the scheduler's
// takeover delay (500 ms) of its time is on_time; later, it is late. A late tick means no
// worker held the schedules' lock, or the schedulers fell behind. Ticks found more than a
// minute late are dropped (skipped), or run as one job (merged, MissedRunOnce).
const (
	TickOnTime  = "on_time"
	TickLate    = "late"
	TickSkipped = "skipped"
	TickMerged  = "merged"
)

// MaxScheduleLabels bounds the schedule label of a Worker's series. The first this many
// schedules it sees have their own; the others share ScheduleOther. So schedules cannot make
// series without bound; up to 100,000 can be stored.
const MaxScheduleLabels = 100

// ScheduleOther is the schedule label of the schedules past MaxScheduleLabels.
const ScheduleOther = "_other"

// Worker holds a worker's series; see the package documentation. Its methods are safe for
// concurrent use, and one Worker may serve several pipeline.Workers (their series add up).
type Worker struct {
	jobs        *jobsCollector
	promoted    *prometheus.CounterVec
	lag         *prometheus.HistogramVec
	scans       *prometheus.CounterVec
	recovered   *prometheus.CounterVec
	lockHeld    *prometheus.GaugeVec
	redisErrors *prometheus.CounterVec
	ticks       *prometheus.CounterVec
	tickDelay   prometheus.Histogram

	mu        sync.Mutex
	schedules map[string]bool // the names with a label of their own, at most MaxScheduleLabels
}

// NewWorker registers a worker's series on reg (prometheus.DefaultRegisterer, or a registry
// of the caller's own) and returns them. It fails when reg has series of the same names, from
// another Worker say: give each its own registry, or share one Worker.
func NewWorker(reg prometheus.Registerer) (*Worker, error) {
	queue := []string{"queue"}
	m := &Worker{
		jobs: newJobsCollector(),
		promoted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "scheduler_promoted_total",
			Help: "Delayed and retried jobs the worker's scheduler moved into their stream when due."}, queue),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "scheduler_lag_seconds",
			Help: "Per promotion, how long its most overdue job waited past its due time (Redis's clock).", Buckets: LatencyBuckets}, queue),
		scans: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "recovery_scans_total",
			Help: "Recovery scans the worker ran under the queue's recovery lock."}, queue),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "recovered_jobs_total",
			Help: "Jobs of dead workers the worker's recoverer put back (result=requeued) or sent to the dead set, out of retries (result=dead)."},
			[]string{"queue", "result"}),
		lockHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "recovery_lock_held",
			Help: "Recovery locks of the queue (one per partition) the worker holds now: it holds one during each of its scans."}, queue),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "redis_errors_total",
			Help: "Calls (commands or pipelines) of the worker's Redis client that failed: kind=reply when Redis answered with an error, connection when no answer came."},
			[]string{"kind"}),
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "schedule_ticks_total",
			Help: "Periodic schedules' ticks the worker's scheduler handled, by result: on_time and late (enqueued within the takeover of their time, or later), skipped and merged (missed: older than the grace, dropped or run as one job). The first 100 schedules have a label of their own, the rest share _other."},
			[]string{"schedule", "result"}),
		tickDelay: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "schedule_tick_delay_seconds",
			Help: "How long after its time each tick the worker's scheduler enqueued was enqueued (by the worker's clock).", Buckets: LatencyBuckets}),
		schedules: map[string]bool{},
	}
	for _, c := range []prometheus.Collector{m.jobs, m.promoted, m.lag, m.scans, m.recovered, m.lockHeld, m.redisErrors, m.ticks, m.tickDelay} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, kind := range []string{kindReply, kindConnection} {
		m.redisErrors.WithLabelValues(kind)
	}
	return m, nil
}

// Middleware was the way the job series were counted: a middleware around each job. They are
// counted through Hooks now, from the outcomes the worker writes in chunks. That costs a
// fraction of a middleware's per-job clock reads and Prometheus calls (docs/BENCHMARKS.md,
// "Metrics cost"). Middleware returns h itself, so a worker that still adds it pays nothing.
//
// Deprecated: set WorkerConfig.Hooks to Hooks(), which counts the jobs; adding Middleware does
// nothing more.
func (m *Worker) Middleware(h message.HandlerFunc) message.HandlerFunc { return h }

// Hooks returns the hooks to set as pipeline.WorkerConfig.Hooks: the worker's job series
// (pipeline.WorkerHooks.Attempts), and its scheduler and recoverer series.
func (m *Worker) Hooks() pipeline.WorkerHooks {
	return pipeline.WorkerHooks{
		Promoted: func(queue string, jobs int, lag time.Duration) {
			m.promoted.WithLabelValues(queue).Add(float64(jobs))
			m.lag.WithLabelValues(queue).Observe(lag.Seconds())
		},
		RecoveryLock: func(queue string, held bool) {
			if held {
				m.lockHeld.WithLabelValues(queue).Inc()
			} else {
				m.lockHeld.WithLabelValues(queue).Dec()
			}
		},
		Recovered: func(queue string, res pipeline.RecoveryScan) {
			m.scans.WithLabelValues(queue).Inc()
			m.recovered.WithLabelValues(queue, "requeued").Add(float64(res.Requeued))
			m.recovered.WithLabelValues(queue, "dead").Add(float64(res.Dead))
		},
		Attempts: m.jobs.count,
		ScheduleTick: func(schedule string, late time.Duration) {
			result := TickOnTime
			if late > periodicTakeover {
				result = TickLate
			}
			m.ticks.WithLabelValues(m.scheduleLabel(schedule), result).Inc()
			m.tickDelay.Observe(late.Seconds())
		},
		ScheduleMissed: func(schedule string, ticks int, once bool) {
			result := TickSkipped
			if once {
				result = TickMerged
			}
			m.ticks.WithLabelValues(m.scheduleLabel(schedule), result).Add(float64(ticks))
		},
	}
}

// scheduleLabel is schedule's label: its name while at most MaxScheduleLabels names have one.
func (m *Worker) scheduleLabel(schedule string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.schedules[schedule] {
		return schedule
	}
	if len(m.schedules) < MaxScheduleLabels {
		m.schedules[schedule] = true
		return schedule
	}
	return ScheduleOther
}

// Kinds of conveyor_redis_errors_total.
const (
	kindReply      = "reply"
	kindConnection = "connection"
)

// RedisHook returns a go-redis hook (rdb.AddHook) that counts the client's failed calls in
// conveyor_redis_errors_total. Some are no trouble, and not counted. Those are redis.Nil (a key
// or a reply that is not there), and a context that ended (a shutdown). Also NOSCRIPT (scripts
// are loaded again on it), and BUSYGROUP (a consumer group that exists already).
func (m *Worker) RedisHook() redis.Hook { return redisHook{m} }

type redisHook struct{ m *Worker }

func (redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil {
			h.count(cmd, err)
		}
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil {
			return nil
		}
		// One count per call: the first error of a pipeline that is worth counting.
		cmdErrs := false
		for _, cmd := range cmds {
			if cerr := cmd.Err(); cerr != nil {
				cmdErrs = true
				if h.count(cmd, cerr) {
					return err
				}
			}
		}
		if !cmdErrs {
			h.count(nil, err)
		}
		return err
	}
}

// count counts err, the error of cmd (nil: of a whole pipeline), unless it is no trouble. It
// reports whether it counted. Not counted either are the connection set-up's CLIENT and HELLO
// commands; go-redis goes on without them on servers that lack them. Nor is XINFO on a stream or
// group not made yet: the worker's start and the Inspector read that as nothing there.
func (h redisHook) count(cmd redis.Cmder, err error) bool {
	// NOGROUP and "no such key" answer any stream command (XPENDING, XINFO, the scripts) on a
	// queue no worker has read yet. The recoverer and the client take them as answers.
	if errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch rediserr.Classify(err) {
	case rediserr.NoScript, rediserr.GroupExists, rediserr.NoStream:
		return false
	}
	if cmd != nil {
		switch cmd.Name() {
		case "client", "hello":
			return false
		}
	}
	kind := kindConnection
	if _, ok := errors.AsType[redis.Error](err); ok {
		kind = kindReply
	}
	h.m.redisErrors.WithLabelValues(kind).Inc()
	return true
}
