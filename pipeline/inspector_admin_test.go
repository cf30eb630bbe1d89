package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// The dry run of PurgeAll names exactly the jobs PurgeAll then deletes, in List's order,
// across script pages (1100 dead jobs, 500 a page).
func TestPurgeAllDryRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.enqueue(t, 1100, nil)
	now := time.Now().UnixMilli()
	b.kill(t, b.deliver(t, "w1", 1100), func(i int) int64 { return now - int64(i%2)*24*3600*1000 })
	all, _ := listAll(t, b.insp, b.queue, status.Failed, 0)
	require.Len(t, all, 1100)

	none, err := b.insp.PurgeAllDryRun(ctx, b.queue, 2*24*time.Hour)
	require.NoError(t, err)
	require.Empty(t, none)

	var old []string
	cutoff := time.Now().Add(-time.Hour)
	for _, j := range all {
		if j.CompletedAt.Before(cutoff) {
			old = append(old, j.ID)
		}
	}
	require.Len(t, old, 550)
	would, err := b.insp.PurgeAllDryRun(ctx, b.queue, time.Hour)
	require.NoError(t, err)
	require.Equal(t, old, ids(would), "the old half, newest first as List shows them")
	n, err := b.insp.PurgeAll(ctx, b.queue, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 550, n)
	left, _ := listAll(t, b.insp, b.queue, status.Failed, 0)
	require.Len(t, left, 550)
	require.NotContains(t, ids(left), old[0])

	would, err = b.insp.PurgeAllDryRun(ctx, b.queue, 0)
	require.NoError(t, err)
	require.Equal(t, ids(left), ids(would))
	require.Equal(t, int64(550), stats(t, b).Dead, "a dry run deletes nothing")

	_, err = b.insp.PurgeAllDryRun(ctx, b.queue, -time.Second)
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}

func TestPurgeDryRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	jobs := b.enqueue(t, 2, nil)
	b.kill(t, b.deliver(t, "w1", 1), func(int) int64 { return time.Now().UnixMilli() })
	j, err := b.insp.PurgeDryRun(ctx, b.queue, jobs[0].ID)
	require.NoError(t, err)
	require.Equal(t, status.Failed, j.Status)
	_, err = b.insp.PurgeDryRun(ctx, b.queue, jobs[1].ID)
	require.ErrorIs(t, err, pipeline.ErrNotDead)
	require.ErrorContains(t, err, "(it is queued)")
	_, err = b.insp.PurgeDryRun(ctx, b.queue, "01JUNKNOWN0000000000000000")
	require.ErrorIs(t, err, pipeline.ErrNotFound)
	require.Equal(t, int64(1), stats(t, b).Dead, "a dry run deletes nothing")
}

func TestQueueExists(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	ok, err := b.insp.QueueExists(ctx, b.queue)
	require.NoError(t, err)
	require.False(t, ok)
	names, err := b.insp.QueueNames(ctx)
	require.NoError(t, err)
	require.NotContains(t, names, b.queue)
	b.enqueue(t, 1, nil)
	ok, err = b.insp.QueueExists(ctx, b.queue)
	require.NoError(t, err)
	require.True(t, ok)
	names, err = b.insp.QueueNames(ctx)
	require.NoError(t, err)
	require.Contains(t, names, b.queue)
	_, err = b.insp.QueueExists(ctx, "a b")
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}
