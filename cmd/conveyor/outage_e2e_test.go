package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/handlers"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

var (
	outageSpell = flag.Duration("outage-spell", 5*time.Second,
		"how long TestOutageE2E keeps the redis-server stopped while producer, workers and scheduler run")
	aofRuns = flag.Int("aof-runs", 1,
		"how many SIGKILL-and-restart runs TestAOFE2E/EverySec measures (it reports the acknowledged publishes lost)")
)

// TestOutageE2E stops the redis-server for -outage-spell (5 s) while a producer process
// (demo --produce-only: its stdout is its ledger of acknowledged job ids), two worker processes
// and their schedulers (delayed jobs due during the outage) run, in two ways:
//
//   - Pause: SIGSTOP, then SIGCONT: connections stay open and calls hang until they time out;
//   - StopStart: SIGTERM (Redis writes its AOF and exits), then a new redis-server on the same
//     port and dir: connections are refused, then reset; also on a queue of 3 partitions, whose
//     worker runs a reader and a recoverer per partition.
//
// It checks that nothing exits, nothing spins (each process's CPU time over the outage), the
// workers log one line per backoff step at most (bounded by the backoff schedules) and that they
// reconnected, and that every acknowledged job, before, during or after the outage, ends as its
// handler earns.
func TestOutageE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary around a Redis outage")
	}
	bin := buildCLI(t)
	t.Run("Pause", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
		runOutage(t, bin, srv, 1, false, func() func() {
			require.NoError(t, syscall.Kill(srv.PID(), syscall.SIGSTOP))
			return func() { require.NoError(t, syscall.Kill(srv.PID(), syscall.SIGCONT)) }
		})
	})
	for _, partitions := range []int{1, 3} {
		name := "StopStart"
		if partitions > 1 {
			name += fmt.Sprintf("Partitions%d", partitions)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
			runOutage(t, bin, srv, partitions, true, func() func() {
				pid := srv.PID()
				require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
				waitFor(t, 10*time.Second, 10*time.Millisecond, "redis-server to exit", func() bool {
					return syscall.Kill(pid, 0) != nil // reaped by redistest once it exits
				})
				return func() { require.NoError(t, srv.Restart()) }
			})
		})
	}
}

