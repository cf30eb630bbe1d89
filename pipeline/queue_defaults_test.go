package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// A queue's default retry count and timeout (UpdateQueue) apply to the jobs published without
// their own, by Enqueue, EnqueueBatch and workflows alike, are stored with the job, reach its
// handler, and go when removed. A publish reads them with the partition count, so a publish
// with the count cached costs one round trip, as before.
func TestQueueJobDefaults(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	for _, be := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"Standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"Cluster", func(t *testing.T) redis.UniversalClient { return cl.Client(t) }},
	} {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			testQueueJobDefaults(t, be.rdb)
		})
	}
}

func testQueueJobDefaults(t *testing.T, newRedis func(t *testing.T) redis.UniversalClient) {
	b := setup(t, setupOpts{rdb: newRedis(t)})
	ctx := t.Context()
	_, err := b.insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
	require.NoError(t, err)
	seven, timeout := 7, 2*time.Second
	st, err := b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{MaxRetries: &seven, Timeout: &timeout})
	require.NoError(t, err)
	require.Equal(t, &seven, st.MaxRetries)
	require.Equal(t, timeout, st.Timeout)

	plain, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	own, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithMaxRetries(0), pipeline.WithTimeout(time.Second))
	require.NoError(t, err)
	batch, err := b.client.EnqueueBatch(ctx, b.queue, []pipeline.Task{{Type: "t"}})
	require.NoError(t, err)
	wf, err := b.client.Workflow(ctx, b.queue, pipeline.Workflow{Tasks: []pipeline.WorkflowTask{{Name: "a", Task: pipeline.Task{Type: "t"}}}})
	require.NoError(t, err)
	for _, c := range []struct {
		id      string
		retries int
		timeout time.Duration
	}{{plain.ID, 7, timeout}, {own.ID, 0, time.Second}, {batch[0].ID, 7, timeout}, {wf.Tasks[0].JobID, 7, timeout}} {
		j, err := b.insp.Get(ctx, b.queue, c.id)
		require.NoError(t, err)
		require.Equal(t, c.retries, j.MaxRetries, c.id)
		require.Equal(t, c.timeout, j.Timeout, c.id)
	}

	// The handler runs under the queue's timeout.
	deadlines := make(chan time.Duration, 10)
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		if j.ID == plain.ID {
			dl, _ := ctx.Deadline()
			deadlines <- time.Until(dl)
		}
		return nil, nil
	}})
	select {
	case left := <-deadlines:
		require.Greater(t, left, time.Duration(0))
		require.LessOrEqual(t, left, timeout)
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not run")
	}

	// Removed: the Client's own defaults again. Counted on a client of its own, a publish
	// whose count is cached makes one round trip. A layout change anywhere in this process
	// (publish.Relayout: parallel tests make them) drops every cached route, so the two
	// publishes are made again until none came between them. That client's clock stands
	// still, so its route cannot age out either. Under go test -count=3 with two CPU hogs the
	// counted publish read the route again (2 round trips: hget+hgetall, evalsha).
	minus, zero := -1, time.Duration(0)
	st, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{MaxRetries: &minus, Timeout: &zero})
	require.NoError(t, err)
	require.Nil(t, st.MaxRetries)
	require.Zero(t, st.Timeout)
	// This process's Client read them before: the change drops its cached copy.
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	require.Equal(t, pipeline.DefaultMaxRetries, j.MaxRetries)
	rdb := newRedis(t)
	counted := redistest.CountCommands(rdb.(interface{ AddHook(redis.Hook) }))
	still := time.Now()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Now: func() time.Time { return still }})
	require.NoError(t, err)
	for {
		layouts := pipeline.Layouts()
		j, err = client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
		require.NoError(t, err)
		require.Equal(t, pipeline.DefaultMaxRetries, j.MaxRetries)
		require.Zero(t, j.Timeout)
		counted.Record()
		trips := counted.During(func() {
			_, err = client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
		})
		cmds := counted.Take()
		require.NoError(t, err)
		if pipeline.Layouts() == layouts {
			require.EqualValues(t, 1, trips, "commands: %q", cmds)
			return
		}
	}
}
