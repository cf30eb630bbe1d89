package pipeline_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// requireRedisErr checks that err carries a *rediserr.Error of kind and op (errors.As), the
// operation the API's error body ("op") and the CLI's message name.
// A call that makes more than one read names the read that failed: ops lists those it may be.
func requireRedisErr(t *testing.T, err error, kind rediserr.Kind, ops ...string) {
	t.Helper()
	var re *rediserr.Error
	require.True(t, errors.As(err, &re), "no *rediserr.Error in %v", err)
	require.Equal(t, kind, re.Kind, "%v", err)
	require.Contains(t, ops, re.Op, "%v", err)
	require.Equal(t, re.Op, rediserr.OpOf(err))
	require.Equal(t, kind, rediserr.Classify(err))
}

// ownServer returns a Redis server of the test's own (which it may stop or fill), a Client and
// an Inspector of it, and a queue name.
func ownServer(t *testing.T) (*redistest.Server, *pipeline.Client, *pipeline.Inspector, string) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	return srv, client, insp, redistest.UniqueName(t)
}

// A Redis that refuses writes (out of memory) fails the Client's and the Inspector's writes
// with kind OOM and the operation's name, through the storage layer and the pipeline's own
// calls alike; reads go through.
func TestRedisErrorsCarryOpOOM(t *testing.T) {
	t.Parallel()
	srv, client, insp, q := ownServer(t)
	ctx := t.Context()
	queued, err := client.Enqueue(ctx, q, pipeline.Task{Type: "echo"})
	require.NoError(t, err)

	restore := srv.RefuseWrites(t)
	defer restore()
	_, err = client.Enqueue(ctx, q, pipeline.Task{Type: "echo"})
	require.ErrorIs(t, err, pipeline.ErrOutOfMemory, "the sentinel still matches")
	requireRedisErr(t, err, rediserr.OOM, "enqueue")
	_, err = client.EnqueueBatch(ctx, q, []pipeline.Task{{Type: "echo"}, {Type: "echo"}})
	requireRedisErr(t, err, rediserr.OOM, "enqueue")
	_, err = client.Enqueue(ctx, q+"-new", pipeline.Task{Type: "echo"})
	requireRedisErr(t, err, rediserr.OOM, "add queue")
	requireRedisErr(t, client.Cancel(ctx, q, queued.ID), rediserr.OOM, "cancel")

	_, err = client.Get(ctx, q, queued.ID)
	require.NoError(t, err, "reads go through")
	page, err := insp.List(ctx, q, status.Queued, pipeline.Page{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
}

// An unreachable Redis fails the reads with kind Unreachable and the operation that found it
// so: the storage layer's script reads ("get"), its plain reads ("queues", "stats").
func TestRedisErrorsCarryOpUnreachable(t *testing.T) {
	t.Parallel()
	srv, client, insp, q := ownServer(t)
	ctx := t.Context()
	j, err := client.Enqueue(ctx, q, pipeline.Task{Type: "echo"})
	require.NoError(t, err)
	require.NoError(t, srv.Stop())

	_, err = client.Get(ctx, q, j.ID)
	requireRedisErr(t, err, rediserr.Unreachable, "get")
	// Stats reads the queue's partition count first unless the client's cache of it is fresh
	// (it expires: under load it has by now), so either read may be the one that fails.
	_, err = client.Stats(ctx, q)
	requireRedisErr(t, err, rediserr.Unreachable, "stats", "queues")
	_, err = insp.Queues(ctx)
	requireRedisErr(t, err, rediserr.Unreachable, "queues")
	_, err = insp.List(ctx, q, status.Queued, pipeline.Page{})
	requireRedisErr(t, err, rediserr.Unreachable, "queues")
}
