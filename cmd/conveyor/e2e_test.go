package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// TestE2E builds the conveyor binary once and drives it as a user would: separate processes,
// flags, stdout, stderr, exit codes and signals, against the package's private Redis. Every
// process gets --redis explicitly (the environment's CONVEYOR_REDIS_URL, if any, is replaced by
// the private server's URL), and every subtest works in a queue or key prefix of its own.
func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	srv := redistest.Shared(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}

	t.Run("PublishWorkStatus", func(t *testing.T) { t.Parallel(); testPublishWorkStatus(t, c) })
	t.Run("FlakyCompletesOnThirdAttempt", func(t *testing.T) { t.Parallel(); testFlaky(t, c) })
	t.Run("FailingJobBacksOffThenDies", func(t *testing.T) { t.Parallel(); testFailing(t, c) })
	t.Run("GarbageEntriesGoToDeadSet", func(t *testing.T) { t.Parallel(); testGarbage(t, c) })
	t.Run("PublishRefusals", func(t *testing.T) { t.Parallel(); testRefusals(t, c) })
	t.Run("StatusInProgress", func(t *testing.T) { t.Parallel(); testInProgress(t, c) })
	t.Run("CancelReplayPurge", func(t *testing.T) { t.Parallel(); testCancelReplayPurge(t, c) })
	t.Run("Queues", func(t *testing.T) { t.Parallel(); testQueuesCmd(t, c) })
	t.Run("QueuesDelete", func(t *testing.T) { t.Parallel(); testQueuesDeleteCmd(t, c) })
	t.Run("Limits", func(t *testing.T) { t.Parallel(); testLimitsCmd(t, c) })
	t.Run("Partitions", func(t *testing.T) { t.Parallel(); testPartitions(t, c) })
	t.Run("PartitionChangeUnderLoad", func(t *testing.T) { t.Parallel(); testPartitionChangeUnderLoad(t, c) })
	t.Run("List", func(t *testing.T) { t.Parallel(); testListCmd(t, c) })
	t.Run("DemoEmbedded", func(t *testing.T) { t.Parallel(); testDemoEmbedded(t, c) })
	t.Run("DemoRealRedis", func(t *testing.T) { t.Parallel(); testDemoRealRedis(t, c) })
	t.Run("DemoServe", func(t *testing.T) { t.Parallel(); testDemoServe(t, c) })
	t.Run("Cluster", func(t *testing.T) { t.Parallel(); testCluster(t, c.bin) })
	t.Run("CrossQueueLookup", func(t *testing.T) { t.Parallel(); testCrossQueueLookup(t, c) })
	t.Run("PublishDuplicates", func(t *testing.T) { t.Parallel(); testPublishDuplicates(t, c) })
	t.Run("StatsUnknownQueue", func(t *testing.T) { t.Parallel(); testStatsUnknownQueue(t, c) })
	t.Run("DeadList", func(t *testing.T) { t.Parallel(); testDeadList(t, c) })
	t.Run("DeadAllQueues", func(t *testing.T) { t.Parallel(); testDeadAllQueues(t, c) })
	t.Run("DeadReplay", func(t *testing.T) { t.Parallel(); testDeadReplay(t, c) })
	t.Run("DeadPurge", func(t *testing.T) { t.Parallel(); testDeadPurge(t, c) })
	t.Run("Handlers", func(t *testing.T) { t.Parallel(); testHandlersCmd(t, c) })
	t.Run("Version", func(t *testing.T) { t.Parallel(); testVersion(t, c) })
	t.Run("Completion", func(t *testing.T) { t.Parallel(); testCompletion(t, c) })
	t.Run("ProduceOnly", func(t *testing.T) { t.Parallel(); testProduceOnly(t, c) })
	t.Run("RunNowDelete", func(t *testing.T) { t.Parallel(); testRunNowDelete(t, c) })
}

// buildCLI builds the binary once for the package, into a temporary directory TestMain
// removes (removeCLI): every test runs the same source, and each build is a link of tens of
// megabytes, half a minute on a loaded machine. It is built without the race detector even
// under -race: a race-enabled binary takes about ten times longer to start, too slow for the
// tests that time retries by polling `status`. TestDemoInProcess runs the command's concurrent
// code under the race detector instead.
func buildCLI(t *testing.T) string {
	t.Helper()
	builtCLI.once.Do(func() {
		builtCLI.dir, builtCLI.err = os.MkdirTemp("", "conveyor-e2e-")
		if builtCLI.err != nil {
			return
		}
		builtCLI.bin = filepath.Join(builtCLI.dir, "conveyor")
		builtCLI.out, builtCLI.err = exec.Command("go", "build", "-o", builtCLI.bin, ".").CombinedOutput()
	})
	require.NoError(t, builtCLI.err, "go build: %s", builtCLI.out)
	return builtCLI.bin
}