// runOutage runs one outage: stop (which returns the function that ends it) is called once
// jobs flow, and the outage lasts -outage-spell. With refused, calls fail at once during the
// outage (rather than hang until go-redis's timeouts, which retries may hide in 5 s), so the
// workers must say so and say when Redis is back.
func runOutage(t *testing.T, bin string, srv *redistest.Server, partitions int, refused bool, stop func() (resume func())) {
	c := &cli{bin: bin, url: srv.URL(), rdb: srv.Client(t)}
	q := redistest.UniqueName(t)
	if partitions > 1 {
		c.ok(t, "queues", "create", q, "--partitions", strconv.Itoa(partitions))
	}
	var workers []*proc
	for i := range 2 {
		w := c.start(t, "worker", "--queue", q, "--name", fmt.Sprintf("w%d-%s", i, q), "--concurrency", "8",
			"--backoff-base", "100ms", "--backoff-max", "500ms", "--log-format", "json", "--log-level", "info")
		workers = append(workers, w)
	}
	for _, w := range workers {
		waitFor(t, 20*time.Second, 20*time.Millisecond, "the workers to start", func() bool {
			return strings.Contains(w.output.String(), "worker started")
		})
	}
	prod := startProducer(t, c, q)
	client, err := pipeline.NewClient(c.rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	waitFor(t, 20*time.Second, 50*time.Millisecond, "jobs to flow", func() bool {
		s, err := client.Stats(t.Context(), q)
		return err == nil && s.Completed >= 10
	})

	pids := append([]int{prod.cmd.Process.Pid}, workers[0].cmd.Process.Pid, workers[1].cmd.Process.Pid)
	names := []string{"producer", "worker 0", "worker 1"}
	cpu := make([]time.Duration, len(pids))
	for i, pid := range pids {
		cpu[i] = cpuTime(t, pid)
	}
	before := len(prod.ids())
	began := time.Now()
	resume := stop()
	time.Sleep(*outageSpell)
	resume()
	outage := time.Since(began)
	during := len(prod.ids()) - before
	for i, pid := range pids {
		used := cpuTime(t, pid) - cpu[i]
		t.Logf("%s: %v of CPU over the %v outage", names[i], used, outage.Round(time.Millisecond))
		// A correctness bound against a retry loop without a wait, not a performance figure:
		// a process that spins burns a core for the whole outage.
		require.Less(t, used, 2*time.Second, "%s spun while Redis was away", names[i])
	}

	// Publishing resumes, and what is acknowledged now is in the ledger too.
	atResume := len(prod.ids())
	waitFor(t, 30*time.Second, 50*time.Millisecond, "the producer to publish again", func() bool {
		return len(prod.ids()) >= atResume+20
	})
	for i, p := range append([]*proc{prod.proc}, workers...) {
		select {
		case <-p.done:
			t.Fatalf("%s exited during the outage: %s", names[i], p.output)
		default:
		}
	}
	require.Equal(t, 0, prod.stop(t), "the producer ends on its signal with exit 0")
	ledger := prod.ids()
	for line := range strings.Lines(prod.output.String()) {
		if strings.HasPrefix(line, "{") && !strings.Contains(line, `"demo jobs published"`) {
			t.Logf("producer: %s", strings.TrimSpace(line))
		}
	}
	t.Logf("ledger: %d acknowledged jobs, %d before the outage, %d during it, %d after",
		len(ledger), before, during, len(ledger)-atResume)

	dueDuring := 0
	for _, j := range waitLedgerFinal(t, client, q, ledger) {
		if j.RunAt.After(j.CreatedAt) && j.RunAt.After(began) && j.RunAt.Before(began.Add(outage)) {
			dueDuring++
		}
	}
	require.Positive(t, dueDuring, "some delayed jobs fell due while Redis was away (the scheduler's part)")
	t.Logf("%d delayed jobs fell due during the outage", dueDuring)
	for _, w := range workers {
		lines := w.output.String()
		if n := checkOutageLog(t, lines, outage); refused {
			require.Positive(t, n, "the worker said nothing about the outage")
			require.Contains(t, lines, "reconnected to Redis after", "the worker says Redis is back")
		}
		require.Equal(t, 0, w.stop(t), "a worker exits cleanly after the outage")
		require.NotContains(t, w.output.String(), "panic")
	}
	if refused {
		require.Contains(t, prod.output.String(), "publishing again")
	}
	require.LessOrEqual(t, strings.Count(prod.output.String(), "cannot publish"), 1,
		"the producer says once that it cannot publish:\n%s", prod.output)
	s, err := client.Stats(t.Context(), q)
	require.NoError(t, err)
	t.Logf("stats: %+v", s)
}

// producer is demo --produce-only in the background, logging JSON: the lines of its output
// that are not log lines are the ids of the jobs Redis acknowledged, one a line.
type producer struct{ *proc }

func startProducer(t *testing.T, c *cli, q string) *producer {
	t.Helper()
	return &producer{c.start(t, "demo", "--produce-only", "--queue", q, "--every", "20ms", "--log-format", "json")}
}

// ids returns the ids acknowledged so far (a line not yet ended is not counted).
func (p *producer) ids() []string {
	out := p.output.String()
	var ids []string
	for line := range strings.Lines(out[:strings.LastIndexByte(out, '\n')+1]) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "{") && !strings.HasPrefix(line, "conveyor: ") {
			ids = append(ids, line)
		}
	}
	return ids
}

