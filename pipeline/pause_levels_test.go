package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestPauseWaitsForTheLevel4Read: a worker confirms a pause once the reads under way of every
// level's stream of the queue have ended, level 4's included. At concurrency 2, a level-1 job
// whose handler holds its slot leaves the level-1 reader waiting for a slot while a blocking
// read of level 4 is under way; Pause returns only once that read ended, so a level-4 job
// published at once is not read (its entry stays past the group's last delivered id) until
// Resume. A round whose level-4 read ended before the pause proves nothing and is not counted.
func TestPauseWaitsForTheLevel4Read(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	prefix := redistest.UniqueName(t)
	const q = "paused"
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	_, err = insp.CreateQueue(ctx, q, pipeline.QueueOptions{})
	require.NoError(t, err)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	started := make(chan string, 100)
	release := make(chan struct{}, 100)
	h := newQueueReads(prefix, q)
	startWorkerOn(t, hookedClient(t, rdb, h), pipeline.WorkerConfig{Prefix: prefix, Queues: []string{q},
		Concurrency: 2}, map[string]pipeline.HandlerFunc{
		"run": func(_ context.Context, j *pipeline.Job) ([]byte, error) { started <- j.ID; return nil, nil },
		"hold": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			started <- j.ID
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		}})
	level4 := keys.New(prefix, q).LevelStream(keys.MaxPriority)
	// A first level-4 job has the worker read that level's stream.
	j, err := client.Enqueue(ctx, q, pipeline.Task{Type: "run"}, pipeline.WithPriority(keys.MaxPriority))
	require.NoError(t, err)
	require.Equal(t, []string{j.ID}, receiveIDs(t, started, 1))
	counted := 0
	for round := 0; counted < 3; round++ {
		require.Less(t, round, 30, "a level-4 read was under way at the pause in %d of 30 rounds", counted)
		require.Eventually(t, func() bool { _, idle := h.reads(level4); return !idle }, 10*time.Second, time.Millisecond)
		hold, err := client.Enqueue(ctx, q, pipeline.Task{Type: "hold"})
		require.NoError(t, err)
		require.Equal(t, []string{hold.ID}, receiveIDs(t, started, 1))
		reads, idle := h.reads(level4)
		require.NoError(t, insp.Pause(ctx, q))
		j, err := client.Enqueue(ctx, q, pipeline.Task{Type: "run"}, pipeline.WithPriority(keys.MaxPriority))
		require.NoError(t, err)
		// The reads of level 4 under way have ended and none began since (the queue is paused):
		// no read can take the job now.
		require.Eventually(t, func() bool { _, idle := h.reads(level4); return idle }, 10*time.Second, time.Millisecond)
		if n, _ := h.reads(level4); !idle && n == reads {
			counted++
			assert.Equal(t, 1, undelivered(t, rdb, level4), "round %d: the level-4 job published after Pause returned was read", round)
		}
		release <- struct{}{}
		require.NoError(t, insp.Resume(ctx, q))
		require.Equal(t, []string{j.ID}, receiveIDs(t, started, 1))
	}
}

// undelivered counts the entries of stream past its (one) group's last delivered id.
func undelivered(t *testing.T, rdb redis.UniversalClient, stream string) int {
	t.Helper()
	groups, err := rdb.XInfoGroups(t.Context(), stream).Result()
	require.NoError(t, err)
	require.Len(t, groups, 1)
	rest, err := rdb.XRange(t.Context(), stream, "("+groups[0].LastDeliveredID, "+").Result()
	require.NoError(t, err)
	return len(rest)
}
