package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// run-now and delete through the binary: a delayed job runs now, a queued one is deleted with
// no record left, a dead one is refused (exit 1, said dead), and list --status dead is the
// dead set.
func testRunNowDelete(t *testing.T, c *cli) {
	p := redistest.UniqueName(t)
	dead := c.seedDead(t, p, "q", 1)[0]
	delayed := c.publishOne(t, "--prefix", p, "--queue", "q", "--type", "echo", "--delay", "1h")
	queued := c.publishOne(t, "--prefix", p, "--queue", "q", "--type", "echo")

	out := c.ok(t, "run-now", "--prefix", p, delayed, "--json")
	var ran struct {
		ID     string `json:"id"`
		Queue  string `json:"queue"`
		RunNow bool   `json:"run_now"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ran), out)
	require.Equal(t, delayed, ran.ID)
	require.Equal(t, "q", ran.Queue, "found without --queue")
	require.True(t, ran.RunNow)
	require.Contains(t, c.ok(t, "status", "--prefix", p, "-q", "q", delayed, "--json"), `"status":"queued"`)
	c.refused(t, 1, "job is not scheduled (it is queued)", "run-now", "--prefix", p, "-q", "q", delayed)

	require.Equal(t, "deleted "+queued+" in queue q\n", c.ok(t, "delete", "--prefix", p, "-q", "q", queued))
	c.refused(t, 1, "not found", "status", "--prefix", p, "-q", "q", queued)
	c.refused(t, 1, "job is not scheduled or queued (it is dead)", "delete", "--prefix", p, "-q", "q", dead)

	rows := c.ok(t, "list", "--prefix", p, "-q", "q", "--status", "dead")
	require.Regexp(t, `(?m)^`+dead+` +fail +dead +1 `, rows)
}
