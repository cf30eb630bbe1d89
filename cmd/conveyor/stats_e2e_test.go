package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// stats through the binary, run from TestE2E.

func testStatsUnknownQueue(t *testing.T, c *cli) {
	p := redistest.UniqueName(t)
	c.refused(t, 1, `queue "default" not found: there are no queues under prefix "`+p+`" yet`, "stats", "--prefix", p)
	c.publishOne(t, "--prefix", p, "-q", "emails", "--type", "echo")
	c.publishOne(t, "--prefix", p, "-q", "billing", "--type", "echo")
	c.refused(t, 1, `queue "emials" not found; known queues: billing, emails (see 'conveyor queues')`, "stats", "--prefix", p, "-q", "emials")
	c.refused(t, 1, `queue "emials" not found`, "stats", "--prefix", p, "-q", "emials", "--json")
	require.EqualValues(t, 1, c.stats(t, "--prefix", p, "-q", "emails").Queued)
	c.refused(t, 2, "invalid queue name", "stats", "--prefix", p, "-q", "a{b}")
}
