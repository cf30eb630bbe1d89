package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// The recovery tests run real worker processes and stop them the hard way (SIGKILL, SIGSTOP)
// and the polite way (SIGTERM), as an operator or a crashing machine would.
//
// The chaos test has a long version for soak runs, with its figures recorded in
// docs/BENCHMARKS.md:
//
//	go test -run 'TestRecoveryE2E/Chaos' -count=1 -timeout 30m ./cmd/conveyor \
//	    -chaos.jobs 100000 -chaos.duration 5m -chaos.concurrency 20 -chaos.sleep-ms 5 -v
var (
	chaosJobs        = flag.Int("chaos.jobs", 2000, "jobs the chaos test publishes")
	chaosDuration    = flag.Duration("chaos.duration", 15*time.Second, "how long the chaos test kills workers")
	chaosConcurrency = flag.Int("chaos.concurrency", 1, "concurrency of each chaos worker")
	chaosSleepMS     = flag.Int("chaos.sleep-ms", 20, "length of each chaos job")
	recoveryRounds   = flag.Int("recovery.rounds", 1, "SIGKILL rounds of the recovery-time test")
)

func TestRecoveryE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills worker processes")
	}
	srv := redistest.Shared(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}

	// The timing-sensitive test runs alone first; the others then run side by side.
	t.Run("RecoveryTime", func(t *testing.T) { testRecoveryTime(t, c) })
	t.Run("group", func(t *testing.T) {
		t.Run("Chaos", func(t *testing.T) { t.Parallel(); testChaos(t, c) })
		t.Run("FrozenWorker", func(t *testing.T) { t.Parallel(); testFrozenWorker(t, c) })
		t.Run("AllWorkersKilled", func(t *testing.T) { t.Parallel(); testAllKilled(t, c) })
		t.Run("LongJob", func(t *testing.T) { t.Parallel(); testLongJob(t, c) })
		t.Run("Shutdown", func(t *testing.T) { t.Parallel(); testShutdown(t, c) })
	})
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
	if sig == syscall.SIGSTOP {
		p.waitStopped(t)
	}
}

// waitStopped waits until every thread of p is stopped (state T in /proc). kill returns
// before the threads have stopped; on a loaded machine a thread may still run user code, and
// a reply the test sends next could still be read (TestRecoveryE2E/group/FrozenWorker saw
// the job completed on the frozen worker under go test -count=3 with two CPU hogs).
func (p *proc) waitStopped(t *testing.T) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", p.cmd.Process.Pid)
	waitFor(t, 20*time.Second, time.Millisecond, "every thread of pid "+filepath.Base(filepath.Dir(dir))+" stopped", func() bool {
		tasks, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, task := range tasks {
			stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
			if err != nil {
				return false // a thread that just ended: look again
			}
			// The state follows the command, which is in parentheses and may hold spaces.
			rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
			if f := strings.Fields(rest); len(f) == 0 || (f[0] != "T" && f[0] != "t") {
				return false
			}
		}
		return true
	})
}

// workerArgs are a worker's arguments for queue q with a short visibility timeout, so that
// recovery happens within the test's time.
func workerArgs(q, name string, extra ...string) []string {
	args := []string{"worker", "--queue", q, "--name", name, "--log-level", "info",
		"--visibility-timeout", "2s", "--recovery-interval", "500ms"}
	return append(args, extra...)
}

func publishIDs(t *testing.T, c *cli, args ...string) []string {
	t.Helper()
	ids := strings.Fields(c.ok(t, append([]string{"publish"}, args...)...))
	require.NotEmpty(t, ids)
	return ids
}

