package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// tenants is the noisy scenario's tenant count: tenant 0 floods, the others publish steadily.
const tenants = 10

// floodPercent is tenant 0's share of the offered rate.
const floodPercent = 90

// floodTick is how often tenant 0's pacer publishes what is due, in one batch: a flood of
// thousands a second comes in batches.
const floodTick = time.Millisecond

type noisyResult struct {
	Seconds     float64 `json:"seconds"`
	Rate        int     `json:"rate"`
	Concurrency int     `json:"concurrency"`
	WorkMS      float64 `json:"work_ms"`
	Window      int     `json:"window"`
	// CapacityPerS is what the worker's slots can serve at most: concurrency / work. A slot is
	// held until its outcome is written too, so the worker serves less.
	CapacityPerS float64 `json:"capacity_per_s"`
	// TurnoverMS is the measured time of one turn of every slot with groups on: concurrency /
	// starts per second.
	TurnoverMS float64 `json:"turnover_ms"`
	// ModelMS is what a steady tenant's job should wait with groups: what tenant 0's jobs wait
	// in the stream ahead of it. By Little's law that is tenant 0's window over what the worker
	// has left after the nine (measured starts per second less the nine's rate), less one
	// turn. It grows without bound as the two meet.
	ModelMS    float64    `json:"model_ms"`
	P99BoundMS float64    `json:"p99_bound_ms"`
	Runs       []noisyRun `json:"runs"`
	Pass       bool       `json:"pass"`
	Why        string     `json:"why,omitempty"`
}

type noisyRun struct {
	Groups bool `json:"groups"`
	// Nine is the steady tenants' publish-to-start latency, Flood tenant 0's.
	Nine  latency `json:"nine"`
	Flood latency `json:"flood"`
	// NineWorstP99MS is the highest p99 of any one steady tenant.
	NineWorstP99MS float64 `json:"nine_worst_tenant_p99_ms"`
	NineSent       int     `json:"nine_sent"`
	// NineUnstarted counts steady tenants' jobs not started when the run gave up waiting
	// (their latency is left out of Nine, which then understates it).
	NineUnstarted int `json:"nine_unstarted"`
	FloodSent     int `json:"flood_sent"`
	// FloodBacklog is tenant 0's jobs published and not started when publishing ended.
	FloodBacklog int `json:"flood_backlog_at_end"`
	// StartsPerS is the starts per second while publishing.
	StartsPerS float64 `json:"starts_per_s"`
	// PublishLagMS is how late the last publish of any pacer was against its intended time.
	PublishLagMS float64 `json:"publish_lag_ms"`
}

// noisy runs the noisy-neighbour scenario with fair groups, then without.
func (b *bench) noisy(ctx context.Context) (*noisyResult, error) {
	o := b.o
	w := b.window()
	r := &noisyResult{Seconds: o.seconds, Rate: o.rate, Concurrency: o.concurrency, WorkMS: ms(o.work),
		Window: w, P99BoundMS: ms(o.p99Bound)}
	if o.work > 0 {
		r.CapacityPerS = float64(o.concurrency) / o.work.Seconds()
	}
	for _, groups := range []bool{true, false} {
		run, err := b.noisyRun(ctx, groups)
		if err != nil {
			return nil, err
		}
		r.Runs = append(r.Runs, *run)
	}
	on := r.Runs[0]
	if on.StartsPerS > 0 {
		r.TurnoverMS = 1000 * float64(o.concurrency) / on.StartsPerS
		if left := on.StartsPerS - float64(o.rate*(100-floodPercent))/100; left > 0 {
			r.ModelMS = max(0, 1000*float64(w)/left-r.TurnoverMS)
		}
	}
	switch {
	case on.FloodBacklog*10 < on.FloodSent:
		r.Why = fmt.Sprintf("the flood did not outrun the worker (tenant 0's backlog %d of %d sent): lower -concurrency or raise -work or -rate",
			on.FloodBacklog, on.FloodSent)
	case on.NineUnstarted > 0:
		r.Why = fmt.Sprintf("%d of the nine tenants' jobs never started", on.NineUnstarted)
	case on.Nine.P99 > r.P99BoundMS:
		r.Why = fmt.Sprintf("the nine tenants' p99 %.1f ms is over the bound %.0f ms", on.Nine.P99, r.P99BoundMS)
	default:
		r.Pass = true
	}
	return r, nil
}

