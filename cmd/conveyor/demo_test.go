package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	conveyorcli "github.com/conveyorq/conveyor/cmd/conveyor/internal/cli"
)

// TestDemoInProcess runs the demo inside the test binary, so that under -race the race detector
// watches the command's own concurrency (three workers, progress, summary).
func TestDemoInProcess(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("takes a few seconds")
	}
	var stdout, stderr bytes.Buffer
	code := conveyorcli.Run(t.Context(), []string{"demo"}, strings.NewReader(""), &stdout, &stderr, func(string) string { return "" })
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "embedded")
	requireDemoSummary(t, stdout.String())
	require.Contains(t, stderr.String(), "28/28 finished: 25 completed, 3 dead;") // plain progress lines: stderr is no terminal
}

// testDemoEmbedded runs `conveyor demo` as a newcomer would, with no Redis configured: it
// must use the embedded Redis and finish on its own with exit 0.
func testDemoEmbedded(t *testing.T, c *cli) {
	start := time.Now()
	r := c.exec(t, "", env(""), "demo")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	t.Logf("demo took %s:\n%s", time.Since(start).Round(time.Millisecond), r.stdout)
	first, _, _ := strings.Cut(r.stdout, "\n")
	require.Contains(t, first, "embedded")
	requireDemoSummary(t, r.stdout)
	require.Less(t, time.Since(start), 30*time.Second)
}

// testDemoRealRedis runs the demo against the private server through CONVEYOR_REDIS_URL and
// checks that it leaves no key behind.
func testDemoRealRedis(t *testing.T, c *cli) {
	r := c.exec(t, "", env(c.url), "demo")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	first, _, _ := strings.Cut(r.stdout, "\n")
	require.Contains(t, first, c.url)
	queue := regexp.MustCompile(`demo-[0-9a-f]+`).FindString(first)
	require.NotEmpty(t, queue, first)
	requireDemoSummary(t, r.stdout)

	ctx := t.Context()
	var left []string
	iter := c.rdb.Scan(ctx, 0, "conveyor:{demo-*", 1000).Iterator()
	for iter.Next(ctx) {
		left = append(left, iter.Val())
	}
	require.NoError(t, iter.Err())
	require.Empty(t, left, "keys the demo left behind")
	queues, err := c.rdb.SMembers(ctx, "conveyor:queues").Result()
	require.NoError(t, err)
	require.NotContains(t, queues, queue)
}

// requireDemoSummary checks that the summary reports every job finished: completed ones and
// the failing ones in the dead set.
func requireDemoSummary(t *testing.T, out string) {
	t.Helper()
	require.Regexp(t, `(?m)^  completed +25 `, out)
	require.Regexp(t, `(?m)^  dead +3 +in the dead set`, out)
	require.Regexp(t, `(?m)^  TYPE +JOBS +COMPLETED +DEAD +ATTEMPTS +WHAT IT SHOWS$`, out)
	require.NotRegexp(t, `(?i)failed`, out, "a dead job reads dead")
	require.Regexp(t, `(?m)^  flaky +5 +5 +0 +1[5-9] `, out) // 15, and more when the killed worker held one
	require.Regexp(t, `(?m)^  fail +3 +0 +3 +9 `, out)
	killed := regexp.MustCompile(`Recovery: (demo-worker-[1-3]) was killed .* holding [1-9]\d* jobs?\. `).FindStringSubmatch(out)
	require.NotNil(t, killed, "no worker killed holding jobs")
	require.Regexp(t, `recovered \d+ jobs? after`, out)
	require.Regexp(t, `(?m)^  `+killed[1]+` .*\(killed\)$`, out)
	for i := 1; i <= 3; i++ { // the demo's three workers
		require.Contains(t, out, "demo-worker-"+string(rune('0'+i)))
	}
	require.Contains(t, out, "Elapsed")
}

var demoServeURL = regexp.MustCompile(`Still serving the dashboard at (http://127\.0\.0\.1:\d+/)#/queues/(demo-[0-9a-f]+)`)

// testDemoServe runs `conveyor demo --serve` on the embedded Redis: the dashboard answers, the
// summary comes, and after it the API still takes a job that the surviving workers complete;
// SIGINT then ends it with exit 0. A public address without a token, and --serve with
// --produce-only, are usage errors.
func testDemoServe(t *testing.T, c *cli) {
	r := c.exec(t, "", serveEnv("", ""), "demo", "--serve", "0.0.0.0:0")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "CONVEYOR_API_TOKEN")
	r = c.exec(t, "", env(""), "demo", "--serve", "127.0.0.1:0", "--produce-only")
	require.Equal(t, 2, r.code, r.stderr)

	p := startServe(t, c, serveEnv("", ""), "demo", "--serve", "127.0.0.1:0")
	var base, queue string
	waitFor(t, 60*time.Second, 50*time.Millisecond, "the demo to finish and keep serving", func() bool {
		m := demoServeURL.FindStringSubmatch(p.output.String())
		if m != nil {
			base, queue = m[1], m[2]
		}
		return m != nil
	})
	requireDemoSummary(t, p.output.String())

	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get(base + path)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
	code, body := get("")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "<html")
	code, body = get("v1/queues")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"queue":"`+queue+`"`)
	require.Contains(t, body, `"completed":25`)

	res, err := http.Post(base+"v1/queues/"+queue+"/jobs", "application/json", strings.NewReader(`{"type":"echo","payload":"after"}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	require.Equal(t, http.StatusAccepted, res.StatusCode, "%s", b)
	var j struct{ ID, Status string }
	require.NoError(t, json.Unmarshal(b, &j))
	code, body = get("v1/queues/" + queue + "/jobs/" + j.ID + "?wait=20s")
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &j))
	require.Equal(t, "completed", j.Status, "the workers still run after the summary: %s", body)

	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	select {
	case <-p.done:
	case <-time.After(45 * time.Second):
		t.Fatal("no exit within 45s of SIGINT")
	}
	require.Equal(t, 0, p.cmd.ProcessState.ExitCode(), p.output.String())
	require.Contains(t, p.output.String(), "Stopping.")
}
