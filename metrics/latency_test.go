package metrics_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/metrics"
	"github.com/conveyorq/conveyor/pipeline"
)

// conveyor_queue_latency_seconds is the age of the queue's oldest job ready to run, by Redis's
// clock (bounded by Redis's clock read around the scrape: no sleep), and 0 once a worker was
// handed it. (Before, there was no such gauge.)
func TestQueueCollectorLatency(t *testing.T) {
	t.Parallel()
	prefix := redistest.UniqueName(t)
	rdb := redistest.Client(t)
	ctx := t.Context()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	clock := func() int64 {
		now, err := rdb.Time(ctx).Result()
		require.NoError(t, err)
		return now.UnixMilli()
	}
	scrape := func() float64 {
		qc, err := metrics.NewQueueCollector(insp, metrics.QueueCollectorConfig{})
		require.NoError(t, err)
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(qc))
		return value(t, reg, "conveyor_queue_latency_seconds", "queue", "a")
	}
	j, err := client.Enqueue(ctx, "a", pipeline.Task{Type: "t"})
	require.NoError(t, err)
	var ms, seq int64
	_, err = fmt.Sscanf(j.Entry, "%d-%d", &ms, &seq)
	require.NoError(t, err)
	for clock() <= ms { // Redis's clock past the entry's millisecond: an age above 0
	}
	before := clock()
	got := scrape()
	after := clock()
	require.GreaterOrEqual(t, got, float64(before-ms)/1000)
	require.LessOrEqual(t, got, float64(after-ms)/1000)
	require.Positive(t, got)

	q := keys.New(prefix, "a")
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, q.Stream(), keys.Group, "0").Err())
	require.NoError(t, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "c",
		Streams: []string{q.Stream(), ">"}, Block: -1}).Err())
	require.Zero(t, scrape(), "the job was handed to a worker")
}
