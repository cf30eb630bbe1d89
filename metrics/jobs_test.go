package metrics_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/metrics"
	"github.com/conveyorq/conveyor/pipeline"
)

// oldJobSeries is how the job series were kept before they were counted in batches: a
// CounterVec and two HistogramVecs, fed one attempt at a time by a middleware.
type oldJobSeries struct {
	jobs              *prometheus.CounterVec
	duration, latency *prometheus.HistogramVec
}

func newOldJobSeries(reg prometheus.Registerer) *oldJobSeries {
	o := &oldJobSeries{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "jobs_total",
			Help: "Job attempts by outcome: completed, retry, dead, canceled, lost, abandoned, snoozed, or error (refused by a middleware)."},
			[]string{"queue", "type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metrics.Namespace, Name: "job_duration_seconds",
			Help: "Job attempts from the start of their handling until their outcome is written.", Buckets: metrics.DurationBuckets},
			[]string{"queue", "type"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metrics.Namespace, Name: "job_queue_latency_seconds",
			Help:    "Wait from a job's entry into the stream (its enqueue, or its promotion when due) to the start of its attempt.",
			Buckets: metrics.LatencyBuckets}, []string{"queue"}),
	}
	reg.MustRegister(o.jobs, o.duration, o.latency)
	return o
}

var outcomeNames = []string{"completed", "retry", "dead", "canceled", "lost", "abandoned", "snoozed", "error"}

// observe is the old middleware's work for one attempt; like it, it binds every outcome of a
// (queue, type) at zero on its first attempt.
func (o *oldJobSeries) observe(a pipeline.Attempt) {
	typ := a.Type
	if a.NoHandler {
		typ = metrics.TypeUnhandled
	}
	for _, name := range outcomeNames {
		o.jobs.WithLabelValues(a.Queue, typ, name)
	}
	outcome := len(outcomeNames) - 1
	if !a.Refused && int(a.Outcome) < outcome {
		outcome = int(a.Outcome)
	}
	o.jobs.WithLabelValues(a.Queue, typ, outcomeNames[outcome]).Inc()
	o.duration.WithLabelValues(a.Queue, typ).Observe(a.Took.Seconds())
	if !a.Entered.IsZero() {
		o.latency.WithLabelValues(a.Queue).Observe(max(0, a.Began.Sub(a.Entered)).Seconds())
	}
}

// The job series a Worker exports from the attempts its hook is told equal, series by series,
// those of Prometheus's own CounterVec and HistogramVecs fed the same attempts one at a time:
// names, help, types, labels, counts and buckets exactly, sums up to float rounding (they are
// added in another order). The attempts cover every outcome, refusals, jobs without a
// handler, durations on and between the buckets' bounds and past the last, latencies below
// zero (clock skew) and unknown, and batches that mix queues and types, told from several
// goroutines at once as a worker's finish writers do.
func TestJobSeriesMatchPrometheus(t *testing.T) {
	t.Parallel()
	oldReg, newReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	old := newOldJobSeries(oldReg)
	m, err := metrics.NewWorker(newReg)
	require.NoError(t, err)
	hook := m.Hooks().Attempts

	rnd := rand.New(rand.NewPCG(16, 3))
	var tooks []time.Duration
	for _, b := range metrics.LatencyBuckets {
		d := time.Duration(b * float64(time.Second))
		tooks = append(tooks, d, d-1, d+1)
	}
	tooks = append(tooks, 0, time.Nanosecond, 2*time.Hour)
	base := time.Unix(1_790_000_000, 0)
	attempt := func() pipeline.Attempt {
		a := pipeline.Attempt{
			Queue: []string{"emails", "reports", "q"}[rnd.IntN(3)], Type: []string{"send", "render", ""}[rnd.IntN(3)],
			Outcome: pipeline.Outcome(rnd.IntN(7)), Began: base.Add(time.Duration(rnd.IntN(1000)) * time.Second),
			Took: tooks[rnd.IntN(len(tooks))],
		}
		switch rnd.IntN(10) {
		case 0:
			a.NoHandler = true
		case 1:
			a.Refused = true
		}
		switch rnd.IntN(4) {
		case 0: // unknown entry time
		case 1: // the entry's clock ahead of the worker's
			a.Entered = a.Began.Add(time.Duration(rnd.IntN(5000)) * time.Millisecond)
		default:
			a.Entered = a.Began.Add(-tooks[rnd.IntN(len(tooks))])
		}
		return a
	}
	var batches [][]pipeline.Attempt
	for range 200 {
		batch := make([]pipeline.Attempt, rnd.IntN(60))
		for i := range batch {
			if i > 0 && rnd.IntN(4) > 0 {
				batch[i] = batch[i-1] // runs of one queue and type, as chunks mostly are
				batch[i].Took = tooks[rnd.IntN(len(tooks))]
				continue
			}
			batch[i] = attempt()
		}
		batches = append(batches, batch)
		for _, a := range batch {
			old.observe(a)
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(batches); i += 4 {
				hook(batches[i])
			}
		})
	}
	wg.Wait()

	wantFs, err := oldReg.Gather()
	require.NoError(t, err)
	gotFs, err := newReg.Gather()
	require.NoError(t, err)
	want, got := byName(wantFs), byName(gotFs)
	for _, name := range []string{"conveyor_jobs_total", "conveyor_job_duration_seconds", "conveyor_job_queue_latency_seconds"} {
		w, g := want[name], got[name]
		require.NotNil(t, w, name)
		require.NotNil(t, g, name)
		require.Equal(t, w.GetHelp(), g.GetHelp(), name)
		require.Equal(t, w.GetType(), g.GetType(), name)
		wm, gm := byLabels(w), byLabels(g)
		require.Equal(t, sortedKeys(wm), sortedKeys(gm), name)
		for labels, wv := range wm {
			gv := gm[labels]
			if wv.GetCounter() != nil {
				require.Equal(t, wv.GetCounter().GetValue(), gv.GetCounter().GetValue(), "%s{%s}", name, labels)
				continue
			}
			wh, gh := wv.GetHistogram(), gv.GetHistogram()
			require.Equal(t, wh.GetSampleCount(), gh.GetSampleCount(), "%s{%s}", name, labels)
			require.InDelta(t, wh.GetSampleSum(), gh.GetSampleSum(), 1e-9*max(1, wh.GetSampleSum()), "%s{%s}", name, labels)
			require.Equal(t, len(wh.GetBucket()), len(gh.GetBucket()), "%s{%s}", name, labels)
			for i, wb := range wh.GetBucket() {
				gb := gh.GetBucket()[i]
				require.Equal(t, wb.GetUpperBound(), gb.GetUpperBound(), "%s{%s}", name, labels)
				require.Equal(t, wb.GetCumulativeCount(), gb.GetCumulativeCount(), "%s{%s} le=%v", name, labels, wb.GetUpperBound())
			}
		}
	}
}

// byName indexes metric families by name. It and byLabels are generic so that the test needs
// no import of the metric types (prometheus/client_model) of its own.
func byName[F interface{ GetName() string }](fs []F) map[string]F {
	out := map[string]F{}
	for _, f := range fs {
		out[f.GetName()] = f
	}
	return out
}

type labelPair interface {
	GetName() string
	GetValue() string
}

func byLabels[F interface{ GetMetric() []M }, M interface{ GetLabel() []L }, L labelPair](f F) map[string]M {
	out := map[string]M{}
	for _, m := range f.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
		}
		out[strings.Join(ls, ",")] = m
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
