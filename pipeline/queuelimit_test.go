package pipeline_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// The known queues stop at MaxQueues however many publishers race to add new ones: the check
// and the add are one script. A known queue still takes jobs, a new one is refused with
// ErrTooManyQueues and nothing is written, and Inspector.CreateQueue keeps the same bound.
func TestMaxQueues(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.UniqueName(t)
	const most = 5
	set := keys.Queues(prefix)
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() {
			// A client each, so that no cache answers for another.
			c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix, MaxQueues: most})
			require.NoError(t, err)
			_, errs[i] = c.Enqueue(t.Context(), fmt.Sprintf("q%d", i), pipeline.Task{Type: "t"})
		})
	}
	wg.Wait()
	refused := 0
	for _, err := range errs {
		if err != nil {
			require.ErrorIs(t, err, pipeline.ErrTooManyQueues)
			require.ErrorContains(t, err, "5 queues already")
			refused++
		}
	}
	require.Equal(t, len(errs)-most, refused)
	n, err := rdb.SCard(t.Context(), set).Result()
	require.NoError(t, err)
	require.EqualValues(t, most, n)

	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix, MaxQueues: most})
	require.NoError(t, err)
	known, err := rdb.SRandMember(t.Context(), set).Result()
	require.NoError(t, err)
	_, err = c.EnqueueBatch(t.Context(), known, []pipeline.Task{{Type: "t"}, {Type: "t"}})
	require.NoError(t, err, "a known queue takes jobs")
	_, err = c.EnqueueBatch(t.Context(), "new", []pipeline.Task{{Type: "t"}})
	require.ErrorIs(t, err, pipeline.ErrTooManyQueues)
	reader, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	st, err := reader.Stats(t.Context(), "new")
	require.NoError(t, err)
	require.Zero(t, st.Enqueued, "nothing written")

	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix, MaxQueues: most})
	require.NoError(t, err)
	_, err = insp.CreateQueue(t.Context(), "new", pipeline.QueueOptions{})
	require.ErrorIs(t, err, pipeline.ErrTooManyQueues)
	_, err = insp.CreateQueue(t.Context(), known, pipeline.QueueOptions{})
	require.NoError(t, err)
	require.NoError(t, insp.DeleteQueue(t.Context(), known, true))
	_, err = c.Enqueue(t.Context(), "new", pipeline.Task{Type: "t"})
	require.NoError(t, err, "deleting a queue makes room")

	_, err = pipeline.NewClient(rdb, pipeline.ClientConfig{MaxQueues: -1})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}

// With RequireQueues a client publishes only to known queues: a new one is refused with
// ErrQueueNotFound (nothing written) until it is created.
func TestRequireQueues(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.UniqueName(t)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix, RequireQueues: true})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	_, err = c.Enqueue(t.Context(), "q", pipeline.Task{Type: "t"})
	require.ErrorIs(t, err, pipeline.ErrQueueNotFound)
	require.ErrorContains(t, err, "conveyor queues create q")
	_, err = c.EnqueueBatch(t.Context(), "q", []pipeline.Task{{Type: "t"}})
	require.ErrorIs(t, err, pipeline.ErrQueueNotFound)
	qs, err := insp.Queues(t.Context())
	require.NoError(t, err)
	require.Empty(t, qs)

	_, err = insp.CreateQueue(t.Context(), "q", pipeline.QueueOptions{})
	require.NoError(t, err)
	_, err = c.Enqueue(t.Context(), "q", pipeline.Task{Type: "t"})
	require.NoError(t, err)
	st, err := insp.Stats(t.Context(), "q")
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Enqueued)
}
