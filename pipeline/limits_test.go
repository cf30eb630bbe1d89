package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

func TestLimitsStoredAndValidated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	in, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)

	require.ErrorIs(t, in.SetLimit(ctx, b.queue+"-none", pipeline.Limit{Concurrency: 1}), pipeline.ErrQueueNotFound)
	_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)

	for _, bad := range []pipeline.Limit{
		{},
		{Rate: 5},
		{Rate: 5, Interval: 1500 * time.Microsecond},
		{Rate: -1, Interval: time.Second},
		{Concurrency: -1},
		{Concurrency: 1, Interval: time.Second},
		{Rate: 1, Interval: pipeline.MaxLimitInterval + time.Millisecond},
		{Type: "a b", Concurrency: 1},
	} {
		err := in.SetLimit(ctx, b.queue, bad)
		require.ErrorIs(t, err, pipeline.ErrInvalid, "%+v", bad)
	}

	want := []pipeline.Limit{
		{Rate: 100, Interval: time.Second},
		{PerKey: true, Concurrency: 3},
		{Type: "email", Rate: 10, Interval: time.Minute, Concurrency: 2},
		{Type: "email", PerKey: true, Concurrency: 1},
	}
	for k := len(want) - 1; k >= 0; k-- {
		require.NoError(t, in.SetLimit(ctx, b.queue, want[k]))
	}
	got, err := in.Limits(ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, want, got)

	ok, err := in.DeleteLimit(ctx, b.queue, "email", true)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = in.DeleteLimit(ctx, b.queue, "email", true)
	require.NoError(t, err)
	require.False(t, ok)
	got, err = in.Limits(ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, want[:3], got)
}
