package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/doctor"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestClusterMistakesE2E: each way of pointing the CLI at the wrong kind of Redis is said
// where it happens, with the fix, rather than as Redis's raw reply.
func TestClusterMistakesE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildCLI(t)

	// A cluster node without --cluster: a key of another node's slot is a MOVED, which only a
	// cluster client follows. Some of ten queues hash to the other two masters.
	t.Run("MovedWithoutCluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t)
		c := &cli{bin: bin, url: "redis://" + cl.Addrs[0] + "/0"}
		var moved *result
		for i := 0; i < 10 && moved == nil; i++ {
			r := c.run(t, "publish", "--queue", redistest.UniqueName(t)+string(rune('a'+i)), "--type", "echo")
			if r.code != 0 {
				moved = &r
			}
		}
		require.NotNil(t, moved, "no publish was sent to another node")
		require.Equal(t, 1, moved.code, moved.stderr)
		require.Contains(t, moved.stderr, "is a Redis Cluster node and sent the command to another node (MOVED ")
		require.Contains(t, moved.stderr, "add --cluster (or CONVEYOR_CLUSTER=true)")
	})

	// Several addresses without --cluster: a usage error that says what they mean.
	t.Run("SeveralAddresses", func(t *testing.T) {
		t.Parallel()
		c := &cli{bin: bin, url: "redis://127.0.0.1:1?addr=127.0.0.1:2"}
		c.refused(t, 2, "names several addresses (addr=), which is a Redis Cluster's seed list: add --cluster", "queues")
		c.url = "redis://127.0.0.1:1,127.0.0.1:2/0"
		c.refused(t, 2, "names several addresses in its host; a Redis Cluster takes one there and the others as addr parameters", "queues")
		c.refused(t, 2, "redis://h1:p1?addr=h2:p2", "queues", "--cluster")
	})

	// --cluster on a standalone server: doctor's cluster check fails with the fix, and the
	// other checks still run on the server.
	t.Run("DoctorClusterOnStandalone", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		c := &cli{bin: bin, url: srv.URL()}
		r := c.run(t, "doctor", "--cluster", "--json")
		require.Equal(t, 1, r.code, r.stderr)
		var fs []doctor.Finding
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &fs), r.stdout)
		byCheck := map[string]doctor.Finding{}
		for _, f := range fs {
			byCheck[f.Check] = f
		}
		require.Equal(t, doctor.Fail, byCheck["cluster"].Status, "%+v", fs)
		require.Equal(t, "Redis is standalone, but --cluster is set", byCheck["cluster"].Detail)
		require.Contains(t, byCheck["cluster"].Fix, "drop --cluster")
		require.Equal(t, doctor.OK, byCheck["version"].Status, "%+v", fs)

		r = c.run(t, "doctor", "--cluster")
		require.Equal(t, 1, r.code, r.stderr)
		require.Contains(t, r.stdout, "Redis is standalone, but --cluster is set")
		require.False(t, strings.Contains(r.stderr, "cluster support disabled"), r.stderr)
	})
}
