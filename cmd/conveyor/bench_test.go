package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestBenchCommand(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.UniqueName(t)
	for _, mode := range []string{"live", "drain"} {
		stdout, stderr, code := runInProcess(t, "", "bench", "--redis", srv.URL(), "--prefix", prefix,
			"--jobs", "3000", "--concurrency", "50", "--payload-bytes", "64", "--mode", mode, "--json")
		require.Equal(t, 0, code, stderr)
		var r benchReport
		require.NoError(t, json.Unmarshal([]byte(stdout), &r), stdout)
		require.Equal(t, mode, r.Mode)
		require.Equal(t, 3000, r.Jobs)
		require.Positive(t, r.JobsPerS)
		require.Positive(t, r.EnqueuePerS)
		require.GreaterOrEqual(t, r.LatencyMS["max"], r.LatencyMS["p50"])
	}
	// It cleans up after itself.
	rdb := srv.Client(t)
	n, err := rdb.Keys(context.Background(), prefix+":*").Result()
	require.NoError(t, err)
	require.Empty(t, n)
	queues, err := rdb.SMembers(context.Background(), keys.Queues(prefix)).Result()
	require.NoError(t, err)
	require.Empty(t, queues)
}

func TestBenchRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--jobs", "0"}, {"--payload-bytes", "4"}, {"--concurrency", "0"}, {"--mode", "fast"},
	} {
		_, stderr, code := runInProcess(t, "", append([]string{"bench", "--redis", noRedis}, args...)...)
		require.Equal(t, 1, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "conveyor: ")
	}
}