// waitLedgerFinal waits until every job of ledger is final, then requires each to have ended
// as the demo mix's handlers earn: the poison jobs (type fail, no retries) failed, the rest
// completed. It returns the jobs.
func waitLedgerFinal(t *testing.T, client *pipeline.Client, q string, ledger []string) []*pipeline.Job {
	t.Helper()
	ctx := t.Context()
	pending := ledger
	waitFor(t, 60*time.Second, 200*time.Millisecond, "every acknowledged job final", func() bool {
		var left []string
		for _, id := range pending {
			j, err := client.Get(ctx, q, id)
			if errors.Is(err, pipeline.ErrNotFound) {
				require.NoError(t, err, "acknowledged job %s lost", id)
			}
			if err != nil || !j.Status.Final() {
				left = append(left, id)
			}
		}
		pending = left
		return len(left) == 0
	})
	var wrong []string
	jobs := make([]*pipeline.Job, 0, len(ledger))
	for _, id := range ledger {
		j, err := client.Get(ctx, q, id)
		require.NoError(t, err)
		jobs = append(jobs, j)
		want := status.Completed
		if j.Type == handlers.TypeFail {
			want = status.Failed
		}
		if j.Status != want {
			wrong = append(wrong, fmt.Sprintf("%s (%s): %s, want %s: %s", id, j.Type, j.Status, want, j.LastError))
		}
	}
	require.Empty(t, wrong, "jobs that did not end as their handler earned")
	return jobs
}

// cpuTime is the user and system CPU time the process pid used so far, from /proc/PID/stat.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	// The command name (field 2) may hold spaces; fields after it are plain. utime and stime are
	// fields 14 and 15, in clock ticks: USER_HZ, 100 on every Linux architecture Go supports.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	require.NoError(t, err)
	return time.Duration(utime+stime) * (time.Second / 100)
}

// Backoff schedules of the worker's parts (pipeline, stream, delayed): the fastest, its
// writers', bounds the lines of any part that steps a backoff; the recoverer logs once per scan.
const (
	fastestBackoffMin = 50 * time.Millisecond
	fastestBackoffMax = 2 * time.Second
	recoveryScanEvery = 5 * time.Second * 9 / 10 // recovery.DefaultInterval less its jitter
	// detectSlack is how much longer than the outage a part may see failures: a call sent
	// just before the end times out after go-redis's ReadTimeout (3 s).
	detectSlack = 4 * time.Second
)

// backoffSteps is how many steps a backoff from lo doubling to hi takes within d: the most
// lines a part that logs once per step writes over an outage of d.
func backoffSteps(lo, hi, d time.Duration) int {
	n, wait := 1, lo
	for at := time.Duration(0); at+wait <= d; n++ {
		at += wait
		wait = min(2*wait, hi)
	}
	return n
}

