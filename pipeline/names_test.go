package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyspace"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestKeysOfNamesTheKeysJobsUse publishes delayed jobs to a plain and a partitioned queue and
// finds each in the scheduled set and job hash of exactly one of the partitions keyspace.KeysOf names.
func TestKeysOfNamesTheKeysJobsUse(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	for _, partitions := range []int{1, 3} {
		queue := redistest.UniqueName(t)
		client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
		require.NoError(t, err)
		if partitions > 1 {
			x := newPartitioned(t, rdb, queue, partitions)
			client = x.client
		}
		ks := keyspace.KeysOf("", queue, partitions)
		require.Len(t, ks, partitions)
		found := 0
		for range 2 * partitions {
			j, err := client.Enqueue(ctx, queue, pipeline.Task{Type: "t"}, pipeline.WithDelay(time.Hour))
			require.NoError(t, err)
			for _, k := range ks {
				if _, err := rdb.ZScore(ctx, k.Scheduled, j.ID).Result(); err == nil {
					require.EqualValues(t, 1, rdb.Exists(ctx, k.JobPrefix+j.ID).Val(), "job hash of %s", j.ID)
					found++
				}
			}
		}
		require.Equal(t, 2*partitions, found, "every job in exactly one partition's scheduled set")
		require.Equal(t, ks, keyspace.KeysOf(pipeline.DefaultPrefix, queue, partitions))
	}
}

func TestErrorNames(t *testing.T) {
	t.Parallel()
	insp, err := pipeline.NewInspector(redisAt("127.0.0.1:1"), pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = insp.Stats(t.Context(), "q")
	require.Error(t, err)
	require.Equal(t, "unreachable", pipeline.ErrorKind(err))
	require.NotEmpty(t, pipeline.ErrorOp(err), "the failed operation is named")
	require.NotContains(t, pipeline.ErrorMessage(err), "pipeline: ")
	require.Equal(t, "unknown", pipeline.ErrorKind(nil))
}
