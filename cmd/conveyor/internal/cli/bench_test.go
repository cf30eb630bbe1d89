package cli

import (
	"context"
	"encoding/json"
	"testing"
	"time"

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
	// The table shows latencies to the hundredth of a millisecond.
	stdout, stderr, code := runInProcess(t, "", "bench", "--redis", srv.URL(), "--prefix", prefix,
		"--jobs", "500", "--concurrency", "20", "--payload-bytes", "8")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^latency, publish to start +p50 \d+\.\d\d ms +p90 \d+\.\d\d ms +p99 \d+\.\d\d ms +max \d+\.\d\d ms$`, stdout)

	// It cleans up after itself.
	rdb := srv.Client(t)
	n, err := rdb.Keys(context.Background(), prefix+":*").Result()
	require.NoError(t, err)
	require.Empty(t, n)
	queues, err := rdb.SMembers(context.Background(), keys.Queues(prefix)).Result()
	require.NoError(t, err)
	require.Empty(t, queues)
}

// A drain whose publishing fails (here: the timeout ends it) returns the error; the worker it
// never started must not be waited for.
func TestBenchDrainPublishFailureReturns(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	done := make(chan int, 1)
	var stderr string
	go func() {
		var code int
		_, stderr, code = runInProcess(t, "", "bench", "--redis", srv.URL(), "--prefix", redistest.UniqueName(t),
			"--jobs", "100000000", "--mode", "drain", "--timeout", "300ms")
		done <- code
	}()
	select {
	case code := <-done:
		require.Equal(t, 1, code, stderr)
		require.Contains(t, stderr, "publish")
	case <-time.After(30 * time.Second):
		t.Fatal("bench did not return after its publishing failed")
	}
}

func TestBenchRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--jobs", "0"}, {"--payload-bytes", "4"}, {"--concurrency", "0"}, {"--mode", "fast"},
	} {
		_, stderr, code := runInProcess(t, "", append([]string{"bench", "--redis", noRedis}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "conveyor: ")
	}
}

func TestDurationMS(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0.42, durationMS(420*time.Microsecond))
	require.Equal(t, 1.375, durationMS(1374900*time.Nanosecond), "rounded to the microsecond")
	require.Equal(t, 1500.0, durationMS(1500*time.Millisecond))
	require.Equal(t, 0.0, durationMS(0))
}
