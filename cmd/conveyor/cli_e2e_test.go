package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestCLIE2E drives the binary for what every command shares: exit codes, error messages,
// signals and logs (formats, fields, the lines of a Redis outage).
func TestCLIE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	srv := redistest.Shared(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}

	t.Run("UsageAndRefusals", func(t *testing.T) { t.Parallel(); testUsageAndRefusals(t, c) })
	t.Run("LogsJSON", func(t *testing.T) { t.Parallel(); testLogsJSON(t, c) })
	t.Run("LogsConsole", func(t *testing.T) { t.Parallel(); testLogsConsole(t, c) })
	t.Run("DrainOnSignal", func(t *testing.T) { t.Parallel(); testDrainOnSignal(t, c) })
	t.Run("SecondSignalStopsNow", func(t *testing.T) { t.Parallel(); testSecondSignal(t, c) })
	t.Run("InterruptedCommandExits130", func(t *testing.T) { t.Parallel(); testInterrupted(t, c) })
	t.Run("SharedWorkerName", func(t *testing.T) { t.Parallel(); testSharedWorkerName(t, c) })
	t.Run("RedisOutage", func(t *testing.T) { t.Parallel(); testRedisOutage(t, c.bin) })
}

// Usage errors exit 2 with a hint, refusals by the system 1, both saying what to do next.
func testUsageAndRefusals(t *testing.T, c *cli) {
	for _, tc := range []struct {
		code int
		msg  string
		args []string
	}{
		{2, `unknown command "publsh" for "conveyor" (did you mean "publish"?)`, []string{"publsh", "-t", "echo"}},
		{2, `unknown command "stauts" for "conveyor" (did you mean "status"?)`, []string{"stauts", "--queue", "q", "x"}},
		{2, `unknown command "lsit" for "conveyor dead" (did you mean "list"?)`, []string{"dead", "lsit", "--limit", "3"}},
		{2, "--concurrency must be at least 1", []string{"worker", "--concurrency", "0"}},
		{2, `--name "a b": invalid worker name`, []string{"worker", "--name", "a b"}},
		{2, "--visibility-timeout is too short: at least 300ms", []string{"worker", "--visibility-timeout", "10ms"}},
		{2, "--queue must name a queue", []string{"worker", "--queue", ""}},
		{2, `invalid queue name "a b"`, []string{"publish", "--type", "echo", "--queue", "a b"}},
		{2, "empty job type", []string{"publish", "--type", ""}},
		{2, "--unique-ttl needs --unique", []string{"publish", "--type", "echo", "--unique-ttl", "1m"}},
		{2, "required flag --file not set", []string{"workflows", "publish"}},
		{1, `workflow nosuch not found in queue "default"`, []string{"workflows", "get", "nosuch"}},
		{2, "did you mean redis://127.0.0.1:6379?", []string{"stats", "--redis", "127.0.0.1:6379"}},
		{2, `$CONVEYOR_LOG_LEVEL "loud"`, []string{"stats"}},
		{1, "cannot reach Redis at redis://127.0.0.1:1/0: connection refused; is Redis running there? set --redis or CONVEYOR_REDIS_URL",
			[]string{"stats", "--redis", "redis://127.0.0.1:1/0"}},
	} {
		env := env(c.url)
		if tc.args[0] == "stats" && len(tc.args) == 1 {
			env = append(env, "CONVEYOR_LOG_LEVEL=loud")
		}
		args := tc.args
		if !slices.Contains(args, "--redis") {
			args = append(args, "--redis", c.url)
		}
		r := c.exec(t, "", env, args...)
		require.Equal(t, tc.code, r.code, "conveyor %s\nstderr: %s", strings.Join(args, " "), r.stderr)
		require.True(t, strings.HasPrefix(r.stderr, "conveyor: "), r.stderr)
		require.Contains(t, r.stderr, tc.msg)
		require.NotContains(t, r.stderr, "pipeline:")
		require.Equal(t, tc.code == 2, strings.Contains(r.stderr, "--help' for usage."), r.stderr)
		require.Empty(t, r.stdout)
	}

	// Wrong credentials: exit 1, naming the URL without its password and what to check.
	user := "u-" + redistest.UniqueName(t)
	require.NoError(t, c.rdb.Do(t.Context(), "ACL", "SETUSER", user, "on", ">right", "~*", "+@all").Err())
	t.Cleanup(func() { c.rdb.Do(context.Background(), "ACL", "DELUSER", user) })
	wrong := strings.Replace(c.url, "redis://", "redis://"+user+":hunter2@", 1)
	// The message names the operation that failed where there is one (stats reads the queues;
	// the worker's first check of the server is no operation of the storage layer).
	for _, tc := range []struct {
		args []string
		op   string
	}{{[]string{"stats"}, "queues: "}, {[]string{"worker"}, ""},
		// Every command that lists the queues: they said "no queues yet" and exited 0.
		{[]string{"queues"}, "queues: "}, {[]string{"queues", "--json"}, "queues: "}, {[]string{"stats", "--all"}, "queues: "}} {
		r := c.exec(t, "", env(""), append(tc.args, "--redis", wrong)...)
		require.Equal(t, 1, r.code, r.stderr)
		require.Contains(t, r.stderr, "conveyor: "+tc.op+"Redis at "+strings.Replace(wrong, "hunter2", "xxxxx", 1)+
			" refused the credentials: WRONGPASS")
		require.Contains(t, r.stderr, "check the user and password in --redis or CONVEYOR_REDIS_URL")
		require.NotContains(t, r.stderr, "hunter2")
	}
}

