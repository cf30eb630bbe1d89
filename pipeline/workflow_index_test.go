package pipeline_test

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/pipeline"
)

// A queue's index of workflows holds keys.WorkflowIndexCap ids at most: a workflow published
// into a full index takes the place of the oldest (mutant WL1 of workflow.lua kept one past
// the cap). The index is filled with ids of no workflow, older than any publish, rather than
// by publishing 10,000 workflows.
func TestWorkflowIndexTrimmedToItsCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	old := make([]redis.Z, keys.WorkflowIndexCap)
	for i := range old {
		old[i] = redis.Z{Score: float64(i), Member: fmt.Sprintf("old-%05d", i)}
	}
	require.NoError(t, b.rdb.ZAdd(ctx, b.q.WorkflowIndex(), old...).Err())
	_, err := b.client.Workflow(ctx, b.queue, pipeline.Workflow{ID: "new", Tasks: []pipeline.WorkflowTask{{Name: "a", Task: pipeline.Task{Type: "t"}}}})
	require.NoError(t, err)
	n, err := b.rdb.ZCard(ctx, b.q.WorkflowIndex()).Result()
	require.NoError(t, err)
	require.EqualValues(t, keys.WorkflowIndexCap, n)
	ends, err := b.rdb.ZRange(ctx, b.q.WorkflowIndex(), 0, 0).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"old-00001"}, ends, "the oldest gone")
	ends, err = b.rdb.ZRange(ctx, b.q.WorkflowIndex(), -1, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"new"}, ends)
}
