package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// A publish that Redis refuses for lack of memory wraps ErrOutOfMemory, one job or a batch,
// plain or delayed, and writes nothing; once memory is back the same publish goes through.
func TestEnqueueOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client, err := pipeline.NewClient(srv.Client(t), pipeline.ClientConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	q := redistest.UniqueName(t)
	// The queue is known already, so the refusal comes from the enqueue script itself.
	_, err = client.Enqueue(ctx, q, pipeline.Task{Type: "echo"})
	require.NoError(t, err)

	restore := srv.RefuseWrites(t)
	_, err = client.Enqueue(ctx, q, pipeline.Task{Type: "echo"}, pipeline.WithID("plain"))
	require.ErrorIs(t, err, pipeline.ErrOutOfMemory)
	require.ErrorContains(t, err, "Redis refused the write: out of memory (used memory > maxmemory)")
	_, err = client.Enqueue(ctx, q, pipeline.Task{Type: "echo"}, pipeline.WithDelay(time.Minute))
	require.ErrorIs(t, err, pipeline.ErrOutOfMemory)
	_, err = client.EnqueueBatch(ctx, q, []pipeline.Task{{Type: "echo"}, {Type: "echo"}})
	require.ErrorIs(t, err, pipeline.ErrOutOfMemory)
	// A new client registers the queue first: that write is refused the same way.
	_, err = client.Enqueue(ctx, redistest.UniqueName(t)+"-new", pipeline.Task{Type: "echo"})
	require.ErrorIs(t, err, pipeline.ErrOutOfMemory)

	_, err = client.Get(ctx, q, "plain")
	require.ErrorIs(t, err, pipeline.ErrNotFound, "nothing was written")
	restore()
	j, err := client.Enqueue(ctx, q, pipeline.Task{Type: "echo"}, pipeline.WithID("plain"))
	require.NoError(t, err)
	require.False(t, j.Duplicate)
}