// logLine is one line of a JSON log.
type logLine map[string]any

func (l logLine) str(k string) string { s, _ := l[k].(string); return s }

// durationFields are the fields that hold durations, in any package's lines.
var durationFields = []string{"took", "retry_in", "after", "failing_for", "shutdown_timeout", "last_active", "timeout", "wait"}

// jsonLog parses out as a JSON log, one object per line, and checks what every line must have:
// a level, a message, a UTC time to the millisecond, durations as strings with units, and on
// job lines (those with a job_id) the queue, type and attempt.
func jsonLog(t *testing.T, out string) []logLine {
	t.Helper()
	var lines []logLine
	timeRE := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	for raw := range strings.Lines(out) {
		var l logLine
		require.NoError(t, json.Unmarshal([]byte(raw), &l), "not a JSON line: %q", raw)
		require.NotEmpty(t, l.str("level"), raw)
		require.NotEmpty(t, l.str("message"), raw)
		require.Regexp(t, timeRE, l.str("time"), raw)
		for _, k := range durationFields {
			if v, ok := l[k]; ok {
				s, isString := v.(string)
				require.True(t, isString, "%s is not a string with a unit: %s", k, raw)
				_, err := time.ParseDuration(s)
				require.NoError(t, err, "%s: %s", k, raw)
			}
		}
		if _, job := l["job_id"]; job && l.str("stream") == "" {
			require.NotEmpty(t, l.str("queue"), "job line without queue: %s", raw)
			require.NotEmpty(t, l.str("type"), "job line without type: %s", raw)
			attempt, ok := l["attempt"].(float64)
			require.True(t, ok, "job line without attempt: %s", raw)
			require.Positive(t, attempt, raw)
		}
		lines = append(lines, l)
	}
	return lines
}

// withMessage returns the lines whose message contains msg.
func withMessage(lines []logLine, msg string) []logLine {
	var out []logLine
	for _, l := range lines {
		if strings.Contains(l.str("message"), msg) {
			out = append(out, l)
		}
	}
	return out
}

// A worker's JSON log: every line parses; job lines carry queue, job_id, type and attempt;
// durations are strings with units; Watermill's own messages stay at debug and below.
func testLogsJSON(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	w := c.start(t, "worker", "--queue", q, "--log-format", "json", "--log-level", "debug",
		"--backoff-base", "50ms", "--backoff-max", "100ms")
	for range 3 {
		c.publishOne(t, "--queue", q, "--type", "echo", "--payload", `{"n":1}`)
	}
	c.publishOne(t, "--queue", q, "--type", "flaky", "--payload", `{"fail_times":1}`)
	c.publishOne(t, "--queue", q, "--type", "fail", "--max-retries", "1")
	waitFor(t, 30*time.Second, 50*time.Millisecond, "4 completed and 1 dead job", func() bool {
		st := c.stats(t, "--queue", q)
		return st.Completed == 4 && st.Dead == 1
	})
	require.Equal(t, 0, w.stop(t))

	lines := jsonLog(t, w.output.String())
	done := withMessage(lines, "job done")
	require.Len(t, done, 4, "one debug line per completed job")
	for _, l := range done {
		require.Equal(t, q, l.str("queue"))
		require.Equal(t, "debug", l.str("level"))
		require.NotEmpty(t, l.str("took"))
	}
	retries := withMessage(lines, "will retry")
	require.Len(t, retries, 2, "flaky's first attempt and fail's first attempt")
	for _, l := range retries {
		d, err := time.ParseDuration(l.str("retry_in"))
		require.NoError(t, err)
		require.Positive(t, d)
		require.Equal(t, d.Round(time.Millisecond), d, "retry_in is rounded to the millisecond")
	}
	dead := withMessage(lines, "failed for good")
	require.Len(t, dead, 1)
	require.Equal(t, "fail", dead[0].str("type"))
	require.EqualValues(t, 2, dead[0]["attempt"])

	router := 0
	for _, l := range lines {
		if l.str("component") == "router" {
			router++
			require.Contains(t, []string{"debug", "trace", "error"}, l.str("level"), "Watermill's own messages stay at debug: %v", l)
			require.Regexp(t, `^[a-z]`, l.str("message"))
		}
	}
	require.Positive(t, router, "Watermill's router lines show at debug")
}

