package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/pipeline"
)

// UpdateQueue changes each part of a queue's settings, QueueSettings reads them back as one
// record, and every change raises the revision.
func TestUpdateQueue(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, testUpdateQueue)
}

func testUpdateQueue(t *testing.T, rdb redis.UniversalClient) {
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	yes, no, two, five, zero, minus := true, false, 2, 5, 0, -1
	_, err := b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{Concurrency: &two})
	require.ErrorIs(t, err, pipeline.ErrQueueNotFound)
	_, err = b.insp.QueueSettings(ctx, b.queue)
	require.ErrorIs(t, err, pipeline.ErrQueueNotFound)
	_, err = b.insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
	require.NoError(t, err)
	_, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{Concurrency: &minus})
	require.ErrorIs(t, err, pipeline.ErrInvalid)

	st, err := b.insp.QueueSettings(ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, &pipeline.QueueSettings{Queue: b.queue, Partitions: 1, Limits: []pipeline.Limit{},
		GroupWindow: pipeline.DefaultGroupWindow, GroupWeights: map[string]int{}, Levels: []int{}, FullPolicy: pipeline.FullReject}, st)

	st, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{Concurrency: &two, GroupWindow: &five,
		GroupWeights: map[string]int{"tenant": 3}})
	require.NoError(t, err)
	require.Equal(t, []pipeline.Limit{{Concurrency: 2}}, st.Limits)
	require.Equal(t, 5, st.GroupWindow)
	require.Equal(t, map[string]int{"tenant": 3}, st.GroupWeights)
	require.Equal(t, int64(2), st.Revision, "the limit and the groups each raise it")

	st, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{Paused: &yes, Concurrency: &zero})
	require.NoError(t, err)
	require.True(t, st.Paused)
	require.Empty(t, st.Limits, "no rate and no concurrency: no limit")
	paused, err := b.insp.Paused(ctx)
	require.NoError(t, err)
	require.Contains(t, paused, b.queue)

	st, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{Paused: &no, Partitions: &two})
	require.NoError(t, err)
	require.False(t, st.Paused)
	require.Equal(t, 2, st.Partitions)
	require.Equal(t, int64(6), st.Revision)
	paused, err = b.insp.Paused(ctx)
	require.NoError(t, err)
	require.NotContains(t, paused, b.queue)

	// A queue deleted while paused comes back with no settings: a worker would otherwise
	// stay paused on its record.
	_, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{Paused: &yes, MaxRetries: &two})
	require.NoError(t, err)
	require.NoError(t, b.insp.DeleteQueue(ctx, b.queue, true))
	_, err = b.insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
	require.NoError(t, err)
	st, err = b.insp.QueueSettings(ctx, b.queue)
	require.NoError(t, err)
	require.False(t, st.Paused)
	require.Nil(t, st.MaxRetries)
	require.Zero(t, st.Revision)
}

// A queue paused by a version before the settings record (the set keys.Paused alone) stays
// paused for a worker of this one, and UpdateQueue resumes it.
func TestLegacyPauseKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, err := b.insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
	require.NoError(t, err)
	require.NoError(t, b.rdb.SAdd(ctx, keys.Paused(keys.DefaultPrefix), b.queue).Err())
	ran := make(chan string, 1)
	w, _ := b.startWorker(t, pipeline.WorkerConfig{PauseCheckInterval: time.Hour},
		map[string]pipeline.HandlerFunc{"t": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			ran <- j.ID
			return nil, nil
		}})
	// Applied before the session reads anything: no wait.
	require.True(t, pipeline.PausedTopics(w)[b.queue])
	st, err := b.insp.QueueSettings(ctx, b.queue)
	require.NoError(t, err)
	require.True(t, st.Paused)

	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	no := false
	// The poll is an hour: only the notice can tell the worker.
	_, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{Paused: &no})
	require.NoError(t, err)
	select {
	case id := <-ran:
		require.Equal(t, j.ID, id)
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed queue's job did not run")
	}
	paused, err := b.insp.Paused(ctx)
	require.NoError(t, err)
	require.NotContains(t, paused, b.queue)
}
