package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The open-loop workload publishes jobs at a fixed rate, not as a backlog, and measures how
// long each waits from its intended send time to its handler's start. A pacer schedules job i
// at t0 + i/rate; a pool of publishers sends each with one single-job call. The latency counts
// from the intended time, so a publisher that falls behind cannot hide queueing
// (no coordinated omission). Jobs of the warm-up period carry no time and are not measured.

// openloopOptions are the open-loop workload's flags.
type openloopOptions struct {
	rates      []int
	seconds    float64
	warmup     time.Duration
	publishers int
}

// openloopPrefix names the open-loop workloads (one per rate) and starts their metrics.
const openloopPrefix = "openloop"

// openloopLateAfter is how far behind its intended time a send may start before it counts as
// late: the publisher, not the queue, was then the limit.
const openloopLateAfter = time.Millisecond

// openloopTargetRate and openloopTargetP99MS are the target: Conveyor's p99 under 5 ms
// at 1,000 jobs/s.
const (
	openloopTargetRate  = 1000
	openloopTargetP99MS = 5.0
)

// registerOpenloopFlags defines the open-loop flags on fs. The function it returns checks
// them once fs is parsed.
func registerOpenloopFlags(fs *flag.FlagSet, ol *openloopOptions) func() error {
	rates := fs.String("openloop-rates", "100,1000,10000", "comma list of open-loop arrival rates (jobs/s), one workload each")
	fs.Float64Var(&ol.seconds, "openloop-seconds", 10, "measured seconds per open-loop rate, after the warm-up")
	fs.DurationVar(&ol.warmup, "openloop-warmup", time.Second, "open-loop warm-up: published at the rate but not measured")
	fs.IntVar(&ol.publishers, "openloop-publishers", 16, "open-loop publisher goroutines, each sending single-job calls")
	return func() error {
		var err error
		if ol.rates, err = intList(*rates); err != nil {
			return fmt.Errorf("-openloop-rates: %w", err)
		}
		switch {
		case ol.seconds <= 0:
			return errors.New("-openloop-seconds must be positive")
		case ol.warmup < 0:
			return errors.New("-openloop-warmup must not be negative")
		case ol.publishers < 1:
			return errors.New("-openloop-publishers must be at least 1")
		}
		return nil
	}
}

// openloopWorkloads is one workload per rate, named openloop_<rate>.
func (r *runner) openloopWorkloads() []workload {
	var ws []workload
	for _, rate := range r.o.ol.rates {
		ws = append(ws, workload{name: fmt.Sprintf("%s_%d", openloopPrefix, rate), run: func(ctx context.Context, sys System, queue string) (map[string]float64, error) {
			return r.openloop(ctx, sys, queue, rate)
		}})
	}
	return ws
}

// openloopCounts are the jobs of the warm-up and of the measured period at rate.
func openloopCounts(ol openloopOptions, rate int) (warm, measured int) {
	return int(ol.warmup.Seconds() * float64(rate)), max(1, int(ol.seconds*float64(rate)))
}