// The console format: local time with the date and zone, durations with units. It is chosen
// here by $CONVEYOR_LOG_FORMAT (stderr is no terminal, where JSON is the default).
func testLogsConsole(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	w := c.startEnv(t, append(env(c.url), "CONVEYOR_LOG_FORMAT=console", "CONVEYOR_LOG_LEVEL=DEBUG"), "worker", "--queue", q)
	c.publishOne(t, "--queue", q, "--type", "echo")
	waitFor(t, 30*time.Second, 50*time.Millisecond, "the job done line", func() bool {
		return strings.Contains(w.output.String(), "job done")
	})
	require.Equal(t, 0, w.stop(t))
	out := w.output.String()
	require.Regexp(t, `(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+ DBG job done .*took=[0-9.]+(ns|µs|ms|s)\b`, out)
	require.Regexp(t, `(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+ INF worker started concurrency=10 queues=\["`+q+`"\] `, out)
	require.Regexp(t, `(?m) DBG job done .*queue=`+q, out)
	require.NotContains(t, out, `{"level"`)
}

// startEnv is start with the environment env (and --redis).
func (c *cli) startEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(c.bin, append(args, "--redis", c.url)...)
	cmd.Env = env
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

// On the first SIGINT the worker says at once how many jobs it drains and for how long, lets
// them finish and exits 0. Its log is JSON by default: stderr is no terminal. The job is an
// http call the test answers once the worker said it drains (a 2 s sleep job, before, could
// end before the signal on a loaded machine).
func testDrainOnSignal(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	call := newHeldCall(t)
	w := c.start(t, "worker", "--queue", q, "--http-allow", "127.0.0.1")
	id := c.publishOne(t, "--queue", q, "--type", "http", "--payload", call.payload())
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the job in progress", func() bool {
		return c.status(t, "--queue", q, id).Status == "in_progress"
	})
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGINT))
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the drain line", func() bool {
		return strings.Contains(w.output.String(), "signal again to stop now")
	})
	call.release()
	select {
	case <-w.done:
	case <-time.After(45 * time.Second):
		t.Fatal("no exit within 45s of SIGINT")
	}
	require.Equal(t, 0, w.cmd.ProcessState.ExitCode(), "a worker that drained exits 0")
	lines := jsonLog(t, w.output.String())
	drain := withMessage(lines, "draining")
	require.Len(t, drain, 1)
	require.Equal(t, "draining 1 job (up to 30s); signal again to stop now", drain[0].str("message"))
	require.Equal(t, "30s", drain[0].str("shutdown_timeout"))
	require.Equal(t, "completed", c.status(t, "--queue", q, id).Status, "the running job finished before the exit")
}

// A second signal ends the worker at once, without waiting for its running job.
func testSecondSignal(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	w := c.start(t, "worker", "--queue", q, "--log-format", "json")
	id := c.publishOne(t, "--queue", q, "--type", "sleep", "--payload", `{"ms":60000}`)
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the job in progress", func() bool {
		return c.status(t, "--queue", q, id).Status == "in_progress"
	})
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGINT))
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the drain line", func() bool {
		return strings.Contains(w.output.String(), "signal again to stop now")
	})
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-w.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the second SIGINT did not end the worker")
	}
	ws, ok := w.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled(), "ended by the signal: %v", w.cmd.ProcessState)
	require.NotEqual(t, "completed", c.status(t, "--queue", q, id).Status)
}

// A command interrupted mid-work (SIGINT, or SIGTERM) exits 130: the demo, which cleans up
// after itself first.
func testInterrupted(t *testing.T, c *cli) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		p := c.start(t, "demo")
		waitFor(t, 30*time.Second, 10*time.Millisecond, "the demo to publish", func() bool {
			return strings.Contains(p.output.String(), "Published")
		})
		require.NoError(t, p.cmd.Process.Signal(sig))
		select {
		case <-p.done:
		case <-time.After(45 * time.Second):
			t.Fatalf("no exit within 45s of %v", sig)
		}
		require.Equal(t, 130, p.cmd.ProcessState.ExitCode(), "%v: %s", sig, p.output)
		require.Contains(t, p.output.String(), "conveyor: demo interrupted")
	}
}

