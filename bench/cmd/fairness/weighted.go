package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// shareSpan is the run of consecutive starts the sliding shares are taken over.
const shareSpan = 300

// shareTolerance is the target's bound on a group's share, relative to its weight's share.
const shareTolerance = 0.10

// weightedGroups are the scenario's groups and weights, 3:2:1.
var weightedGroups = []struct {
	name   string
	weight int
}{{"gold", 3}, {"silver", 2}, {"bronze", 1}}

type weightedResult struct {
	Jobs        int     `json:"jobs_per_group"`
	Starts      int     `json:"starts"`
	Window      int     `json:"window"`
	Concurrency int     `json:"concurrency"`
	WorkMS      float64 `json:"work_ms"`
	// Cycle is the windows' sum, window x weight over the groups: while every group has jobs
	// waiting, each start's job is followed into the stream by one of its group's, so the
	// stream turns over once every Cycle starts.
	Cycle  int          `json:"cycle"`
	Groups []groupShare `json:"groups"`
	// BacklogHeld says every group still had jobs waiting at the last measured start.
	BacklogHeld bool    `json:"backlog_held"`
	ElapsedMS   float64 `json:"elapsed_ms"`
	Pass        bool    `json:"pass"`
}

type groupShare struct {
	Group  string  `json:"group"`
	Weight int     `json:"weight"`
	Target float64 `json:"target"`
	Starts int     `json:"starts"`
	Share  float64 `json:"share"`
	// Dev is (Share - Target) / Target.
	Dev float64 `json:"dev"`
	// SpanMin and SpanMax are the lowest and highest share over every shareSpan consecutive
	// starts of the measured ones.
	SpanMin float64 `json:"span_min"`
	SpanMax float64 `json:"span_max"`
	// CycleMin and CycleMax are the same over every Cycle consecutive starts.
	CycleMin float64 `json:"cycle_min"`
	CycleMax float64 `json:"cycle_max"`
	Pass     bool    `json:"pass"`
}

// weighted runs the weighted-shares scenario.
func (b *bench) weighted(ctx context.Context) (*weightedResult, error) {
	o := b.o
	weights := map[string]int{}
	total := 0
	for _, g := range weightedGroups {
		weights[g.name] = g.weight
		total += g.weight
	}
	q, c, err := b.fresh(ctx, "weighted", weights)
	if err != nil {
		return nil, err
	}
	// Interleaved, so that without the groups each would get a third of the starts.
	n := o.jobs * len(weightedGroups)
	const chunk = 999
	tasks := make([]pipeline.Task, 0, chunk)
	t0 := time.Now()
	for i := 0; i < n; i += chunk {
		tasks = tasks[:0]
		for k := i; k < min(n, i+chunk); k++ {
			g := k % len(weightedGroups)
			tasks = append(tasks, pipeline.Task{Type: jobType, Payload: []byte{byte(g)},
				Opts: []pipeline.Option{pipeline.WithGroup(weightedGroups[g].name)}})
		}
		if _, err := c.EnqueueBatch(ctx, q, tasks); err != nil {
			return nil, err
		}
	}
	b.logf("weighted: published %d jobs (%d a group) in %s", n, o.jobs, time.Since(t0).Round(time.Millisecond))

	var mu sync.Mutex
	order := make([]byte, 0, o.starts)
	enough := make(chan struct{})
	t1 := time.Now()
	stop, err := b.worker(ctx, q, func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		mu.Lock()
		if len(order) < o.starts {
			order = append(order, j.Payload[0])
			if len(order) == o.starts {
				close(enough)
			}
		}
		mu.Unlock()
		sleep(ctx, o.work)
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-enough:
	case <-ctx.Done():
	}
	elapsed := time.Since(t1)
	if err := stop(); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("weighted: %d of %d starts: %w", len(order), o.starts, ctx.Err())
	}
	b.logf("weighted: %d starts in %s", o.starts, elapsed.Round(time.Millisecond))

	r := &weightedResult{Jobs: o.jobs, Starts: o.starts, Window: b.window(), Concurrency: o.concurrency,
		WorkMS: float64(o.work.Microseconds()) / 1000, ElapsedMS: float64(elapsed.Microseconds()) / 1000,
		BacklogHeld: true, Pass: true, Cycle: total * b.window()}
	counts := make([]int, len(weightedGroups))
	for _, g := range order {
		counts[g]++
	}
	lo, hi := spanShares(order, len(weightedGroups), shareSpan)
	clo, chi := spanShares(order, len(weightedGroups), r.Cycle)
	for i, g := range weightedGroups {
		gs := groupShare{Group: g.name, Weight: g.weight, Target: float64(g.weight) / float64(total),
			Starts: counts[i], Share: float64(counts[i]) / float64(len(order)), SpanMin: lo[i], SpanMax: hi[i],
			CycleMin: clo[i], CycleMax: chi[i]}
		gs.Dev = (gs.Share - gs.Target) / gs.Target
		gs.Pass = gs.Dev >= -shareTolerance && gs.Dev <= shareTolerance
		r.Pass = r.Pass && gs.Pass
		// The group's window holds window x weight jobs; beyond those started, the rest wait.
		if counts[i]+r.Window*g.weight >= o.jobs {
			r.BacklogHeld = false
		}
		r.Groups = append(r.Groups, gs)
	}
	r.Pass = r.Pass && r.BacklogHeld
	return r, nil
}

// spanShares returns each group's lowest and highest share over every span consecutive
// entries of order (group indexes below groups).
func spanShares(order []byte, groups, span int) (lo, hi []float64) {
	lo, hi = make([]float64, groups), make([]float64, groups)
	if len(order) < span {
		return lo, hi
	}
	cnt := make([]int, groups)
	for _, g := range order[:span] {
		cnt[g]++
	}
	minC, maxC := append([]int(nil), cnt...), append([]int(nil), cnt...)
	for i := span; i < len(order); i++ {
		cnt[order[i]]++
		cnt[order[i-span]]--
		for g := range cnt {
			minC[g], maxC[g] = min(minC[g], cnt[g]), max(maxC[g], cnt[g])
		}
	}
	for g := range cnt {
		lo[g], hi[g] = float64(minC[g])/float64(span), float64(maxC[g])/float64(span)
	}
	return lo, hi
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func printWeighted(w io.Writer, r *weightedResult) {
	fmt.Fprintf(w, "### Weighted shares: 3:2:1, first %d starts\n\n", r.Starts)
	fmt.Fprintf(w, "Backlog %d jobs a group, window %d (x weight), concurrency %d, handler %.1f ms; %d starts in %.0f ms.\n\n",
		r.Jobs, r.Window, r.Concurrency, r.WorkMS, r.Starts, r.ElapsedMS)
	fmt.Fprintf(w, "| group | weight | target | starts | share | deviation | %d-start min | %d-start max | %d-start min | %d-start max | ±10%% |\n",
		shareSpan, shareSpan, r.Cycle, r.Cycle)
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, g := range r.Groups {
		fmt.Fprintf(w, "| %s | %d | %.3f | %d | %.3f | %+.1f%% | %.3f | %.3f | %.3f | %.3f | %s |\n", g.Group, g.Weight, g.Target,
			g.Starts, g.Share, 100*g.Dev, g.SpanMin, g.SpanMax, g.CycleMin, g.CycleMax, verdict(g.Pass))
	}
	fmt.Fprintf(w, "\nweighted: %s (every share within ±10%% of its weight's; every group had jobs waiting throughout: %v)\n\n",
		verdict(r.Pass), r.BacklogHeld)
}
