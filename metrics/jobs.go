package metrics

import (
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/conveyorq/conveyor/pipeline"
)

// jobsCollector holds the job series as plain atomic counters: conveyor_jobs_total,
// conveyor_job_duration_seconds and conveyor_job_queue_latency_seconds. It turns them into
// Prometheus metrics only when scraped. A worker tells it about outcomes a chunk at a time
// (pipeline.WorkerHooks.Attempts). So no Prometheus call and no series lookup runs per job. It
// exports what a CounterVec and two HistogramVecs fed one observation per attempt would
// (TestJobSeriesMatchPrometheus).
type jobsCollector struct {
	jobs, duration, latency *prometheus.Desc
	// durationBounds and latencyBounds are the buckets' upper bounds, read at NewWorker.
	durationBounds, latencyBounds []float64

	// table is read without a lock and copied on write: a new (queue, type) pair is rare.
	table atomic.Pointer[jobsTable]
	mu    sync.Mutex // serializes writers of table
}

// jobsTable is every (queue, type) pair and queue seen so far.
type jobsTable struct {
	series  map[seriesKey]*series
	latency map[string]*histogram // by queue
}

type seriesKey struct{ queue, typ string }

// series are the counts of one (queue, type).
type series struct {
	queue, typ string
	outcomes   [len(outcomes)]atomic.Uint64
	duration   *histogram
	latency    *histogram // the queue's, shared by its types
}

// outcomes are the outcome label values, indexed by pipeline.Outcome (0: completed), then
// OutcomeError: every (queue, type) gets them all at once, at zero, so rate() sees the first.
var outcomes = [...]string{OutcomeCompleted, pipeline.OutcomeRetry.String(), pipeline.OutcomeDead.String(),
	pipeline.OutcomeCanceled.String(), pipeline.OutcomeLost.String(), pipeline.OutcomeAbandoned.String(),
	pipeline.OutcomeSnoozed.String(), OutcomeError}

const outcomeErrorIndex = len(outcomes) - 1

func newJobsCollector() *jobsCollector {
	c := &jobsCollector{
		jobs: prometheus.NewDesc(Namespace+"_jobs_total",
			"Job attempts by outcome: completed, retry, dead, canceled, lost, abandoned, snoozed, or error (refused by a middleware).",
			[]string{"queue", "type", "outcome"}, nil),
		duration: prometheus.NewDesc(Namespace+"_job_duration_seconds",
			"Job attempts from the start of their handling until their outcome is written.", []string{"queue", "type"}, nil),
		latency: prometheus.NewDesc(Namespace+"_job_queue_latency_seconds",
			"Wait from a job's entry into the stream (its enqueue, or its promotion when due) to the start of its attempt.",
			[]string{"queue"}, nil),
	}
	c.durationBounds, c.latencyBounds = bounds(DurationBuckets), bounds(LatencyBuckets)
	c.table.Store(&jobsTable{series: map[seriesKey]*series{}, latency: map[string]*histogram{}})
	return c
}

// count adds attempts to the series (pipeline.WorkerHooks.Attempts). A chunk's attempts mostly
// share their queue and type. So the series is looked up once per run of them. The histograms'
// sums, which take a compare-and-swap, are added once per run too.
func (c *jobsCollector) count(as []pipeline.Attempt) {
	var s *series
	var durSum, latSum float64
	for i := range as {
		a := &as[i]
		typ := a.Type
		if a.NoHandler {
			typ = TypeUnhandled
		}
		if s == nil || a.Queue != s.queue || typ != s.typ {
			if s != nil {
				s.duration.addSum(durSum)
				s.latency.addSum(latSum)
				durSum, latSum = 0, 0
			}
			s = c.bound(a.Queue, typ)
		}
		outcome := outcomeErrorIndex
		if !a.Refused && int(a.Outcome) < outcomeErrorIndex {
			outcome = int(a.Outcome)
		}
		s.outcomes[outcome].Add(1)
		took := a.Took.Seconds()
		s.duration.observe(took)
		durSum += took
		if !a.Entered.IsZero() {
			wait := max(0, a.Began.Sub(a.Entered)).Seconds()
			s.latency.observe(wait)
			latSum += wait
		}
	}
	if s != nil {
		s.duration.addSum(durSum)
		s.latency.addSum(latSum)
	}
}

// bound returns the series of a queue and a type, making them on first use.
func (c *jobsCollector) bound(queue, typ string) *series {
	k := seriesKey{queue, typ}
	if s := c.table.Load().series[k]; s != nil {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.table.Load()
	if s := old.series[k]; s != nil {
		return s
	}
	next := &jobsTable{series: make(map[seriesKey]*series, len(old.series)+1), latency: old.latency}
	maps.Copy(next.series, old.series)
	lat := old.latency[queue]
	if lat == nil {
		lat = newHistogram(c.latencyBounds)
		next.latency = make(map[string]*histogram, len(old.latency)+1)
		maps.Copy(next.latency, old.latency)
		next.latency[queue] = lat
	}
	s := &series{queue: queue, typ: typ, duration: newHistogram(c.durationBounds), latency: lat}
	next.series[k] = s
	c.table.Store(next)
	return s
}

// Describe implements prometheus.Collector.
func (c *jobsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.jobs
	ch <- c.duration
	ch <- c.latency
}

// Collect implements prometheus.Collector.
func (c *jobsCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.table.Load()
	for _, s := range t.series {
		for i, name := range outcomes {
			ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.CounterValue, float64(s.outcomes[i].Load()), s.queue, s.typ, name)
		}
		ch <- s.duration.metric(c.duration, s.queue, s.typ)
	}
	for queue, h := range t.latency {
		ch <- h.metric(c.latency, queue)
	}
}

// histogram is a Prometheus histogram kept as atomic counts: one per bucket, and one past the
// last for the observations above every bound.
type histogram struct {
	bounds []float64
	counts []atomic.Uint64
	sum    atomic.Uint64 // math.Float64bits of the sum
}

// bounds are a histogram's upper bounds from b, without a last +Inf, which every histogram
// has anyway (prometheus.HistogramOpts takes them so too).
func bounds(b []float64) []float64 {
	b = slices.Clone(b)
	if n := len(b); n > 0 && math.IsInf(b[n-1], +1) {
		b = b[:n-1]
	}
	return b
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// observe counts v in its bucket, the first whose bound is at least v, as a Prometheus
// histogram does; the sum is added apart (addSum).
func (h *histogram) observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
}

func (h *histogram) addSum(v float64) {
	if v == 0 {
		return
	}
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// metric is the histogram as a constant metric, its buckets cumulative. The count is the
// buckets' total, so the two agree whatever observations land while they are read.
func (h *histogram) metric(desc *prometheus.Desc, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.bounds))
	var n uint64
	for i, b := range h.bounds {
		n += h.counts[i].Load()
		buckets[b] = n
	}
	n += h.counts[len(h.bounds)].Load()
	return prometheus.MustNewConstHistogram(desc, n, math.Float64frombits(h.sum.Load()), buckets, labels...)
}
