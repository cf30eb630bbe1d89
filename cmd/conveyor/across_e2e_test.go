package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// The case, with the binary: dead jobs in two queues, none in default. 'dead list'
// reads default and refuses it; --all-queues lists both queues' jobs with their queue; 'dead
// replay --all-queues' replays them all, a line per queue and the total.
func testDeadAllQueues(t *testing.T, c *cli) {
	p := redistest.UniqueName(t)
	billing := c.seedDead(t, p, "billing", 1)
	emails := c.seedDead(t, p, "emails", 2)
	r := c.run(t, "dead", "list", "--prefix", p)
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, `queue "default" not found; known queues: billing, emails`)

	r = c.run(t, "dead", "list", "--prefix", p, "--all-queues")
	require.Equal(t, 0, r.code, r.stderr)
	rows := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, rows, 3, r.stdout)
	require.Regexp(t, `^billing +`+billing[0]+` +fail +1 `, rows[0])
	require.Regexp(t, `^emails +`+emails[1]+` +fail +1 `, rows[1], "each queue's newest first")
	require.Regexp(t, `^emails +`+emails[0]+` +fail +1 `, rows[2])
	require.Regexp(t, `^QUEUE +ID +TYPE +ATTEMPTS +DEAD_SINCE +LAST_ERROR\njobs 1-3 of 3\n$`, r.stderr)

	require.Equal(t, "replayed 1 dead job in queue billing\nreplayed 2 dead jobs in queue emails\nreplayed 3 dead jobs in 2 queues\n",
		c.ok(t, "dead", "replay", "--prefix", p, "--queue", "*"))
	r = c.run(t, "list", "--prefix", p, "--all-queues", "--status", "queued")
	require.Equal(t, 0, r.code, r.stderr)
	require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 4, "the header and the three replayed jobs: %s", r.stdout)
}