// noisyRun publishes the tenants' jobs open loop for -seconds, with a group each when groups,
// and waits until every steady tenant's job has started (or a bound passes).
func (b *bench) noisyRun(ctx context.Context, groups bool) (*noisyRun, error) {
	o := b.o
	q, c, err := b.fresh(ctx, "noisy", nil)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	lat := make([][]time.Duration, tenants)
	var floodStarted, nineStarted atomic.Int64
	stop, err := b.worker(ctx, q, func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		now := time.Now().UnixNano()
		t := int(j.Payload[0])
		d := time.Duration(now - int64(binary.BigEndian.Uint64(j.Payload[1:])))
		mu.Lock()
		lat[t] = append(lat[t], d)
		mu.Unlock()
		if t == 0 {
			floodStarted.Add(1)
		} else {
			nineStarted.Add(1)
		}
		sleep(ctx, o.work)
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if stop != nil {
			stop()
		}
	}()

	start := time.Now().Add(20 * time.Millisecond)
	dur := time.Duration(o.seconds * float64(time.Second))
	type result struct {
		sent int
		lag  time.Duration
		err  error
	}
	results := make([]result, tenants)
	var wg sync.WaitGroup
	for t := range tenants {
		rate := float64(o.rate*floodPercent) / 100
		tick := floodTick
		if t > 0 {
			rate = float64(o.rate*(100-floodPercent)) / 100 / (tenants - 1)
			tick = 0
		}
		// The steady tenants start staggered over one of their intervals.
		offset := time.Duration(float64(t-1) / (tenants - 1) / rate * float64(time.Second))
		if t == 0 {
			offset = 0
		}
		p := pacer{c: c, q: q, tenant: t, group: groups, rate: rate, start: start.Add(offset),
			n: int(rate*dur.Seconds() + 1e-6), tick: tick}
		wg.Go(func() {
			sent, lag, err := p.run(ctx)
			results[t] = result{sent, lag, err}
		})
	}
	wg.Wait()
	ended := time.Now()
	run := &noisyRun{Groups: groups, FloodSent: results[0].sent,
		FloodBacklog: results[0].sent - int(floodStarted.Load())}
	startedWhilePublishing := floodStarted.Load() + nineStarted.Load()
	run.StartsPerS = float64(startedWhilePublishing) / ended.Sub(start).Seconds()
	var errs error
	for t, res := range results {
		errs = errors.Join(errs, res.err)
		run.PublishLagMS = max(run.PublishLagMS, ms(res.lag))
		if t > 0 {
			run.NineSent += res.sent
		}
	}
	if errs != nil {
		return nil, errs
	}
	mode := map[bool]string{true: "groups on", false: "groups off"}[groups]
	b.logf("noisy, %s: published %d (tenant 0) + %d (the nine) in %s; tenant 0's backlog %d",
		mode, run.FloodSent, run.NineSent, ended.Sub(start).Round(time.Millisecond), run.FloodBacklog)

	// Without groups the nine wait behind tenant 0's backlog: give it time to drain.
	giveUp := ended.Add(5*dur + 10*time.Second)
	for int(nineStarted.Load()) < run.NineSent && time.Now().Before(giveUp) && ctx.Err() == nil {
		sleep(ctx, 5*time.Millisecond)
	}
	b.logf("noisy, %s: the nine's jobs started %s after publishing ended", mode, time.Since(ended).Round(time.Millisecond))
	err = stop()
	stop = nil
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	var nine []time.Duration
	for t := 1; t < tenants; t++ {
		nine = append(nine, lat[t]...)
		run.NineWorstP99MS = max(run.NineWorstP99MS, summarize(lat[t]).P99)
	}
	run.Nine, run.Flood = summarize(nine), summarize(lat[0])
	run.NineUnstarted = run.NineSent - len(nine)
	return run, nil
}

