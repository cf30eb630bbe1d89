package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// A worker stamps what it stores by its own clock (WorkerConfig.Now), and Redis's clock
// decides when a retry is due: a worker an hour ahead stores the attempt's end an hour ahead
// and its retry due an hour ahead, and the retry waits for it; a worker an hour behind, with a
// backoff of an hour, stores a retry that is due at once by Redis's clock, and it runs.
func TestWorkerClockStampsRetry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		step    time.Duration
		backoff time.Duration
	}{
		{"stepped forward", time.Hour, 100 * time.Millisecond},
		{"stepped back", -time.Hour, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := t.Context()
			j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithMaxRetries(3))
			require.NoError(t, err)
			h := map[string]pipeline.HandlerFunc{"t": func(_ context.Context, job *pipeline.Job) ([]byte, error) {
				if job.Attempt == 1 {
					return nil, errors.New("first attempt fails")
				}
				return nil, nil
			}}
			b.startWorker(t, pipeline.WorkerConfig{
				Now:     func() time.Time { return time.Now().Add(tc.step) },
				Backoff: pipeline.Backoff{Base: tc.backoff, Max: tc.backoff},
			}, h)
			var got *pipeline.Job
			if tc.step > 0 {
				got = b.waitStatus(t, j.ID, status.Scheduled)
				// Read now, after the attempt: a due time by the true clock would be before it.
				require.Greater(t, time.Until(got.RunAt), tc.step-time.Minute,
					"the retry is due by the worker's clock, an hour ahead")
			} else {
				got = b.waitStatus(t, j.ID, status.Completed)
				require.Equal(t, 2, got.Attempt, "the retry ran at once: its backoff of an hour ended by the worker's clock")
			}
			require.NotEmpty(t, got.Attempts)
			first := got.Attempts[0]
			require.Equal(t, 1, first.Number)
			// The attempt's end was stored by the worker's clock; by the true one it is at most
			// a minute old (the test's bound, never reached), an hour off by the worker's.
			off := time.Until(first.EndedAt)
			require.InDelta(t, tc.step.Seconds(), off.Seconds(), time.Minute.Seconds(),
				"attempt 1 ended at %s, %s from now", first.EndedAt, off)
			if tc.step > 0 {
				// The retry is due the backoff (with its jitter, capped at Max) after the end
				// the worker stored, +1 ms.
				due := got.RunAt.Sub(first.EndedAt)
				require.Greater(t, due, time.Duration(0))
				require.LessOrEqual(t, due, tc.backoff+time.Millisecond)
			}
		})
	}
}

// A running job's start is written after the flush interval by the monotonic clock: a worker
// clock stepped back an hour once the start is stamped does not hold it unwritten for the hour
// (the job would read queued while it runs).
func TestWorkerClockStepBackWritesStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	var off atomic.Int64
	release := make(chan struct{})
	h := map[string]pipeline.HandlerFunc{"t": func(context.Context, *pipeline.Job) ([]byte, error) {
		off.Store(int64(-time.Hour)) // the start is stamped; its write waits a second yet
		<-release
		return nil, nil
	}}
	b.startWorker(t, pipeline.WorkerConfig{
		Now:              func() time.Time { return time.Now().Add(time.Duration(off.Load())) },
		FlushInterval:    time.Second,
		DisableHistory:   true,
		DisableHeartbeat: true,
	}, h)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the worker's stop, which waits for the handler
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	got := b.waitStatus(t, j.ID, status.InProgress)
	free()
	require.Less(t, time.Until(got.StartedAt), time.Minute, "the start stamped before the step")
	b.waitStatus(t, j.ID, status.Completed)
}
