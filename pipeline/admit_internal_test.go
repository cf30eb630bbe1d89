package pipeline

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/status"
)

// A worker that ran jobs of many limit keys forgets the instances it holds nothing of, in
// memory and in its lease record, once they sit unused: per-key limits (a key per tenant)
// must not make a long-lived worker's leases grow with every key it ever saw. Its spare slots
// go back meanwhile, and none of a key is left taken.
func TestLeaseForgetsIdleInstances(t *testing.T) {
	t.Parallel()
	rdb, queue, c := limitedQueue(t, Limit{PerKey: true, Concurrency: 3})
	ctx := t.Context()

	w, err := NewWorker(rdb, WorkerConfig{Queues: []string{queue}, Concurrency: 10,
		Logger: zerolog.New(zerolog.NewTestWriter(t))})
	require.NoError(t, err)
	w.Handle("t", func(context.Context, *Job) ([]byte, error) { return nil, nil })
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	<-w.Ready()

	const n = 40
	ids := make([]string, n)
	for k := range ids {
		j, err := c.Enqueue(ctx, queue, Task{Type: "t"}, WithLimitKey(fmt.Sprintf("tenant-%d", k)))
		require.NoError(t, err)
		ids[k] = j.ID
	}
	for _, id := range ids {
		require.Eventually(t, func() bool {
			j, err := c.Get(ctx, queue, id)
			return err == nil && j.Status == status.Completed
		}, 20*time.Second, 5*time.Millisecond)
	}
	b := w.loop.Load().Leases.Load()
	q := keys.New(keys.DefaultPrefix, queue)
	require.Eventually(t, func() bool {
		return b.Instances(q) == 0
	}, 20*time.Second, 10*time.Millisecond, "the worker forgets the keys it holds nothing of")
	require.Eventually(t, func() bool {
		n, err := rdb.Exists(ctx, q.LimitPrefix()+"hs:"+b.Holder()).Result()
		return err == nil && n == 0
	}, 20*time.Second, 10*time.Millisecond, "its lease record forgets them")
	for k := range n {
		got, err := rdb.SCard(ctx, q.LimitPrefix()+"c:qk:"+fmt.Sprintf("tenant-%d", k)).Result()
		if err != nil && err != redis.Nil {
			require.NoError(t, err)
		}
		require.Zero(t, got, "tenant-%d's slots back", k)
	}
}

// limitedQueue makes a queue of the test's own with limit l, and a Client of its Redis.
func limitedQueue(t *testing.T, l Limit) (redis.UniversalClient, string, *Client) {
	t.Helper()
	rdb := redistest.Client(t)
	queue := redistest.UniqueName(t)
	c, err := NewClient(rdb, ClientConfig{})
	require.NoError(t, err)
	in, err := NewInspector(rdb, InspectorConfig{})
	require.NoError(t, err)
	_, err = in.CreateQueue(t.Context(), queue, QueueOptions{})
	require.NoError(t, err)
	require.NoError(t, in.SetLimit(t.Context(), queue, l))
	return rdb, queue, c
}