// builtCLI is buildCLI's one build, and its failure for every test that asks after it.
var builtCLI struct {
	once     sync.Once
	dir, bin string
	out      []byte
	err      error
}

// removeCLI removes buildCLI's directory once every test has ended.
func removeCLI() {
	if builtCLI.dir != "" {
		_ = os.RemoveAll(builtCLI.dir)
	}
}

// cli runs the built binary.
type cli struct {
	bin string
	url string        // the private server, passed as --redis to every process
	rdb *redis.Client // for what a user would do with redis-cli, and for checks
}

type result struct {
	stdout, stderr string
	code           int
}

// env is the test's environment with CONVEYOR_REDIS_URL removed and, when url is not empty,
// set to url.
func env(url string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONVEYOR_REDIS_URL=") {
			env = append(env, kv)
		}
	}
	if url != "" {
		env = append(env, "CONVEYOR_REDIS_URL="+url)
	}
	return env
}

// run runs the CLI to its end with --redis set.
func (c *cli) run(t *testing.T, args ...string) result {
	t.Helper()
	return c.exec(t, "", env(c.url), append(args, "--redis", c.url)...)
}

// exec runs the CLI with exactly args and environment env.
func (c *cli) exec(t *testing.T, stdin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "conveyor %s: %s", strings.Join(args, " "), stderr.String())
		code = exit.ExitCode()
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// ok runs the CLI, requires exit 0 and returns stdout.
func (c *cli) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := c.run(t, args...)
	require.Equal(t, 0, r.code, "conveyor %s: %s", strings.Join(args, " "), r.stderr)
	return r.stdout
}

// refused runs the CLI and requires exit code want, nothing on stdout and a conveyor: message
// containing msg on stderr.
func (c *cli) refused(t *testing.T, want int, msg string, args ...string) {
	t.Helper()
	r := c.run(t, args...)
	require.Equal(t, want, r.code, "conveyor %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.stdout, r.stderr)
	require.Empty(t, r.stdout, "conveyor %s", strings.Join(args, " "))
	require.True(t, strings.HasPrefix(r.stderr, "conveyor: "), "stderr: %q", r.stderr)
	require.Contains(t, r.stderr, msg)
	require.NotContains(t, r.stderr, "goroutine ")
}

func (c *cli) stats(t *testing.T, args ...string) pipeline.QueueStats {
	t.Helper()
	var st pipeline.QueueStats
	out := c.ok(t, append([]string{"stats", "--json"}, args...)...)
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	return st
}

// jobView is the `status --json` contract.
type jobView struct {
	ID          string          `json:"id"`
	Queue       string          `json:"queue"`
	Type        string          `json:"type"`
	Status      string          `json:"status"`
	Attempt     int             `json:"attempt"`
	MaxRetries  int             `json:"max_retries"`
	Payload     json.RawMessage `json:"payload"`
	Result      json.RawMessage `json:"result"`
	LastError   string          `json:"last_error"`
	Worker      string          `json:"worker"`
	CreatedAt   int64           `json:"created_at"`
	RunAt       int64           `json:"run_at"`
	EnqueuedAt  int64           `json:"enqueued_at"`
	StartedAt   int64           `json:"started_at"`
	CompletedAt int64           `json:"completed_at"`
}

var contractFields = []string{"id", "queue", "type", "status", "attempt", "max_retries", "payload",
	"result", "last_error", "worker", "created_at", "run_at", "enqueued_at", "started_at", "completed_at"}

func (c *cli) status(t *testing.T, args ...string) jobView {
	t.Helper()
	out := c.ok(t, append([]string{"status", "--json"}, args...)...)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line of JSON: %s", out)
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(out), &fields), out)
	for _, f := range contractFields {
		require.Contains(t, fields, f, out)
	}
	var j jobView
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	return j
}

