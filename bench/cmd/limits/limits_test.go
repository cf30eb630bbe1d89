package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLimitsShort is the short version of both benchmarks, run by `go test -short ./...` in CI
// (a few seconds): a rate of 500/s across 4 workers for 2 s, and one round of 3,000-job drains
// with and without a per-key limit over 100 keys. It checks what the machine cannot help:
// the command ran, no span of admissions passed the GCRA's bound, the backlog outlasted the
// window, the per-key limit was never reached, and every worker took part. The figures are
// logged, not bounded: a loaded CI machine may run them slower (the full run and its targets
// are docs/BENCHMARKS.md's).
func TestLimitsShort(t *testing.T) {
	out := filepath.Join(t.TempDir(), "limits.json")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-rate", "500", "-window", "2s", "-warmup", "1s",
		"-jobs", "3000", "-rounds", "1", "-concurrency", "50", "-json-out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	t.Logf("\n%s", stdout.String())
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	r := rep.Rate
	if r == nil || r.Jobs != 3000 || r.Violations != 0 || !r.BacklogOK || r.InWindow == 0 {
		t.Fatalf("rate: %+v", r)
	}
	if len(r.PerWorker) != 4 {
		t.Fatalf("rate: jobs per worker %v", r.PerWorker)
	}
	for i, n := range r.PerWorker {
		if n == 0 {
			t.Errorf("rate: worker %d ran no job: %v", i, r.PerWorker)
		}
	}
	p := rep.PerKey
	if p == nil || len(p.Ratios) != 1 || p.Deferred != 0 || p.Plain[0] <= 0 || p.Limited[0] <= 0 {
		t.Fatalf("perkey: %+v", p)
	}
	if !strings.Contains(stdout.String(), "median ratio") {
		t.Errorf("no per-key summary on stdout:\n%s", stdout.String())
	}
}

func TestBusiest(t *testing.T) {
	t.Parallel()
	times := []int64{0, 0, 5, 10, 10, 11, 30}
	for _, tc := range []struct {
		span int64
		want int
	}{{0, 2}, {1, 3}, {5, 3}, {10, 5}, {11, 6}, {30, 7}} {
		if got := busiest(times, tc.span); got != tc.want {
			t.Errorf("busiest(%d) = %d, want %d", tc.span, got, tc.want)
		}
	}
}

func TestLimitsFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-only", "both"},
		{"-rate", "0"},
		{"-interval", "1500us"},
		{"-workers", "0"},
		{"-window", "10ms"},
		{"-keys", "0"},
		{"-rounds", "0"},
		{"-concurrency", "0"},
		{"stray"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), args, &stdout, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}