// A worker started with the name of a live one warns: the two would take each other's jobs.
func testSharedWorkerName(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	name := "shared-" + q
	first := c.start(t, "worker", "--queue", q, "--name", name, "--log-format", "json")
	// The group knows a consumer once it was handed an entry (Redis 7.0 does not count reads
	// that find nothing): the first worker runs a job.
	id := c.publishOne(t, "--queue", q, "--type", "echo")
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the first worker's job", func() bool {
		return c.status(t, "--queue", q, id).Status == "completed"
	})
	second := c.start(t, "worker", "--queue", q, "--name", name, "--log-format", "json")
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the second worker to start", func() bool {
		return strings.Contains(second.output.String(), "worker started")
	})
	warns := withMessage(jsonLog(t, second.output.String()), "another worker with this name")
	require.Len(t, warns, 1, second.output.String())
	require.Equal(t, "warn", warns[0].str("level"))
	require.Equal(t, q, warns[0].str("queue"))
	require.Equal(t, name, warns[0].str("worker"))
	require.Empty(t, withMessage(jsonLog(t, first.output.String()), "another worker with this name"))
	require.Equal(t, 0, second.stop(t))
	require.Equal(t, 0, first.stop(t))

	// A worker with a name of its own does not warn.
	other := c.start(t, "worker", "--queue", q, "--log-format", "json")
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the other worker to start", func() bool {
		return strings.Contains(other.output.String(), "worker started")
	})
	require.Equal(t, 0, other.stop(t))
	require.Empty(t, withMessage(jsonLog(t, other.output.String()), "another worker with this name"))
}

// While Redis is down (killed, then restarted on the same port) a worker logs a bounded
// number of error lines, each with its real retry interval, says when Redis is back, and goes
// on to run jobs published after the restart.
func testRedisOutage(t *testing.T, bin string) {
	srv := redistest.Start(t)
	c := &cli{bin: bin, url: srv.URL(), rdb: srv.Client(t)}
	q := redistest.UniqueName(t)
	w := c.start(t, "worker", "--queue", q, "--log-format", "json", "--recovery-interval", "1s")
	before := c.publishOne(t, "--queue", q, "--type", "echo")
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the first job", func() bool {
		return c.status(t, "--queue", q, before).Status == "completed"
	})

	require.NoError(t, srv.Kill())
	killed := time.Now()
	time.Sleep(5 * time.Second) // the outage; nothing is timed against it
	require.NoError(t, srv.Restart())
	waitFor(t, 60*time.Second, 50*time.Millisecond, "the reconnected line", func() bool {
		return strings.Contains(w.output.String(), "reconnected to Redis after")
	})
	down := time.Since(killed)
	var ids []string
	for range 5 {
		ids = append(ids, c.publishOne(t, "--queue", q, "--type", "echo"))
	}
	for _, id := range ids {
		waitFor(t, 60*time.Second, 50*time.Millisecond, "a job published after the restart", func() bool {
			return c.status(t, "--queue", q, id).Status == "completed"
		})
	}
	require.Equal(t, 0, w.stop(t))

	lines := jsonLog(t, w.output.String())
	errs := map[string]int{}
	back := map[string]int{}
	for _, l := range lines {
		component := l.str("component")
		if component == "" {
			component = "worker"
		}
		if l.str("level") == "error" {
			errs[component]++
			require.NotEmpty(t, l.str("retry_in"), "an outage error line says when it retries: %v", l)
		}
		if strings.HasPrefix(l.str("message"), "reconnected to Redis after ") {
			back[component]++
			d, err := time.ParseDuration(strings.TrimPrefix(l.str("message"), "reconnected to Redis after "))
			require.NoError(t, err)
			require.Equal(t, l.str("after"), d.String())
		}
	}
	t.Logf("Redis was away for %s; error lines per component: %v; reconnected lines: %v",
		down.Round(time.Millisecond), errs, back)
	require.NotEmpty(t, errs, "the outage is logged")
	// One line per backoff step: a backoff that starts at 50ms or more and doubles (up to 2s,
	// or a recovery scan every second) takes fewer steps than this in such an outage; one
	// line per failed read (every 250ms or less, per component) would pass it.
	limit := int(down/time.Second) + 6
	for component, n := range errs {
		require.LessOrEqual(t, n, limit, "error lines of %s", component)
	}
	require.NotEmpty(t, back, "a reconnected line")
	for component, n := range back {
		require.Equal(t, 1, n, "one reconnected line per component: %s", component)
	}
}
