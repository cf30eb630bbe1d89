package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// A snoozed job is scheduled again without counting the attempt or recording an error, says
// why it waits, keeps its retries, and runs again when due; a failed attempt's backoff says
// "retry" instead.
func TestSnooze(t *testing.T) {
	t.Parallel()
	onBoth(t, testSnooze)
}

func testSnooze(t *testing.T, rdb redis.UniversalClient) {
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithMaxRetries(1))
	require.NoError(t, err)
	var calls atomic.Int32
	var sawAttempt [4]int
	h := map[string]pipeline.HandlerFunc{"t": func(_ context.Context, job *pipeline.Job) ([]byte, error) {
		n := calls.Add(1)
		sawAttempt[n-1] = job.Attempt
		switch n {
		case 1:
			return nil, pipeline.Snooze(time.Millisecond)
		case 2:
			return nil, fmt.Errorf("wrapped: %w", pipeline.RetryAt(time.Now().Add(-time.Hour)))
		case 3:
			return nil, errors.New("a real failure")
		}
		return []byte(`"done"`), nil
	}}
	// No scheduler first: the snoozed job stays scheduled for the test to look at.
	_, stop := b.startWorker(t, pipeline.WorkerConfig{DisableScheduler: true}, h)
	got := b.waitStatus(t, j.ID, status.Scheduled)
	require.Equal(t, "snooze", got.ScheduledFor)
	require.Equal(t, 1, got.Snoozes)
	require.Zero(t, got.Attempt, "a snooze is no attempt")
	require.Empty(t, got.LastError)
	require.NoError(t, stop())

	b.startWorker(t, pipeline.WorkerConfig{}, h)
	got = b.waitStatus(t, j.ID, status.Completed)
	require.EqualValues(t, 4, calls.Load())
	// Two snoozes (attempt 1 both times), a real failure (attempt 1, retried), then done (2).
	require.Equal(t, [4]int{1, 1, 1, 2}, sawAttempt)
	require.Equal(t, 2, got.Attempt)
	require.Equal(t, 2, got.Snoozes)
	require.Equal(t, "a real failure", got.LastError)
}

// A job that snoozes forever ends failed once it passes the bound, with the reason.
func TestSnoozeBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	var calls atomic.Int32
	b.startWorker(t, pipeline.WorkerConfig{MaxSnoozes: 3}, map[string]pipeline.HandlerFunc{
		"t": func(context.Context, *pipeline.Job) ([]byte, error) {
			calls.Add(1)
			return nil, pipeline.Snooze(time.Millisecond)
		}})
	got := b.waitStatus(t, j.ID, status.Failed)
	require.EqualValues(t, 4, calls.Load(), "three snoozes allowed, the fourth fails it")
	require.Contains(t, got.LastError, "snoozed 4 times")
	require.Equal(t, 1, got.Attempt, "the attempt that failed counts")
	st, err := b.client.Stats(t.Context(), b.queue)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Failed)
	require.Zero(t, st.Retried, "snoozes are not retries")
}
