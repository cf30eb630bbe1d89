package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDemoInProcess runs the demo inside the test binary, so that under -race the race detector
// watches the command's own concurrency (three workers, progress, summary).
func TestDemoInProcess(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("takes a few seconds")
	}
	stdout, stderr, code := runInProcess(t, "", "demo")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "embedded")
	requireDemoSummary(t, stdout)
	require.Contains(t, stderr, "28/28 finished") // plain progress lines: stderr is no terminal
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
	require.Regexp(t, `(?m)^  failed +3 +in the dead set`, out)
	require.Regexp(t, `(?m)^  flaky +5 +5 +0 +1[5-9] `, out) // 15, and more when the killed worker held one
	require.Regexp(t, `(?m)^  fail +3 +0 +3 +9 `, out)
	require.Regexp(t, `Recovery: demo-worker-2 was killed .* holding \d+ jobs?\. `, out)
	require.Regexp(t, `recovered \d+ jobs? after`, out)
	require.Regexp(t, `(?m)^  demo-worker-2 .*\(killed\)$`, out)
	for i := 1; i <= demoWorkers; i++ {
		require.Contains(t, out, "demo-worker-"+string(rune('0'+i)))
	}
	require.Contains(t, out, "Elapsed")
}