// checkOutageLog counts a worker's warning and error lines (JSON, one per line) by message (and
// by stream, or a recoverer's queue, whose backoffs are their own), leaving out job lines (a flaky job's failed attempts, the poison jobs), and requires each
// message to have come at most once per backoff step over the outage: a part that logs every
// failed call, or retries without waiting, floods its log. It returns how many lines it counted.
func checkOutageLog(t *testing.T, out string, outage time.Duration) (lines int) {
	t.Helper()
	window := outage + detectSlack
	byMsg := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Level     string          `json:"level"`
			Message   string          `json:"message"`
			JobID     string          `json:"job_id"`
			Topic     string          `json:"topic"` // a partition's reader has its own backoff
			Queue     string          `json:"queue"` // and its recoverer its own scans
			Partition json.RawMessage `json:"partition"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.JobID != "" {
			continue
		}
		if line.Level == "warn" || line.Level == "error" || strings.Contains(line.Message, "Redis after") {
			t.Logf("worker: %s", sc.Bytes())
		}
		if line.Level == "warn" || line.Level == "error" {
			key := line.Message
			for _, of := range []string{line.Topic, recovererQueue(line.Message, line.Queue, string(line.Partition))} {
				if of != "" {
					key += " (" + of + ")"
				}
			}
			byMsg[key]++
		}
	}
	require.NoError(t, sc.Err())
	t.Logf("a worker's warning and error lines over the outage: %v", byMsg)
	for msg, n := range byMsg {
		lines += n
		limit := backoffSteps(fastestBackoffMin, fastestBackoffMax, window)
		if strings.HasPrefix(msg, "recover stale jobs") {
			limit = int(window/recoveryScanEvery) + 1
		}
		require.LessOrEqual(t, n, limit, "%q logged %d times over a %v outage", msg, n, outage)
	}
	return lines
}

// recovererQueue is the queue and partition of a recoverer's line, whose scans are its own,
// and "" for other lines: the scheduler's spell covers all its queues.
func recovererQueue(msg, queue, partition string) string {
	if msg != "recover stale jobs" {
		return ""
	}
	if partition != "" {
		return queue + "#" + partition
	}
	return queue
}

func TestBackoffSteps(t *testing.T) {
	t.Parallel()
	// 50 ms doubling to 2 s: steps at 0, 0.05, 0.15, 0.35, 0.75, 1.55, 3.15, 5.15, 7.15 s.
	require.Equal(t, 1, backoffSteps(50*time.Millisecond, 2*time.Second, 0))
	require.Equal(t, 8, backoffSteps(50*time.Millisecond, 2*time.Second, 5150*time.Millisecond))
	require.Equal(t, 9, backoffSteps(50*time.Millisecond, 2*time.Second, 9*time.Second))
}

// TestAOFE2E kills the redis-server with SIGKILL while eight producers publish and the ledger
// is what Redis acknowledged; it starts Redis again on the same dir and port (the producers
// send what failed again, with the same id), then checks that every acknowledged job exists
// and that a worker completes them all.
//
//   - Always: appendonly yes, appendfsync always: no acknowledged publish may be lost;
//   - WithoutAOF: no persistence: the check must see the loss (it can fail);
//   - EverySec: appendonly yes, appendfsync everysec: measured, not asserted, over -aof-runs
//     runs (docs/OPERATIONS.md, "Redis outages").
func TestAOFE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary around a Redis crash")
	}
	bin := buildCLI(t)
	t.Run("Always", func(t *testing.T) {
		t.Parallel()
		r := runAOFCrash(t, bin, "--appendonly", "yes", "--appendfsync", "always")
		require.Empty(t, r.lost, "acknowledged publishes lost with appendfsync always")
		r.complete(t)
	})
	t.Run("WithoutAOF", func(t *testing.T) {
		t.Parallel()
		r := runAOFCrash(t, bin, "--appendonly", "no")
		require.NotEmpty(t, r.lost, "without persistence a SIGKILL loses what was acknowledged before it")
	})
	t.Run("EverySec", func(t *testing.T) {
		t.Parallel()
		lost, acked := 0, 0
		for range *aofRuns {
			r := runAOFCrash(t, bin, "--appendonly", "yes", "--appendfsync", "everysec")
			lost += len(r.lost)
			acked += len(r.ledger)
			r.complete(t)
		}
		t.Logf("appendfsync everysec: %d of %d acknowledged publishes lost over %d SIGKILL runs", lost, acked, *aofRuns)
	})
}

// aofCrash is what one SIGKILL-and-restart run left: the ledger and the ids in it that Redis
// no longer has.
type aofCrash struct {
	c      *cli
	queue  string
	ledger []string
	lost   []string
}

// runAOFCrash starts a private Redis with args, publishes from eight goroutines, kills Redis
// once 300 publishes were acknowledged, restarts it 3 s later (longer than go-redis rides out
// with its own retries, about 2 s: publishes fail and are sent again), keeps publishing until
// 200 more were acknowledged, and looks up every acknowledged id.
func runAOFCrash(t *testing.T, bin string, args ...string) *aofCrash {
	srv := redistest.Start(t, redistest.WithArgs(args...))
	r := &aofCrash{c: &cli{bin: bin, url: srv.URL(), rdb: srv.Client(t)}, queue: redistest.UniqueName(t)}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: time.Second})
	defer rdb.Close()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		mu              sync.Mutex
		wg              sync.WaitGroup
		refused, resent int
	)
	acked := make(chan struct{}, 1<<16)
	for p := range 8 {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				id := fmt.Sprintf("p%d-%06d", p, n)
				task := pipeline.Task{Type: handlers.TypeEcho, Payload: fmt.Appendf(nil, `{"n":%d}`, n)}
				for try := 0; ; try++ {
					_, err := client.Enqueue(ctx, r.queue, task, pipeline.WithID(id))
					if err == nil {
						break
					}
					if ctx.Err() != nil {
						return
					}
					require.False(t, errors.Is(err, pipeline.ErrInvalid), "publish %s: %v", id, err)
					mu.Lock()
					refused++
					if try == 0 {
						resent++
					}
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
				}
				mu.Lock()
				r.ledger = append(r.ledger, id)
				mu.Unlock()
				acked <- struct{}{}
			}
		})
	}
	count := func(n int) {
		for range n {
			select {
			case <-acked:
			case <-time.After(30 * time.Second):
				t.Fatalf("no publish acknowledged for 30 s")
			}
		}
	}
	count(300)
	require.NoError(t, srv.Kill())
	mu.Lock()
	atKill := len(r.ledger)
	mu.Unlock()
	time.Sleep(3 * time.Second)
	require.NoError(t, srv.Restart())
	for len(acked) > 0 { // acknowledged before the kill
		<-acked
	}
	count(200)
	cancel()
	wg.Wait()

	reader, err := pipeline.NewClient(r.c.rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	for _, id := range r.ledger {
		_, err := reader.Get(t.Context(), r.queue, id)
		if errors.Is(err, pipeline.ErrNotFound) {
			r.lost = append(r.lost, id)
			continue
		}
		require.NoError(t, err)
	}
	t.Logf("%s: %d publishes acknowledged (%d before the SIGKILL), %d failed and sent again (%d tries failed), %d lost",
		strings.Join(args, " "), len(r.ledger), atKill, resent, refused, len(r.lost))
	return r
}

// complete runs a worker process and waits until every surviving acknowledged job completed.
func (r *aofCrash) complete(t *testing.T) {
	t.Helper()
	w := r.c.start(t, "worker", "--queue", r.queue, "--concurrency", "16", "--log-format", "json")
	lost := map[string]bool{}
	for _, id := range r.lost {
		lost[id] = true
	}
	var kept []string
	for _, id := range r.ledger {
		if !lost[id] {
			kept = append(kept, id)
		}
	}
	client, err := pipeline.NewClient(r.c.rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	waitLedgerFinal(t, client, r.queue, kept)
	require.Equal(t, 0, w.stop(t))
}

// BenchmarkEnqueueAppendfsync measures publishing (one job per call) against a private Redis
// with each persistence setting, from one goroutine, from 16, and in batches of 100 from one:
// appendfsync always adds an fsync to every event-loop turn that wrote, which concurrent
// publishers and the jobs of a batch share.
func BenchmarkEnqueueAppendfsync(b *testing.B) {
	for _, s := range []struct{ name, appendonly, fsync string }{
		{"NoAOF", "no", "everysec"},
		{"EverySec", "yes", "everysec"},
		{"Always", "yes", "always"},
	} {
		b.Run(s.name, func(b *testing.B) {
			srv := redistest.Start(b, redistest.WithArgs("--appendonly", s.appendonly, "--appendfsync", s.fsync))
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 32})
			defer rdb.Close()
			client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
			require.NoError(b, err)
			task := pipeline.Task{Type: handlers.TypeEcho, Payload: bytes.Repeat([]byte("x"), 100)}
			ctx := context.Background()
			b.Run("Serial", func(b *testing.B) {
				for b.Loop() {
					if _, err := client.Enqueue(ctx, "bench", task); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			})
			b.Run("Parallel16", func(b *testing.B) {
				b.SetParallelism(8) // 16 goroutines on 2 cores
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := client.Enqueue(ctx, "bench", task); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
			})
			b.Run("Batch100", func(b *testing.B) {
				tasks := make([]pipeline.Task, 100)
				for i := range tasks {
					tasks[i] = task
				}
				for b.Loop() {
					if _, err := client.EnqueueBatch(ctx, "bench", tasks); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "jobs/s")
			})
		})
	}
}
