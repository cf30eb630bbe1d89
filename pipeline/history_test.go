package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// A worker's outcomes fill its queue's history in Redis: completed, retried and dead jobs,
// with a queue wait and an execution time for each attempt, at both resolutions.
func TestWorkerHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.startWorker(t, pipeline.WorkerConfig{HistoryInterval: 20 * time.Millisecond}, map[string]pipeline.HandlerFunc{
		"ok": echo,
		"flaky": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			if j.Attempt == 1 {
				return nil, errors.New("first attempt fails")
			}
			return nil, nil
		},
		"fail": func(context.Context, *pipeline.Job) ([]byte, error) { return nil, errors.New("always") },
	})
	var ids []string
	for range 5 {
		j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "ok"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "flaky"})
	require.NoError(t, err)
	ids = append(ids, j.ID)
	dead, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "fail"}, pipeline.WithMaxRetries(0))
	require.NoError(t, err)
	for _, id := range ids {
		b.waitStatus(t, id, status.Completed)
	}
	b.waitStatus(t, dead.ID, status.Failed)

	// The last bucket History reads is the last whole one: poll until the writes' bucket is.
	// (The coarse resolution is written by the same flush: TestHistoryMergedAcrossWorkers.)
	var h *pipeline.History
	var total pipeline.HistoryPoint // for the message
	require.Eventually(t, func() bool {
		h, err = b.insp.History(ctx, b.queue, pipeline.HistoryStepFine, time.Now().Add(-time.Hour))
		require.NoError(t, err)
		total = h.Total
		return h.Total.Completed == 6 && h.Total.Failed == 1 && h.Total.Retried == 1
	}, 30*time.Second, 50*time.Millisecond, "history: %+v", &total)
	require.InDelta(t, int(pipeline.HistorySpanFine/pipeline.HistoryStepFine), len(h.Points), 1, "an hour of points, empty ones too")
	require.Equal(t, int64(8), h.Total.Exec.Count, "every attempt's execution time")
	require.Equal(t, int64(8), h.Total.Wait.Count, "every attempt's queue wait")
	require.Positive(t, h.Total.Wait.P99)
	require.LessOrEqual(t, h.Total.Wait.P50, h.Total.Wait.P99)

	// Another queue's history is empty; all queues' holds this one's.
	other, err := b.insp.History(ctx, b.queue+"-other", pipeline.HistoryStepFine, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, other.Total.Completed)
	all, err := b.insp.History(ctx, "", pipeline.HistoryStepFine, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.GreaterOrEqual(t, all.Total.Completed, int64(6))
}
