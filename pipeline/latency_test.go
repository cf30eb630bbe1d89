package pipeline_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// A queue's latency (QueueStats.LatencyMS) is the age of its oldest job ready to run, by
// Redis's clock: it is the published job's entry's age while no worker took it (bounded by
// Redis's clock read around the call, no sleep), the largest over partitions, in Stats and
// Queues alike, and 0 once a worker was handed the job. A delayed job is not ready: 0.
func TestQueueLatency(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = insp.CreateQueue(ctx, "parts", pipeline.QueueOptions{Partitions: 3})
	require.NoError(t, err)
	clock := func() int64 {
		now, err := rdb.Time(ctx).Result()
		require.NoError(t, err)
		return now.UnixMilli()
	}
	// entryMS is the time of job's stream entry (its id's milliseconds).
	entryMS := func(queue, id string) int64 {
		j, err := insp.Get(ctx, queue, id)
		require.NoError(t, err)
		var ms, seq int64
		_, err = fmt.Sscanf(j.Entry, "%d-%d", &ms, &seq)
		require.NoError(t, err, j.Entry)
		return ms
	}
	// latency reads queue's latency by Stats and by Queues, and checks it is the age of the
	// entry at ms by Redis's clock (0 for none).
	latency := func(queue string, ms int64) int64 {
		t.Helper()
		before := clock()
		st, err := insp.Stats(ctx, queue)
		require.NoError(t, err)
		all, err := insp.Queues(ctx)
		require.NoError(t, err)
		after := clock()
		var fromQueues int64 = -1
		for _, s := range all {
			if s.Queue == queue {
				fromQueues = s.LatencyMS
			}
		}
		for _, got := range []int64{st.LatencyMS, fromQueues} {
			if ms == 0 {
				require.Zero(t, got, queue)
				continue
			}
			require.GreaterOrEqual(t, got, before-ms, queue)
			require.LessOrEqual(t, got, after-ms, queue)
		}
		return st.LatencyMS
	}

	_, err = client.Enqueue(ctx, "later", pipeline.Task{Type: "t"}, pipeline.WithDelay(time.Hour))
	require.NoError(t, err)
	latency("later", 0)

	// Jobs in every partition: the oldest of all is the queue's.
	var first string
	for k := range 6 {
		j, err := client.Enqueue(ctx, "parts", pipeline.Task{Type: "t"})
		require.NoError(t, err)
		if k == 0 {
			first = j.ID
		}
	}
	oldest := entryMS("parts", first)
	// Redis's clock past the entry's millisecond, so that its age is above 0.
	for clock() <= oldest {
	}
	l1 := latency("parts", oldest)
	require.Positive(t, l1)
	require.GreaterOrEqual(t, latency("parts", oldest), l1, "it only grows while no worker reads")

	// A worker handed every job: no job is ready, the latency is 0.
	n, err := insp.Partitions(ctx, "parts")
	require.NoError(t, err)
	for i := range n {
		q := keys.New(keys.DefaultPrefix, keys.PartitionName("parts", i, n))
		require.NoError(t, rdb.XGroupCreateMkStream(ctx, q.Stream(), keys.Group, "0").Err())
		err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "c",
			Streams: []string{q.Stream(), ">"}, Block: -1}).Err()
		if !errors.Is(err, redis.Nil) { // a partition with no job
			require.NoError(t, err)
		}
	}
	latency("parts", 0)
}