// pacer publishes tenant's n jobs open loop: job i is due at start + i/rate, and is published
// when due, or at once when the pacer is behind. Each payload is the tenant's index and the
// intended time (unix ns, big-endian), which the handler measures from. Jobs due within tick
// of one another go in one batch.
type pacer struct {
	c      *pipeline.Client
	q      string
	tenant int
	group  bool
	rate   float64
	start  time.Time
	n      int
	tick   time.Duration
}

// run publishes the jobs and returns how many it sent and how late the last publish was
// against its job's intended time.
func (p *pacer) run(ctx context.Context) (sent int, lag time.Duration, err error) {
	var opts []pipeline.Option
	if p.group {
		opts = append(opts, pipeline.WithGroup("tenant-"+strconv.Itoa(p.tenant)))
	}
	at := func(i int) time.Time { return p.start.Add(time.Duration(float64(i) / p.rate * float64(time.Second))) }
	var tasks []pipeline.Task
	for sent < p.n {
		next := at(sent)
		if wait := time.Until(next); wait > 0 {
			sleep(ctx, max(wait, p.tick))
		}
		if err := ctx.Err(); err != nil {
			return sent, lag, err
		}
		now := time.Now()
		due := sent
		for due < p.n && !at(due).After(now) && due-sent < 1000 {
			due++
		}
		tasks = tasks[:0]
		for i := sent; i < due; i++ {
			pl := make([]byte, 9)
			pl[0] = byte(p.tenant)
			binary.BigEndian.PutUint64(pl[1:], uint64(at(i).UnixNano()))
			tasks = append(tasks, pipeline.Task{Type: jobType, Payload: pl})
		}
		if len(tasks) == 1 {
			_, err = p.c.Enqueue(ctx, p.q, tasks[0], opts...)
		} else {
			_, err = p.c.EnqueueBatch(ctx, p.q, tasks, opts...)
		}
		if err != nil {
			return sent, lag, fmt.Errorf("tenant %d: %w", p.tenant, err)
		}
		lag = time.Since(at(due - 1))
		sent = due
	}
	return sent, lag, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func printNoisy(w io.Writer, r *noisyResult) {
	fmt.Fprintf(w, "### Noisy neighbour: tenant 0 publishes %d%% of %d jobs/s, nine others the rest, for %g s\n\n",
		floodPercent, r.Rate, r.Seconds)
	fmt.Fprintf(w, "Worker concurrency %d, handler %.1f ms (at most %.0f jobs/s), group window %d. "+
		"Latency: intended publish time to handler start.\n\n", r.Concurrency, r.WorkMS, r.CapacityPerS, r.Window)
	fmt.Fprintln(w, "| fair groups | nine p50 ms | nine p99 ms | nine max ms | worst tenant p99 ms | nine unstarted | tenant 0 p50 ms | tenant 0 p99 ms | tenant 0 max ms | tenant 0 backlog at end | starts/s | publish lag ms |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, x := range r.Runs {
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %.1f | %.1f | %d of %d | %.0f | %.0f | %.0f | %d of %d | %.0f | %.1f |\n",
			map[bool]string{true: "on", false: "off"}[x.Groups], x.Nine.P50, x.Nine.P99, x.Nine.Max, x.NineWorstP99MS,
			x.NineUnstarted, x.NineSent, x.Flood.P50, x.Flood.P99, x.Flood.Max, x.FloodBacklog, x.FloodSent,
			x.StartsPerS, x.PublishLagMS)
	}
	fmt.Fprintf(w, "\nTenant 0's figures are over its jobs started before the run stopped (once every job of the nine had started); "+
		"the rest of its backlog never ran. With groups a steady tenant's job waits about as long as tenant 0's jobs wait in the stream: "+
		"its window (%d) over what the worker has left after the nine, less a turn: %.1f ms here (%.0f starts/s, %.1f ms per turn of the %d slots).\n",
		r.Window, r.ModelMS, 1000*float64(r.Concurrency)/max(r.TurnoverMS, 1e-9), r.TurnoverMS, r.Concurrency)
	fmt.Fprintf(w, "\nnoisy: %s (with groups, the nine's p99 under %.0f ms and tenant 0's backlog growing)", verdict(r.Pass), r.P99BoundMS)
	if r.Why != "" {
		fmt.Fprintf(w, ": %s", r.Why)
	}
	fmt.Fprint(w, "\n\n")
}