// proc is a CLI process in the background (a worker).
type proc struct {
	cmd    *exec.Cmd
	output *lockedBuffer
	done   chan struct{}
}

// start starts the CLI in the background with --redis set; the test's cleanup kills it if it
// still runs, and shows its output if the test failed.
func (c *cli) start(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(c.bin, append(args, "--redis", c.url)...)
	cmd.Env = env(c.url)
	p := &proc{cmd: cmd, output: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.output, p.output
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("conveyor %s output:\n%s", strings.Join(args, " "), p.output)
		}
	})
	return p
}

// stop sends SIGTERM and returns the exit code once the process ends.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(45 * time.Second):
		t.Fatal("no exit within 45s of SIGTERM")
	}
	return p.cmd.ProcessState.ExitCode()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitFor polls cond every interval until it holds, failing the test after timeout. cond runs
// on the test's goroutine, so it may use require.
func waitFor(t *testing.T, timeout, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}

// publishOne publishes one job and returns its id.
func (c *cli) publishOne(t *testing.T, args ...string) string {
	t.Helper()
	ids := strings.Fields(c.ok(t, append([]string{"publish"}, args...)...))
	require.Len(t, ids, 1)
	return ids[0]
}

// (1) publish 1000 jobs, work them with one worker process, check results, stop with SIGTERM.
func testPublishWorkStatus(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	out := c.ok(t, "publish", "--queue", q, "--type", "echo", "--payload", `{"n":42}`, "--count", "1000")
	ids := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, ids, 1000)
	seen := map[string]bool{}
	for _, id := range ids {
		require.False(t, seen[id], "duplicate id %s", id)
		seen[id] = true
	}
	st := c.stats(t, "--queue", q)
	require.EqualValues(t, 1000, st.Enqueued)
	require.EqualValues(t, 1000, st.Queued)

	w := c.start(t, "worker", "--queue", q)
	waitFor(t, 90*time.Second, 100*time.Millisecond, "1000 completed jobs", func() bool {
		st = c.stats(t, "--queue", q)
		return st.Completed == 1000
	})
	require.Zero(t, st.Failed)
	require.Zero(t, st.Queued+st.InProgress+st.Scheduled+st.Dead)

	for _, id := range []string{ids[0], ids[499], ids[999]} {
		j := c.status(t, "--queue", q, id)
		require.Equal(t, id, j.ID)
		require.Equal(t, q, j.Queue)
		require.Equal(t, "echo", j.Type)
		require.Equal(t, "completed", j.Status)
		require.Equal(t, 1, j.Attempt)
		require.JSONEq(t, `{"n":42}`, string(j.Payload))
		require.JSONEq(t, string(j.Payload), string(j.Result))
		require.NotEmpty(t, j.Worker)
		require.Positive(t, j.CreatedAt)
		require.GreaterOrEqual(t, j.CompletedAt, j.StartedAt)
	}
	human := c.ok(t, "status", "--queue", q, ids[0])
	require.Regexp(t, `(?m)^status: +completed$`, human)
	require.Regexp(t, `(?m)^result: +\{"n":42\}$`, human)
	table := c.ok(t, "stats", "--queue", q)
	require.Contains(t, table, "COMPLETED")
	require.Contains(t, table, q)

	require.Equal(t, 0, w.stop(t), "worker exit code after SIGTERM")
}

// (2) a flaky job that fails twice completes on attempt 3 and keeps its last error.
func testFlaky(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	c.start(t, "worker", "--queue", q, "--backoff-base", "100ms", "--backoff-max", "1s")
	id := c.publishOne(t, "--queue", q, "--type", "flaky", "--payload", `{"fail_times":2}`)
	var j jobView
	waitFor(t, 30*time.Second, 50*time.Millisecond, "the flaky job to complete", func() bool {
		j = c.status(t, "--queue", q, id)
		require.NotEqual(t, "failed", j.Status, j.LastError)
		return j.Status == "completed"
	})
	require.Equal(t, 3, j.Attempt)
	require.JSONEq(t, `{"attempt":3}`, string(j.Result))
	require.Equal(t, "flaky: attempt 2 of the first 2 fails", j.LastError)
	st := c.stats(t, "--queue", q)
	require.EqualValues(t, 2, st.Retried)
	require.EqualValues(t, 1, st.Completed)
}

