package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// status and cancel without --queue look in every known queue, name the queue they found the
// job in, and, when no queue has it, say which queues they searched. Before, they looked only
// in "default" and said "not found". A prefix of its own keeps the known queues this test's.
func testCrossQueueLookup(t *testing.T, c *cli) {
	prefix := redistest.UniqueName(t)
	in := func(args ...string) []string { return append(args, "--prefix", prefix) }
	c.ok(t, in("publish", "--queue", "alpha", "--type", "echo")...)
	id := c.publishOne(t, in("--queue", "beta", "--type", "echo", "--delay", "1h")...)

	var j jobView
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, in("status", id, "--json")...)), &j))
	require.Equal(t, "beta", j.Queue)
	require.Equal(t, "scheduled", j.Status)
	require.Contains(t, c.ok(t, in("status", id)...), "beta")

	require.Equal(t, "canceled "+id+" in queue beta\n", c.ok(t, in("cancel", id)...))

	c.refused(t, 1, "not found in any known queue (searched alpha, beta)", in("status", "no-such-job")...)
	c.refused(t, 1, "not found in any known queue (searched alpha, beta)", in("cancel", "no-such-job")...)
	c.refused(t, 1, `job `+id+` not found in queue "alpha"`, in("status", "--queue", "alpha", id)...)
}