// openloop runs the consumer child, publishes at rate for the warm-up plus the measured
// period, and waits until every job is processed. The child reports each measured job's
// start time minus its intended send time, which the payload carries.
func (r *runner) openloop(ctx context.Context, sys System, queue string, rate int) (map[string]float64, error) {
	warm, measured := openloopCounts(r.o.ol, rate)
	total := warm + measured
	p, err := sys.NewProducer(ctx, r.addr, queue)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	// One send outside the schedule (connection, script load); the child expects it too.
	if err := p.EnqueueOne(ctx, makePayload(r.o.payloadBytes)); err != nil {
		return nil, fmt.Errorf("open-loop warm-up send: %w", err)
	}
	c, run, err := r.startConsumer(ctx, sys.Name(), queue, total+1)
	if err != nil {
		return nil, err
	}
	defer r.stopChild(c)

	span := r.o.ol.warmup + time.Duration(r.o.ol.seconds*float64(time.Second))
	pctx, cancel := context.WithTimeout(ctx, span+r.o.timeout)
	defer cancel()
	pub, err := openloopPublish(pctx, p, rate, warm, total, r.o.ol.publishers, r.o.payloadBytes)
	if err != nil {
		return nil, fmt.Errorf("open-loop publish of %d jobs at %d/s: %w", total, rate, err)
	}
	if err := r.finishConsumer(ctx, c, run, p); err != nil {
		return nil, fmt.Errorf("open-loop consumption of %d jobs at %d/s: %w", total, rate, err)
	}
	lat := run.done.LatenessMS
	if len(lat) < measured {
		return nil, fmt.Errorf("open-loop at %d/s: %d latency samples for %d measured jobs", rate, len(lat), measured)
	}
	k := func(s string) string { return fmt.Sprintf("%s_%d_%s", openloopPrefix, rate, s) }
	s := slices.Clone(lat)
	slices.Sort(s)
	fs := slices.Clone(run.done.FromSendMS)
	slices.Sort(fs)
	return map[string]float64{
		k("from_send_p50_ms"):   percentile(fs, 50),
		k("from_send_p99_ms"):   percentile(fs, 99),
		k("jobs"):               float64(measured),
		k("samples"):            float64(len(lat)),
		k("mean_ms"):            mean(s),
		k("p50_ms"):             percentile(s, 50),
		k("p95_ms"):             percentile(s, 95),
		k("p90_ms"):             percentile(s, 90),
		k("p99_ms"):             percentile(s, 99),
		k("p999_ms"):            percentile(s, 99.9),
		k("max_ms"):             s[len(s)-1],
		k("late_publishes"):     float64(pub.late),
		k("publish_lag_p99_ms"): pub.lagP99MS,
		k("publish_lag_max_ms"): pub.lagMaxMS,
		k("publish_per_s"):      perSecond(total, pub.took),
		k("extra_deliveries"):   float64(run.done.Handled - int64(total+1)),
	}, nil
}

// publishStats describe how well the publishers kept to the schedule.
type publishStats struct {
	late int // measured sends that started more than openloopLateAfter behind their time
	// lagP99MS and lagMaxMS are how far behind its time a measured send started, ms.
	lagP99MS, lagMaxMS float64
	took               time.Duration // from t0 to the last send's reply
}