// (3) a job that always fails is retried with growing delays, then lands in the dead set.
func testFailing(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	c.start(t, "worker", "--queue", q, "--backoff-base", "500ms", "--backoff-max", "10s")
	id := c.publishOne(t, "--queue", q, "--type", "fail", "--max-retries", "2", "--payload", `{"message":"always"}`)

	// Attempt n's started_at stays visible until attempt n+1 starts, at least one backoff
	// delay (375ms or more) later; polling Redis directly every 10ms sees every attempt (a
	// `conveyor status` process per poll could miss one on a loaded machine).
	client, err := pipeline.NewClient(c.rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	starts := map[int]int64{}
	waitFor(t, 30*time.Second, 10*time.Millisecond, "the job to fail for good", func() bool {
		got, err := client.Get(t.Context(), q, id)
		require.NoError(t, err)
		if got.Attempt > 0 && !got.StartedAt.IsZero() {
			starts[got.Attempt] = got.StartedAt.UnixMilli()
		}
		return got.Status == status.Failed
	})
	j := c.status(t, "--queue", q, id)
	require.Equal(t, "failed", j.Status)
	require.Equal(t, 3, j.Attempt)
	require.Equal(t, "always", j.LastError)
	require.Len(t, starts, 3, "attempts seen: %v", starts)
	gap1 := time.Duration(starts[2]-starts[1]) * time.Millisecond
	gap2 := time.Duration(starts[3]-starts[2]) * time.Millisecond
	t.Logf("retry delays: %s, then %s", gap1, gap2)
	require.GreaterOrEqual(t, gap1, 370*time.Millisecond, "first retry delay (base 500ms, jitter ±25%)")
	require.Greater(t, gap2, gap1, "delays grow")

	var dead struct{ Jobs []jobView }
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "dead", "list", "--queue", q, "--json")), &dead))
	require.Len(t, dead.Jobs, 1)
	require.Equal(t, id, dead.Jobs[0].ID)
	require.Equal(t, "failed", dead.Jobs[0].Status)
	st := c.stats(t, "--queue", q)
	require.EqualValues(t, 1, st.Dead)
	require.EqualValues(t, 1, st.Failed)
	require.EqualValues(t, 2, st.Retried)
}

// (4) unreadable entries written straight into the stream go to the dead set, and the worker
// keeps consuming. It must use the queue "default", so it isolates itself by key prefix.
func testGarbage(t *testing.T, c *cli) {
	prefix := redistest.UniqueName(t)
	w := c.start(t, "worker", "--prefix", prefix, "--backoff-base", "100ms")
	stream := prefix + ":{default}:stream"
	ctx := t.Context()
	require.NoError(t, c.rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"foo", "bar"}}).Err())
	require.NoError(t, c.rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream,
		Values: []string{"_watermill_message_uuid", "no-type-1", "payload", `{"x":1}`}}).Err())

	var st pipeline.QueueStats
	waitFor(t, 30*time.Second, 100*time.Millisecond, "two dead entries", func() bool {
		st = c.stats(t, "--prefix", prefix)
		return st.Dead == 2
	})
	require.EqualValues(t, 2, st.Poison)
	var dead struct{ Jobs []jobView }
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "dead", "list", "--prefix", prefix, "--json")), &dead))
	require.Len(t, dead.Jobs, 2)
	for _, j := range dead.Jobs {
		require.Equal(t, "failed", j.Status)
		require.Contains(t, j.LastError, "unreadable stream entry")
	}

	id := c.publishOne(t, "--prefix", prefix, "--type", "echo", "--payload", `"after garbage"`)
	waitFor(t, 30*time.Second, 50*time.Millisecond, "the echo job after the garbage", func() bool {
		return c.status(t, "--prefix", prefix, id).Status == "completed"
	})
	require.Equal(t, 0, w.stop(t))
}

