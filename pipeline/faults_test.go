package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// privateBundle is a bundle on a server of the test's own, for tests that change the server's
// configuration (maxmemory) or stop it.
func privateBundle(t *testing.T) (*testBundle, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	return setup(t, setupOpts{rdb: srv.Client(t)}), srv
}

// refuseWrites makes the server answer every write that needs memory with OOM until the
// returned function is called.
func refuseWrites(t *testing.T, rdb redis.UniversalClient) (restore func()) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "1").Err())
	done := false
	restore = func() {
		if !done {
			done = true
			require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "0").Err())
		}
	}
	t.Cleanup(restore)
	return restore
}

// Every handler of a job with no retries succeeds while Redis refuses writes (out of memory)
// for a while: the outcomes must wait, their jobs held and renewed, and be written once Redis
// takes writes again. Before, the completer gave up after five tries, settled the messages with
// their outcomes unwritten, and recovery sent every job to the dead set as lost.
func TestOutOfMemorySpellKeepsEarnedOutcomes(t *testing.T) {
	t.Parallel()
	b, _ := privateBundle(t)
	ctx := t.Context()
	const n = 10
	ids := make([]string, n)
	for i := range ids {
		j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "work"}, pipeline.WithMaxRetries(0))
		require.NoError(t, err)
		ids[i] = j.ID
	}

	var ran atomic.Int64
	started := make(chan struct{}, n)
	release := make(chan struct{})
	b.startWorker(t, pipeline.WorkerConfig{
		Concurrency: 2, VisibilityTimeout: 900 * time.Millisecond, RecoveryInterval: 100 * time.Millisecond,
	}, map[string]pipeline.HandlerFunc{
		"work": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			ran.Add(1)
			started <- struct{}{}
			<-release
			return []byte("ok"), nil
		},
	})
	<-started
	<-started
	restore := refuseWrites(t, b.rdb)
	close(release)
	// Long enough for several visibility timeouts and many write attempts.
	time.Sleep(4 * time.Second)
	restore()

	for _, id := range ids {
		j := b.waitStatus(t, id, status.Completed)
		require.Equal(t, 1, j.Attempt, "job %s ran once", id)
		require.Equal(t, "ok", string(j.Result))
	}
	s := b.stats(t)
	require.EqualValues(t, n, s.Completed)
	require.Zero(t, s.DeadByRecovery)
	require.Zero(t, s.Failed)
	require.Zero(t, s.Recovered)
	require.EqualValues(t, n, ran.Load(), "no job ran twice")
}
