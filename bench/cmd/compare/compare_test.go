package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// TestCompareShortRun builds the command and runs every system once on 2000 jobs, then checks
// the JSON: every system and metric present, throughputs and costs positive, no errors. It
// needs redis-server on PATH and takes about half a minute; -short skips it.
func TestCompareShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs redis-server and every system for ~30s; skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("measures consumers through /proc: Linux only")
	}
	bin := filepath.Join(t.TempDir(), "compare")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The open-loop workload too, at one small rate for 2 s: exercised, its latency not judged.
	cmd := exec.Command(bin, "-jobs", "2000", "-rounds", "1", "-json",
		"-workloads", "e2e,live,enqueue,enqueue_batch,delayed,openloop",
		"-openloop-rates", "200", "-openloop-seconds", "2", "-openloop-warmup", "500ms")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("compare: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
		}
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("compare did not finish within 5 minutes\nstderr:\n%s", stderr.String())
	}

	var rep struct {
		Machine map[string]any            `json:"machine"`
		Systems map[string]map[string]any `json:"systems"`
		Ratios  map[string]float64        `json:"ratios"`
		Targets []map[string]any          `json:"targets"`
		Errors  []string                  `json:"errors"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, stdout.String())
	}
	if len(rep.Errors) > 0 {
		t.Errorf("errors: %q", rep.Errors)
	}
	for _, k := range []string{"nproc", "go", "redis", "child_baseline_rss_mb"} {
		if _, ok := rep.Machine[k]; !ok {
			t.Errorf("machine.%s missing", k)
		}
	}
	positive := func(sys, metric string) {
		t.Helper()
		v, ok := rep.Systems[sys][metric].(float64)
		if !ok {
			t.Errorf("systems.%s.%s missing (got %v)", sys, metric, rep.Systems[sys][metric])
			return
		}
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("systems.%s.%s = %v, want > 0", sys, metric, v)
		}
	}
	finite := func(sys, metric string) {
		t.Helper()
		v, ok := rep.Systems[sys][metric].(float64)
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("systems.%s.%s = %v, want a number", sys, metric, rep.Systems[sys][metric])
		}
	}
	for _, sys := range []string{"conveyor", "asynq", "watermill", "raw"} {
		if rep.Systems[sys] == nil {
			t.Errorf("systems.%s missing", sys)
			continue
		}
		for _, m := range []string{
			"e2e_jobs_per_s", "live_jobs_per_s", "enqueue_per_s", "peak_rss_mb",
			"redis_bytes_per_job", "worker_cpu_us_per_job", "redis_cpu_us_per_job", "cpu_us_per_job",
			"preload_per_s", "live_publish_per_s",
		} {
			positive(sys, m)
		}
	}
	for _, sys := range []string{"conveyor", "raw"} {
		positive(sys, "enqueue_batch_per_s")
	}
	for _, sys := range []string{"conveyor", "asynq"} {
		for _, m := range []string{"delayed_lateness_p50_ms", "delayed_lateness_p99_ms", "delayed_lateness_max_ms", "delayed_early"} {
			finite(sys, m)
		}
	}
	// Open loop: every variant started every job (the child reports DONE only then) and the
	// measured ones were all sampled. No bound on the latency: it is timing.
	for _, v := range []string{"conveyor", "asynq_c10", "asynq_c50", "watermill_s1", "watermill_s4", "raw"} {
		jobs, _ := rep.Systems[v]["openloop_200_jobs"].(float64)
		samples, _ := rep.Systems[v]["openloop_200_samples"].(float64)
		if jobs != 400 || samples != jobs {
			t.Errorf("systems.%s: openloop_200_jobs = %v, _samples = %v; want 400 each", v, jobs, samples)
		}
		for _, m := range []string{"openloop_200_p50_ms", "openloop_200_p99_ms", "openloop_200_max_ms", "openloop_200_late_publishes", "openloop_200_from_send_p99_ms"} {
			finite(v, m)
		}
		positive(v, "openloop_200_publish_per_s")
	}
	for _, v := range []string{"asynq_c10", "asynq_c50", "watermill_s1", "watermill_s4"} {
		if rep.Systems[v] == nil {
			t.Errorf("systems.%s (variant) missing", v)
		}
	}
	left, ok := rep.Systems["conveyor"]["leftover"].(map[string]any)
	if !ok {
		t.Errorf("systems.conveyor.leftover missing")
	} else {
		for _, k := range []string{"stream_len", "job_hashes", "job_hashes_with_ttl", "job_hashes_without_ttl"} {
			if _, ok := left[k]; !ok {
				t.Errorf("systems.conveyor.leftover.%s missing", k)
			}
		}
	}
	for _, r := range []string{"e2e_vs_asynq", "live_vs_asynq", "e2e_vs_raw", "enqueue_vs_asynq", "enqueue_batch_vs_asynq_enqueue"} {
		if v, ok := rep.Ratios[r]; !ok || !(v > 0) {
			t.Errorf("ratios.%s = %v (present %v), want > 0", r, v, ok)
		}
	}
	if len(rep.Targets) == 0 {
		t.Errorf("no targets")
	}
	if testing.Verbose() {
		os.Stdout.Write(stdout.Bytes())
	}
}

func TestPercentileMedian(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	if got := median(xs); got != 3 {
		t.Errorf("median = %v", got)
	}
	if got := median([]float64{1, 2, 3, 4}); got != 2.5 {
		t.Errorf("median even = %v", got)
	}
	var hundred []float64
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, float64(i))
	}
	for p, want := range map[float64]float64{50: 50, 99: 99, 100: 100, 1: 1} {
		if got := percentile(hundred, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if !math.IsNaN(percentile(nil, 50)) || !math.IsNaN(median(nil)) {
		t.Errorf("empty input must give NaN")
	}
}

func TestDuePayload(t *testing.T) {
	due := time.Unix(1700000000, 123456789)
	p := makeDuePayload(due, 100)
	if len(p) != 100 {
		t.Fatalf("len = %d", len(p))
	}
	got, ok := parseDue(p)
	if !ok || !got.Equal(due) {
		t.Errorf("parseDue = %v, %v; want %v", got, ok, due)
	}
	if _, ok := parseDue(makePayload(100)); ok {
		t.Errorf("a plain payload parsed as a due time")
	}
}

func TestProcReaders(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	pid := os.Getpid()
	if _, err := procCPU(pid); err != nil {
		t.Error(err)
	}
	if ns, err := procRuntime(pid); err != nil || ns <= 0 {
		t.Errorf("procRuntime = %v, %v", ns, err)
	}
	if kb, err := procStatusKB(pid, "VmHWM"); err != nil || kb <= 0 {
		t.Errorf("VmHWM = %v, %v", kb, err)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-jobs", "5000", "-rounds", "1", "-systems", "conveyor,raw", "-asynq-concurrency", "10"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.jobs != 5000 || o.rounds != 1 || len(o.systems) != 2 || o.timeout != 32*time.Second {
		t.Errorf("options = %+v", o)
	}
	if _, err := parseFlags([]string{"-systems", "sidekiq"}, &bytes.Buffer{}); err == nil {
		t.Error("unknown system accepted")
	}
	vs := variantsOf(options{systems: []string{"asynq", "watermill", "raw"}, asynqConc: []int{10, 50}, watermillSubs: []int{1, 4}})
	if len(vs["asynq"]) != 2 || vs["asynq"][1] != "asynq_c50" || vs["watermill"][0] != "watermill_s1" || vs["raw"][0] != "raw" {
		t.Errorf("variants = %v", vs)
	}
}
