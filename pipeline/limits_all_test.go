package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// AllLimits reads every known queue's limits in two round trips, whatever their number.
func TestAllLimits(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.UniqueName(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	in, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	ctx := context.Background()

	all, err := in.AllLimits(ctx)
	require.NoError(t, err)
	require.Empty(t, all)

	const queues = 30
	for k := range queues {
		q := fmt.Sprintf("q%02d", k)
		_, err := client.Enqueue(ctx, q, pipeline.Task{Type: "t"})
		require.NoError(t, err)
		if k%3 == 0 {
			require.NoError(t, in.SetLimit(ctx, q, pipeline.Limit{Type: "t", PerKey: true, Concurrency: k + 1}))
			require.NoError(t, in.SetLimit(ctx, q, pipeline.Limit{Rate: k + 1, Interval: time.Second}))
		}
	}

	cc := redistest.CountCommands(rdb)
	before := cc.RoundTrips()
	all, err = in.AllLimits(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, cc.RoundTrips()-before, int64(2))
	require.Len(t, all, queues)
	for k := range queues {
		got := all[fmt.Sprintf("q%02d", k)]
		if k%3 != 0 {
			require.Empty(t, got)
			continue
		}
		require.Equal(t, []pipeline.Limit{
			{Rate: k + 1, Interval: time.Second},
			{Type: "t", PerKey: true, Concurrency: k + 1},
		}, got)
	}

	some, err := in.LimitsOf(ctx, []string{"q03", "q04", "nowhere"})
	require.NoError(t, err)
	require.Len(t, some, 3)
	require.Len(t, some["q03"], 2)
	require.Empty(t, some["q04"])
	require.Empty(t, some["nowhere"])
	_, err = in.LimitsOf(ctx, []string{"a{b}"})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}
