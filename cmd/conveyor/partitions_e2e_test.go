package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// A partitioned queue through the binary, run from TestE2E: 'queues create --partitions',
// publish (the jobs spread over the partitions), a worker that reads them all, status without
// naming a partition, and a change of the count refused while jobs are unfinished.
func testPartitions(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	require.Equal(t, "queue "+q+": 3 partitions\n", c.ok(t, "queues", "create", q, "--partitions", "3"))
	require.Equal(t, "queue "+q+": 3 partitions\n", c.ok(t, "queues", "create", q, "--partitions", "3"), "the same count again")
	c.refused(t, 2, "--partitions 0", "queues", "create", q, "--partitions", "0")
	c.refused(t, 2, "want exactly one queue name", "queues", "create", "--partitions", "2")

	ids := strings.Fields(c.ok(t, "publish", "--queue", q, "--type", "echo", "--payload", `{"p":1}`, "--count", "60"))
	require.Len(t, ids, 60)
	for i := range 3 {
		n, err := c.rdb.XLen(t.Context(), keys.New(keys.DefaultPrefix, keys.PartitionName(q, i, 3)).Stream()).Result()
		require.NoError(t, err)
		require.Positive(t, n, "partition %d got none of the 60 jobs", i)
	}
	require.EqualValues(t, 60, c.stats(t, "--queue", q).Queued, "stats sum the partitions")
	c.refused(t, 1, "unfinished jobs", "queues", "create", q, "--partitions", "4")

	w := c.start(t, "worker", "--queue", q)
	waitFor(t, 60*time.Second, 100*time.Millisecond, "60 completed jobs", func() bool {
		return c.stats(t, "--queue", q).Completed == 60
	})
	for _, id := range []string{ids[0], ids[29], ids[59]} {
		j := c.status(t, "--queue", q, id)
		require.Equal(t, "completed", j.Status)
		require.Equal(t, q, j.Queue, "the user's queue, not the partition")
		require.JSONEq(t, `{"p":1}`, string(j.Result))
		require.Equal(t, q, c.status(t, id).Queue, "status without --queue looks in every partition of every queue")
	}
	require.Equal(t, 0, w.stop(t))
	// The finished records stay for their retention, in keys a new layout would not read.
	c.refused(t, 1, "60 finished records", "queues", "create", q, "--partitions", "4")
	c.ok(t, "queues", "delete", q)
	require.Equal(t, "queue "+q+": 4 partitions\n", c.ok(t, "queues", "create", q, "--partitions", "4"), "an empty queue may change")
}