// openloopPublish sends total jobs at rate from publishers goroutines: job i at t0 + i/rate.
// Jobs from warm on carry their intended and actual send times; earlier ones carry none.
func openloopPublish(ctx context.Context, p Producer, rate, warm, total, publishers, payloadBytes int) (publishStats, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	type job struct {
		i  int
		at time.Time
	}
	// A small buffer: a job waiting for a free publisher is late, and counted so, when taken.
	jobs := make(chan job, publishers)
	lags := make([][]float64, publishers) // each publisher's measured sends' lags, ms
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			plain := makePayload(payloadBytes)
			for j := range jobs {
				payload := plain
				if j.i >= warm {
					now := time.Now()
					payload = makeOpenloopPayload(j.at, now, payloadBytes)
					lags[g] = append(lags[g], float64(now.Sub(j.at))/float64(time.Millisecond))
				}
				if err := p.EnqueueOne(ctx, payload); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	t0 := time.Now()
pace:
	for i := range total {
		at := t0.Add(time.Duration(int64(i) * int64(time.Second) / int64(rate)))
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		select {
		case jobs <- job{i, at}:
		case <-ctx.Done():
			break pace
		}
	}
	close(jobs)
	wg.Wait()
	st := publishStats{took: time.Since(t0), lagP99MS: math.NaN(), lagMaxMS: math.NaN()}
	all := slices.Concat(lags...)
	if len(all) > 0 {
		slices.Sort(all)
		st.lagP99MS, st.lagMaxMS = percentile(all, 99), all[len(all)-1]
	}
	lateMS := float64(openloopLateAfter) / float64(time.Millisecond)
	for _, l := range all {
		if l > lateMS {
			st.late++
		}
	}
	return st, context.Cause(ctx)
}

// openloopRates lists the rates with results, ascending.
func (rep *report) openloopRates() []int {
	seen := map[int]bool{}
	for _, ms := range rep.medians {
		for k := range ms {
			rest, ok := strings.CutPrefix(k, openloopPrefix+"_")
			if !ok {
				continue
			}
			num, _, _ := strings.Cut(rest, "_")
			if n, err := strconv.Atoi(num); err == nil {
				seen[n] = true
			}
		}
	}
	rates := make([]int, 0, len(seen))
	for n := range seen {
		rates = append(rates, n)
	}
	slices.Sort(rates)
	return rates
}

// addOpenloop records the workload's settings in the config and the target.
func (rep *report) addOpenloop(o options) {
	rates := rep.openloopRates()
	if len(rates) == 0 {
		return
	}
	rep.Config["openloop_rates"] = rates
	rep.Config["openloop_seconds"] = o.ol.seconds
	rep.Config["openloop_warmup"] = o.ol.warmup.String()
	rep.Config["openloop_publishers"] = o.ol.publishers
	metric := fmt.Sprintf("%s_%d_p99_ms", openloopPrefix, openloopTargetRate)
	if x, ok := rep.get("conveyor", metric); ok {
		rep.Targets = append(rep.Targets, target{Name: "conveyor " + metric, Value: round3(x),
			Op: "<=", Bound: openloopTargetP99MS, Pass: x <= openloopTargetP99MS})
	}
}

// writeOpenloop prints one table per rate: every variant (not a family's best per metric,
// which would mix variants within a row) against its latency percentiles.
func writeOpenloop(w io.Writer, rep *report) {
	rates := rep.openloopRates()
	if len(rates) == 0 {
		return
	}
	var rows []string
	for _, f := range rep.families {
		rows = append(rows, rep.variants[f]...)
	}
	fmt.Fprintf(w, "## Open-loop latency (publish-to-start, ms; medians over rounds)\n\n"+
		"Jobs sent at a fixed rate by %v publishers, one single-job call each; latency from each job's intended send time "+
		"to its handler's start, the first %v of each run excluded. Late publishes: sends that began over %v behind schedule "+
		"(the publisher was the limit); publish lag: how far behind, ms, included in the latency. "+
		"From send: the latency counted from the moment the single-job call began instead.\n\n", rep.Config["openloop_publishers"], rep.Config["openloop_warmup"], openloopLateAfter)
	for _, rate := range rates {
		k := func(s string) string { return fmt.Sprintf("%s_%d_%s", openloopPrefix, rate, s) }
		fmt.Fprintf(w, "### %s jobs/s\n\n| system | p50 | p90 | p99 | p99.9 | max | samples | late publishes | publish lag p99 | from send p50 | from send p99 | publish rate |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
			fmtNum(float64(rate), true))
		for _, v := range rows {
			if _, ok := rep.get(v, k("p50_ms")); !ok {
				continue
			}
			var cells []string
			for _, m := range []string{"p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "samples", "late_publishes", "publish_lag_p99_ms", "from_send_p50_ms", "from_send_p99_ms", "publish_per_s"} {
				x, ok := rep.get(v, k(m))
				if ok && (m == "samples" || m == "late_publishes") {
					cells = append(cells, strconv.FormatFloat(x, 'f', 0, 64))
					continue
				}
				cells = append(cells, fmtNum(x, ok))
			}
			fmt.Fprintf(w, "| %s | %s |\n", v, strings.Join(cells, " | "))
		}
		fmt.Fprintln(w)
		if x, ok := rep.get("conveyor", k("p99_ms")); ok && rate == openloopTargetRate {
			verdict := "met"
			if x > openloopTargetP99MS {
				verdict = "**not met**"
			}
			fmt.Fprintf(w, "Target (issue 34): conveyor p99 <= %s ms at this rate: %s ms, %s.\n\n", fmtNum(openloopTargetP99MS, true), fmtNum(x, true), verdict)
		}
	}
}

// sentPrefix follows the due time in an open-loop payload: "due=<unix ns>;sent=<unix ns>;".
const sentPrefix = ";" + "sent="

// makeOpenloopPayload is a due payload (parseDue reads the intended time) that also carries
// the actual send time. The two latencies part what the publisher lagged from what the queue
// took.
func makeOpenloopPayload(intended, sent time.Time, size int) []byte {
	p := fmt.Appendf(nil, "%s%d%s%d;", duePrefix, intended.UnixNano(), sentPrefix, sent.UnixNano())
	for len(p) < size {
		p = append(p, 'x')
	}
	return p
}

// parseSent reads the send time of an open-loop payload.
func parseSent(p []byte) (time.Time, bool) {
	_, rest, ok := bytes.Cut(p, []byte(sentPrefix))
	if !ok {
		return time.Time{}, false
	}
	return parseStamp(rest)
}

// mean is the arithmetic mean of xs: the figure graphile-worker quotes.
func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
