package pipeline_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
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

// A queue holds at most MaxQueueLimits limits: a new scope past it is refused (ErrInvalid,
// naming the bound), while a limit of a scope that has one is replaced as before, and a
// deleted one makes room.
func TestLimitsPerQueueBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	vals := make([]any, 0, 2*pipeline.MaxQueueLimits)
	for k := range pipeline.MaxQueueLimits - 1 {
		f, v := jobstate.EncodeLimit(jobstate.Limit{Type: "type-" + strconv.Itoa(k), Concurrency: 1})
		vals = append(vals, f, v)
	}
	q := keys.New(keys.DefaultPrefix, b.queue)
	require.NoError(t, b.rdb.HSet(ctx, q.Limits(), vals...).Err())

	require.NoError(t, b.insp.SetLimit(ctx, b.queue, pipeline.Limit{Concurrency: 5}), "the last one")
	err = b.insp.SetLimit(ctx, b.queue, pipeline.Limit{Type: "email", Concurrency: 1})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	require.ErrorContains(t, err, fmt.Sprintf("has %d limits, the most a queue may have", pipeline.MaxQueueLimits))
	require.NoError(t, b.insp.SetLimit(ctx, b.queue, pipeline.Limit{Concurrency: 7}), "a scope that has one is replaced")
	require.NoError(t, b.insp.SetLimit(ctx, b.queue, pipeline.Limit{Type: "type-3", Rate: 1, Interval: time.Second}))
	n, err := b.rdb.HLen(ctx, q.Limits()).Result()
	require.NoError(t, err)
	require.EqualValues(t, pipeline.MaxQueueLimits, n)

	ok, err := b.insp.DeleteLimit(ctx, b.queue, "type-0", false)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, b.insp.SetLimit(ctx, b.queue, pipeline.Limit{Type: "email", Concurrency: 1}), "room again")
}