func (c *cli) client(t *testing.T) *pipeline.Client {
	t.Helper()
	client, err := pipeline.NewClient(c.rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	return client
}

func (c *cli) job(t *testing.T, q, id string) *pipeline.Job {
	t.Helper()
	j, err := c.client(t).Get(context.Background(), q, id)
	require.NoError(t, err)
	return j
}

// waitRunning waits until every job is in_progress on worker and returns when that happened.
func (c *cli) waitRunning(t *testing.T, q, worker string, ids []string) {
	t.Helper()
	waitFor(t, 20*time.Second, 10*time.Millisecond, fmt.Sprintf("%d jobs in progress on %s", len(ids), worker), func() bool {
		for _, id := range ids {
			j := c.job(t, q, id)
			if j.Status != status.InProgress || j.Worker != worker {
				return false
			}
		}
		return true
	})
}

// Chaos: 3 workers, a random one SIGKILLed about every second and restarted, for about 15s;
// then every job is completed, none is missing, and re-executions stay within kills times the
// concurrency (a killed worker holds at most its concurrency in unfinished entries).
func testChaos(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	n, conc := *chaosJobs, *chaosConcurrency
	ids := publishIDs(t, c, "--queue", q, "--type", "sleep", "--payload", fmt.Sprintf(`{"ms":%d}`, *chaosSleepMS), "--count", fmt.Sprint(n))
	require.Len(t, ids, n)

	procs := make([]*proc, 3)
	gen := 0
	startWorker := func(i int) {
		gen++
		procs[i] = c.start(t, workerArgs(q, fmt.Sprintf("chaos-%d-%d", i, gen), "--concurrency", fmt.Sprint(conc))...)
	}
	for i := range procs {
		startWorker(i)
	}
	kills := 0
	begin := time.Now()
	for time.Since(begin) < *chaosDuration {
		time.Sleep(time.Duration(700+rand.IntN(600)) * time.Millisecond)
		if c.stats(t, "--queue", q).Completed == int64(n) {
			break
		}
		i := rand.IntN(len(procs))
		procs[i].kill(t)
		kills++
		startWorker(i)
	}
	waitFor(t, 2*time.Minute, 200*time.Millisecond, "every chaos job completed", func() bool {
		return c.stats(t, "--queue", q).Completed >= int64(n)
	})
	for _, p := range procs {
		// A worker restarted a moment ago may not have installed its signal handler yet, and
		// SIGTERM would kill it as it would any process (exit -1, seen in CI): wait for its
		// first log line, written after the handler is in place.
		waitFor(t, 30*time.Second, 10*time.Millisecond, "a restarted worker to start", func() bool {
			return strings.Contains(p.output.String(), "starting worker")
		})
		require.Equal(t, 0, p.stop(t), "a worker exits 0 on SIGTERM")
	}

	st := c.stats(t, "--queue", q)
	require.EqualValues(t, n, st.Completed)
	require.Zero(t, st.Dead, "no job may die: each kill costs a job one attempt at most")
	require.Zero(t, st.Queued+st.InProgress+st.Scheduled, "nothing left over")
	reexec := 0
	client := c.client(t)
	for _, id := range ids {
		j, err := client.Get(context.Background(), q, id)
		require.NoError(t, err, "job %s is missing", id)
		require.Equal(t, status.Completed, j.Status, id)
		reexec += j.Attempt - 1 // each lost attempt counts: attempt-1 runs were cut short
	}
	t.Logf("chaos: %d jobs, %d kills in %s, lost 0, re-executions %d (bound %d), recovered %d, refused late transitions %d",
		n, kills, time.Since(begin).Round(time.Second), reexec, kills*conc, st.Recovered, st.Refused)
	require.LessOrEqual(t, reexec, kills*conc, "re-executions are bounded by kills x concurrency")
}

// Recovery time: with --visibility-timeout 5s --recovery-interval 1s, the jobs of a SIGKILLed
// worker are running elsewhere within 7s.
func testRecoveryTime(t *testing.T, c *cli) {
	var delays []time.Duration
	for round := range *recoveryRounds {
		q := redistest.UniqueName(t)
		args := func(name string) []string {
			return []string{"worker", "--queue", q, "--name", name, "--concurrency", "5",
				"--visibility-timeout", "5s", "--recovery-interval", "1s"}
		}
		ids := publishIDs(t, c, "--queue", q, "--type", "sleep", "--payload", `{"ms":60000}`, "--count", "5")
		a := c.start(t, args(fmt.Sprintf("doomed-%d", round))...)
		c.waitRunning(t, q, fmt.Sprintf("doomed-%d", round), ids)
		// Let the lease renewals reach some random phase, as in a real crash.
		time.Sleep(time.Duration(rand.IntN(1700)) * time.Millisecond)
		c.start(t, args(fmt.Sprintf("survivor-%d", round))...)
		a.kill(t)
		killed := time.Now()
		pending := slices.Clone(ids)
		waitFor(t, 20*time.Second, 20*time.Millisecond, "jobs running on the survivor", func() bool {
			pending = slices.DeleteFunc(pending, func(id string) bool {
				j := c.job(t, q, id)
				if j.Status == status.InProgress && strings.HasPrefix(j.Worker, "survivor") {
					delays = append(delays, time.Since(killed))
					require.Equal(t, 2, j.Attempt, "the lost attempt counts")
					require.Contains(t, j.LastError, "doomed")
					return true
				}
				return false
			})
			return len(pending) == 0
		})
	}
	slices.Sort(delays)
	pct := func(p float64) time.Duration {
		return delays[min(len(delays)-1, int(p*float64(len(delays))))].Round(time.Millisecond)
	}
	t.Logf("recovery time after SIGKILL (%d jobs, %d kills): min %s, p50 %s, p90 %s, max %s", len(delays),
		*recoveryRounds, pct(0), pct(0.5), pct(0.9), pct(1))
	for _, d := range delays {
		require.Less(t, d, 7*time.Second, "recovered within visibility timeout + interval")
		// A job is only taken once its lease has not been renewed for the visibility
		// timeout; renewals run every third of it, so never sooner than two thirds of it.
		require.GreaterOrEqual(t, d, 3*time.Second, "recovered before its lease could have expired")
	}
}

// Frozen worker: SIGSTOP a worker holding a job past the visibility timeout; the job completes
// on another worker; SIGCONT the first: its late completion is refused and the final state is
// the other worker's. The job is an http call the test answers once the first worker is
// stopped (a 1.5 s sleep job, before, could end before the SIGSTOP on a loaded machine).
func testFrozenWorker(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	call := newHeldCall(t)
	id := publishIDs(t, c, "--queue", q, "--type", "http", "--payload", call.payload())[0]
	frozen := c.start(t, workerArgs(q, "frozen", "--http-allow", "127.0.0.1")...)
	c.waitRunning(t, q, "frozen", []string{id})
	frozen.signal(t, syscall.SIGSTOP)
	call.release() // the answer waits in the stopped worker's socket
	c.start(t, workerArgs(q, "thawed", "--http-allow", "127.0.0.1")...)
	waitFor(t, 20*time.Second, 20*time.Millisecond, "the job completed on the other worker", func() bool {
		return c.job(t, q, id).Status == status.Completed
	})
	final := c.job(t, q, id)
	require.Equal(t, "thawed", final.Worker, "the job as read: %+v", final)
	require.Equal(t, 2, final.Attempt)

	frozen.signal(t, syscall.SIGCONT)
	// Its call was answered long ago: the handler returns at once and its completion is refused.
	waitFor(t, 15*time.Second, 20*time.Millisecond, "the frozen worker's late transition refused or abandoned", func() bool {
		out := frozen.output.String()
		return strings.Contains(out, "transition refused") || strings.Contains(out, "lease lost")
	})
	require.Equal(t, 0, frozen.stop(t))
	after := c.job(t, q, id)
	require.Equal(t, final.Worker, after.Worker, "the newer state stays")
	require.Equal(t, final.CompletedAt, after.CompletedAt)
	require.Equal(t, final.Version, after.Version, "the late transition changed nothing")
	if strings.Contains(frozen.output.String(), "transition refused") {
		require.EqualValues(t, 1, c.stats(t, "--queue", q).Refused)
	}
}

// All workers killed, then one started: the jobs left in_progress are recovered.
func testAllKilled(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	ids := publishIDs(t, c, "--queue", q, "--type", "sleep", "--payload", `{"ms":30000}`, "--count", "6")
	a := c.start(t, workerArgs(q, "victim-a", "--concurrency", "3")...)
	b := c.start(t, workerArgs(q, "victim-b", "--concurrency", "3")...)
	waitFor(t, 20*time.Second, 10*time.Millisecond, "all six in progress", func() bool {
		for _, id := range ids {
			if c.job(t, q, id).Status != status.InProgress {
				return false
			}
		}
		return true
	})
	a.kill(t)
	b.kill(t)
	require.EqualValues(t, 6, c.stats(t, "--queue", q).InProgress, "left in progress by the dead workers")
	// The jobs are long: seeing them all running on the new worker is the point.
	c.start(t, workerArgs(q, "rescuer", "--concurrency", "6")...)
	waitFor(t, 20*time.Second, 20*time.Millisecond, "every job running on the rescuer", func() bool {
		for _, id := range ids {
			j := c.job(t, q, id)
			if j.Worker != "rescuer" || j.Status != status.InProgress {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		j := c.job(t, q, id)
		require.Equal(t, 2, j.Attempt)
		require.Contains(t, j.LastError, "victim")
		// The attempt history: the lost attempt, recorded by recovery with its worker, and the
		// one running on the rescuer.
		require.Len(t, j.Attempts, 2, "%+v", j.Attempts)
		lost, now := j.Attempts[0], j.Attempts[1]
		require.Equal(t, 1, lost.Number)
		require.Equal(t, status.AttemptLost, lost.Outcome)
		require.Contains(t, []string{"victim-a", "victim-b"}, lost.Worker)
		require.Contains(t, lost.Error, lost.Worker)
		require.False(t, lost.StartedAt.IsZero(), "the start mark was written: the job was in progress")
		require.False(t, lost.EndedAt.Before(lost.StartedAt))
		require.Equal(t, pipeline.JobAttempt{Number: 2, Worker: "rescuer", StartedAt: j.StartedAt,
			Outcome: status.AttemptRunning}, now)
	}
	require.EqualValues(t, 6, c.stats(t, "--queue", q).Recovered)
}

// Long job: a sleep job three times longer than the visibility timeout completes once, on
// its first worker, with no recovery.
func testLongJob(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	id := publishIDs(t, c, "--queue", q, "--type", "sleep", "--payload", `{"ms":6000}`)[0]
	c.start(t, workerArgs(q, "patient")...)
	c.waitRunning(t, q, "patient", []string{id})
	c.start(t, workerArgs(q, "eager")...) // a second worker, whose recoverer must not take it
	waitFor(t, 30*time.Second, 50*time.Millisecond, "the long job completed", func() bool {
		return c.job(t, q, id).Status == status.Completed
	})
	j := c.job(t, q, id)
	require.Equal(t, "patient", j.Worker)
	require.Equal(t, 1, j.Attempt)
	st := c.stats(t, "--queue", q)
	require.Zero(t, st.Recovered)
	require.Zero(t, st.Refused)
}

// Shutdown: SIGTERM during 20 running jobs with a short shutdown timeout: the process exits 0
// and every job still completes elsewhere without waiting for the visibility timeout. The
// jobs are http calls the test answers only once the first worker is gone (4 s sleep jobs,
// before, could end before the SIGTERM on a loaded machine).
func testShutdown(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	call := newHeldCall(t)
	ids := publishIDs(t, c, "--queue", q, "--type", "http", "--payload", call.payload(), "--count", "20")
	args := func(name string) []string {
		// A visibility timeout far longer than the test: only a put-back explains a fast finish.
		return []string{"worker", "--queue", q, "--name", name, "--concurrency", "20",
			"--visibility-timeout", "10m", "--shutdown-timeout", "500ms", "--http-allow", "127.0.0.1"}
	}
	first := c.start(t, args("leaving")...)
	c.waitRunning(t, q, "leaving", ids)
	stopped := time.Now()
	require.Equal(t, 0, first.stop(t), "exit 0 after a graceful shutdown")
	// 10x: the shutdown timeout is 500 ms; the exit comes within about a second here.
	require.Less(t, time.Since(stopped), 10*time.Second)
	st := c.stats(t, "--queue", q)
	require.EqualValues(t, 20, st.Released)
	require.EqualValues(t, 20, st.Queued, "put back at once")
	call.release()
	c.start(t, args("staying")...)
	waitFor(t, 30*time.Second, 50*time.Millisecond, "all 20 jobs completed elsewhere", func() bool {
		return c.stats(t, "--queue", q).Completed == 20
	})
	for _, id := range ids {
		j := c.job(t, q, id)
		require.Equal(t, "staying", j.Worker)
		require.Equal(t, 1, j.Attempt, "an attempt cut short by shutdown does not count")
	}
	require.Zero(t, c.stats(t, "--queue", q).Recovered, "nothing waited for the visibility timeout")
}