// (5) refused publishes exit with a message and write nothing: 2 for an invalid flag value or
// combination, 1 for a refusal by the system (the payload limit).
func testRefusals(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	big := filepath.Join(t.TempDir(), "big.json")
	// A valid JSON string of 1 MiB + 1 bytes.
	require.NoError(t, os.WriteFile(big, []byte(`"`+strings.Repeat("a", 1<<20-1)+`"`), 0o600))
	malformed := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(malformed, []byte(`{"a":`), 0o600))

	for _, tc := range []struct {
		code int
		msg  string
		args []string
	}{
		{2, "--payload is not valid JSON", []string{"--type", "echo", "--payload", `{"a":1`}},
		{2, "is not valid JSON", []string{"--type", "echo", "--payload", "@" + malformed}},
		{1, "payload too large", []string{"--type", "echo", "--payload", "@" + big}},
		{2, "--delay must not be negative", []string{"--type", "echo", "--delay", "-5s"}},
		{2, "--max-retries must not be negative", []string{"--type", "echo", "--max-retries", "-1"}},
		{2, "--count must be at least 1", []string{"--type", "echo", "--count", "0"}},
		{2, "--id names one job", []string{"--type", "echo", "--id", "x1", "--count", "2"}},
	} {
		c.refused(t, tc.code, tc.msg, append([]string{"publish", "--queue", q}, tc.args...)...)
	}
	// Usage errors exit 2.
	c.refused(t, 2, "required flag --type not set", "publish", "--queue", q)
	c.refused(t, 2, "unknown flag: --typo", "publish", "--queue", q, "--type", "echo", "--typo")
	c.refused(t, 2, "want exactly one job id", "status", "--queue", q)

	// Nothing was written: no counters, no keys, not even the queue's name (stats does not
	// know the queue).
	c.refused(t, 1, `queue "`+q+`" not found`, "stats", "--queue", q)
	var found []string
	iter := c.rdb.Scan(t.Context(), 0, "conveyor:{"+q+"}:*", 1000).Iterator()
	for iter.Next(t.Context()) {
		found = append(found, iter.Val())
	}
	require.NoError(t, iter.Err())
	require.Empty(t, found)
	known, err := c.rdb.SIsMember(t.Context(), "conveyor:queues", q).Result()
	require.NoError(t, err)
	require.False(t, known)

	c.refused(t, 1, "not found", "status", "--queue", q, "01JNOSUCHJOB00000000000000")
	c.refused(t, 1, "not found", "cancel", "--queue", q, "01JNOSUCHJOB00000000000000")

	// The same queue takes a good job (the checks above looked at the right place).
	c.publishOne(t, "--queue", q, "--type", "echo", "--payload", `{"ok":true}`)
	require.EqualValues(t, 1, c.stats(t, "--queue", q).Enqueued)
}

// (6) status shows in_progress while a worker runs a job: an http call the test answers once
// it saw that (a 2 s sleep job, before, could end first on a loaded machine).
func testInProgress(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	name := "w-" + redistest.UniqueName(t)
	call := newHeldCall(t)
	c.start(t, "worker", "--queue", q, "--name", name, "--http-allow", "127.0.0.1")
	id := c.publishOne(t, "--queue", q, "--type", "http", "--payload", call.payload())
	var j jobView
	waitFor(t, 30*time.Second, 50*time.Millisecond, "the job in progress", func() bool {
		j = c.status(t, "--queue", q, id)
		require.NotEqual(t, "completed", j.Status, "completed without being seen in progress")
		return j.Status == "in_progress"
	})
	require.Equal(t, name, j.Worker)
	require.Equal(t, 1, j.Attempt)
	require.Positive(t, j.StartedAt)
	require.Zero(t, j.CompletedAt)
	require.EqualValues(t, 1, c.stats(t, "--queue", q).InProgress)

	released := time.Now().UnixMilli()
	call.release()
	waitFor(t, 30*time.Second, 100*time.Millisecond, "the job to complete", func() bool {
		j = c.status(t, "--queue", q, id)
		return j.Status == "completed"
	})
	require.JSONEq(t, `{"status":200,"body":"released"}`, string(j.Result))
	require.GreaterOrEqual(t, j.CompletedAt, released, "completed once the call was answered")
}

