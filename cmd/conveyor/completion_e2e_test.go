package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// Shell completion through the binary, run from TestE2E.

// complete runs 'conveyor __complete args...' (the last arg being the word to complete) and
// returns the candidates and the directive line.
func (c *cli) complete(t *testing.T, args ...string) (candidates []string, directive string) {
	t.Helper()
	r := c.exec(t, "", env(""), append([]string{"__complete"}, args...)...)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

func testCompletion(t *testing.T, c *cli) {
	r := c.exec(t, "", env(""), "completion", "bash")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "bash completion V2 for conveyor")

	// Dead job ids for dead replay and purge, from the --queue given.
	p := redistest.UniqueName(t)
	dead := c.seedDead(t, p, "emails", 2)
	got, dir := c.complete(t, "dead", "replay", "--redis", c.url, "--prefix", p, "-q", "emails", dead[0], "")
	require.Equal(t, ":4", dir)
	require.Equal(t, []string{dead[1] + "\tfail: boom second line"}, got, "the id given already is not offered")
	got, _ = c.complete(t, "dead", "purge", "--redis", c.url, "--prefix", p, "-q", "emails", "--all", "")
	require.Empty(t, got, "--all takes no ids")

	c.publishOne(t, "--prefix", p, "-q", "billing", "--type", "echo")
	got, dir = c.complete(t, "publish", "--redis", c.url, "--prefix", p, "--queue", "")
	require.Equal(t, ":4", dir)
	require.Equal(t, []string{"billing\t1 queued", "emails\t2 dead"}, got)
	got, _ = c.complete(t, "stats", "--redis", c.url, "--prefix", p, "-q", "em")
	require.Equal(t, []string{"emails\t2 dead"}, got)
	got, _ = c.complete(t, "worker", "--redis", c.url, "--prefix", p, "-q", "billing,")
	require.Equal(t, []string{"billing,billing\t1 queued", "billing,emails\t2 dead"}, got)
	got, _ = c.complete(t, "queues", "delete", "--redis", c.url, "--prefix", p, "b")
	require.Equal(t, []string{"billing\t1 queued"}, got)

	// With $CONVEYOR_REDIS_URL instead of --redis.
	r = c.exec(t, "", env(c.url), "__complete", "status", "--prefix", p, "--queue", "")
	require.Equal(t, "billing\t1 queued\nemails\t2 dead\n:4\n", r.stdout)

	// Redis unreachable: nothing, silently.
	got, dir = c.complete(t, "publish", "--redis", "redis://127.0.0.1:1/0", "--queue", "")
	require.Empty(t, got)
	require.Equal(t, ":4", dir)

	got, _ = c.complete(t, "publish", "--type", "")
	require.Len(t, got, 6)
	require.Equal(t, "echo\treturns its payload as the result", got[0])
	got, _ = c.complete(t, "bench", "--mode", "")
	require.Equal(t, []string{"live\tpublish while the worker runs", "drain\tpublish first, then time the drain"}, got)
	got, _ = c.complete(t, "list", "--status", "")
	require.Equal(t, []string{"waiting", "scheduled", "queued", "in_progress", "failed", "completed", "canceled", "dead\tthe same as failed"}, got)
	got, _ = c.complete(t, "stats", "--log-level", "")
	require.Equal(t, []string{"trace", "debug", "info", "warn", "error"}, got)
}
