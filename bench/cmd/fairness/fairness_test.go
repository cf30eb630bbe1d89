package main

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"
)

// runJSON runs the command with args and -json and returns its exit code and report.
func runJSON(t *testing.T, args ...string) (int, report) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), append(args, "-json"), &stdout, &stderr)
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d, no report (%v)\nstdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
	}
	t.Logf("exit %d\n%s", code, stdout.String())
	return code, rep
}

// TestWeightedExactWithOneSlot: with one slot the order of starts depends on no timing. The
// worker runs one job at a time and frees its slot once the outcome is written, which puts
// one job of the same group at the stream's tail. So every run of Cycle consecutive starts
// holds exactly window x weight jobs of each group, and the shares are exactly 3:2:1.
func TestWeightedExactWithOneSlot(t *testing.T) {
	code, rep := runJSON(t, "-scenario", "weighted", "-concurrency", "1", "-work", "0", "-jobs", "1000", "-starts", "1200")
	r := rep.Weighted
	if code != 0 || r == nil || !r.Pass || !r.BacklogHeld || r.Cycle != 120 {
		t.Fatalf("exit %d, %+v", code, r)
	}
	for _, g := range r.Groups {
		if g.CycleMin != g.Target || g.CycleMax != g.Target || g.Starts != 1200*g.Weight/6 {
			t.Errorf("%s: %d starts, per cycle %.4f..%.4f, want %.4f exactly", g.Group, g.Starts, g.CycleMin, g.CycleMax, g.Target)
		}
	}
}

// TestFairnessShort is the CI-sized run of both scenarios with their default worker: 1,200
// weighted starts, and 1 s of the noisy flood with and without groups. With ten slots the
// shares and latencies depend on timing, so it checks that the runs completed and measured
// what they should, and logs the figures (docs/BENCHMARKS.md has the full run's).
func TestFairnessShort(t *testing.T) {
	_, rep := runJSON(t, "-jobs", "1000", "-starts", "1200", "-seconds", "1")
	w := rep.Weighted
	if w == nil || len(w.Groups) != 3 || !w.BacklogHeld {
		t.Fatalf("weighted: %+v", w)
	}
	sum := 0
	for _, g := range w.Groups {
		sum += g.Starts
		if g.Starts == 0 || g.SpanMin > g.Share || g.SpanMax < g.Share {
			t.Errorf("weighted: %+v", g)
		}
	}
	if sum != 1200 {
		t.Errorf("weighted: %d starts, want 1200", sum)
	}
	n := rep.Noisy
	if n == nil || len(n.Runs) != 2 || !n.Runs[0].Groups || n.Runs[1].Groups {
		t.Fatalf("noisy: %+v", n)
	}
	for _, x := range n.Runs {
		// 1 s at 10,000/s: 9,000 of tenant 0's, 111 of each other's.
		if x.FloodSent != 9000 || x.NineSent != 9*111 || x.NineUnstarted != 0 || x.Nine.Jobs != x.NineSent ||
			x.Flood.Jobs == 0 || x.Nine.P99 <= 0 {
			t.Errorf("noisy, groups %v: %+v", x.Groups, x)
		}
	}
	// The worker serves at most 5,000/s: tenant 0's backlog grows whatever the machine.
	if on := n.Runs[0]; on.FloodBacklog*10 < on.FloodSent {
		t.Errorf("noisy: tenant 0's backlog %d of %d", on.FloodBacklog, on.FloodSent)
	}
}

func TestSpanShares(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		order  []byte
		span   int
		lo, hi []float64
	}{
		{"alternating", []byte{0, 1, 0, 1, 0, 1}, 2, []float64{0.5, 0.5}, []float64{0.5, 0.5}},
		{"runs", []byte{0, 0, 1, 1}, 2, []float64{0, 0}, []float64{1, 1}},
		{"whole", []byte{0, 0, 0, 1}, 4, []float64{0.75, 0.25}, []float64{0.75, 0.25}},
		{"too short", []byte{0}, 2, []float64{0, 0}, []float64{0, 0}},
	} {
		lo, hi := spanShares(tc.order, 2, tc.span)
		for g := range 2 {
			if math.Abs(lo[g]-tc.lo[g]) > 1e-9 || math.Abs(hi[g]-tc.hi[g]) > 1e-9 {
				t.Errorf("%s: lo %v hi %v, want %v %v", tc.name, lo, hi, tc.lo, tc.hi)
			}
		}
	}
}

func TestPct(t *testing.T) {
	t.Parallel()
	xs := make([]time.Duration, 100)
	for i := range xs {
		xs[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := pct(xs, tc.p); got != tc.want {
			t.Errorf("pct(%g) = %s, want %s", tc.p, got, tc.want)
		}
	}
	if got := pct(nil, 99); got != 0 {
		t.Errorf("pct(nil) = %s", got)
	}
}

func TestFairnessFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-scenario", "both"},
		{"-jobs", "0"},
		{"-starts", "10"},
		{"-window", "-1"},
		{"-seconds", "0"},
		{"-rate", "5"},
		{"-concurrency", "0"},
		{"-work", "-1ms"},
		{"stray"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), args, &stdout, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}