// cancel, dead replay and dead purge through the CLI.
func testCancelReplayPurge(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	later := c.publishOne(t, "--queue", q, "--type", "echo", "--delay", "1h")
	require.Equal(t, "scheduled", c.status(t, "--queue", q, later).Status)
	require.Equal(t, "canceled "+later+" in queue "+q+"\n", c.ok(t, "cancel", "--queue", q, later))
	require.Equal(t, "canceled", c.status(t, "--queue", q, later).Status)
	c.refused(t, 1, "already finished: it is canceled", "cancel", "--queue", q, later)

	// A job with no retries fails once and is dead; no worker knows type "nobody", which is a
	// failed attempt too, so with no retries it dies at once as well.
	w := c.start(t, "worker", "--queue", q)
	failing := c.publishOne(t, "--queue", q, "--type", "fail", "--max-retries", "0")
	orphan := c.publishOne(t, "--queue", q, "--type", "nobody", "--max-retries", "0")
	waitFor(t, 30*time.Second, 50*time.Millisecond, "two dead jobs", func() bool {
		return c.stats(t, "--queue", q).Dead == 2
	})
	list := c.ok(t, "dead", "list", "--queue", q) // the rows; the header goes to stderr
	require.Contains(t, list, failing)
	require.Contains(t, list, orphan)
	require.Contains(t, list, `no handler for type "nobody"`)

	// Replay: the failing job runs again (and dies again); unknown and not-dead ids are
	// reported and make the exit code 1.
	r := c.run(t, "dead", "replay", "--queue", q, failing, "01JNOSUCHJOB00000000000000", later)
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, failing+"\n", r.stdout)
	require.Contains(t, r.stderr, "not found")
	require.Contains(t, r.stderr, "is canceled, not dead")
	waitFor(t, 30*time.Second, 50*time.Millisecond, "the replayed job to die again", func() bool {
		st := c.stats(t, "--queue", q)
		return st.Dead == 2 && st.Failed == 3
	})
	require.Equal(t, 0, w.stop(t))

	require.Equal(t, "purged 0 dead jobs\n", c.ok(t, "dead", "purge", "--queue", q, "--all", "--older-than", "1h"))
	require.Equal(t, "purged 2 dead jobs\n", c.ok(t, "dead", "purge", "--queue", q, "--all"))
	require.Zero(t, c.stats(t, "--queue", q).Dead)
	require.Equal(t, `{"jobs":[],"next":""}`+"\n", c.ok(t, "dead", "list", "--queue", q, "--json"))
	c.refused(t, 1, "not found", "status", "--queue", q, failing)
}

// --cluster: publish, work and inspect two queues (two hash slots) on a 3-master cluster, and
// run the demo there, which must clean up after itself on whichever master holds its queue.
func testCluster(t *testing.T, bin string) {
	cl := redistest.StartCluster(t)
	c := &cli{bin: bin, url: "redis://" + cl.Addrs[0] + "?addr=" + cl.Addrs[1] + "&addr=" + cl.Addrs[2]}
	qa, qb := redistest.UniqueName(t), redistest.UniqueName(t)
	for _, q := range []string{qa, qb} {
		out := c.ok(t, "publish", "--cluster", "--queue", q, "--type", "echo", "--payload", `{"q":1}`, "--count", "50")
		require.Len(t, strings.Fields(out), 50)
	}
	w := c.start(t, "worker", "--cluster", "--queue", qa, "--queue", qb)
	waitFor(t, 60*time.Second, 100*time.Millisecond, "100 completed jobs", func() bool {
		var all []pipeline.QueueStats
		require.NoError(t, json.Unmarshal([]byte(c.ok(t, "stats", "--cluster", "--all", "--json")), &all))
		done := 0
		for _, st := range all {
			done += int(st.Completed)
		}
		return done == 100
	})
	require.Equal(t, 0, w.stop(t))

	// queues create says which master holds each partition: three partitions, three masters.
	qp := redistest.UniqueName(t)
	lines := strings.Split(strings.TrimSpace(c.ok(t, "queues", "create", "--cluster", qp, "--partitions", "3")), "\n")
	require.Equal(t, "queue "+qp+": 3 partitions", lines[0])
	require.Len(t, lines, 4, "a line per partition")
	nodes := map[string]bool{}
	for i, line := range lines[1:] {
		node, ok := strings.CutPrefix(line, fmt.Sprintf("  partition %d: ", i))
		require.True(t, ok, "line %q", line)
		require.Contains(t, cl.Addrs, node)
		nodes[node] = true
	}
	require.Len(t, nodes, 3, "three partitions on three masters: %v", lines)

	r := c.run(t, "demo", "--cluster")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	requireDemoSummary(t, r.stdout)
	ctx := t.Context()
	rdb := cl.Client(t)
	require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		var left []string
		iter := node.Scan(ctx, 0, "conveyor:{demo-*", 1000).Iterator()
		for iter.Next(ctx) {
			left = append(left, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("%s keeps demo keys %v", node.Options().Addr, left)
		}
		return nil
	}))
}
