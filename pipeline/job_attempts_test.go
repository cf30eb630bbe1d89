package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// A job that fails three times and then succeeds shows four attempts: three retried ones, each
// with its error and worker, and the completed one read from the job itself.
func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	b.startWorker(t, pipeline.WorkerConfig{Name: "hist-worker"}, map[string]pipeline.HandlerFunc{
		"flaky": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			if n := runs.Add(1); n <= 3 {
				return nil, fmt.Errorf("boom %d\nsecond line", n)
			}
			return []byte(`"ok"`), nil
		},
	})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "flaky"}, pipeline.WithMaxRetries(5))
	require.NoError(t, err)
	got := b.waitStatus(t, j.ID, status.Completed)
	require.Len(t, got.Attempts, 4, "%+v", got.Attempts)
	for k, a := range got.Attempts {
		require.Equal(t, k+1, a.Number)
		require.Equal(t, "hist-worker", a.Worker)
		require.False(t, a.StartedAt.IsZero())
		require.False(t, a.EndedAt.Before(a.StartedAt), "attempt %d", a.Number)
		if k < 3 {
			require.Equal(t, status.AttemptRetried, a.Outcome)
			require.Equal(t, fmt.Sprintf("boom %d second line", k+1), a.Error, "newlines made spaces")
			require.False(t, got.Attempts[k+1].StartedAt.Before(a.EndedAt), "attempts follow each other")
		} else {
			require.Equal(t, status.AttemptCompleted, a.Outcome)
			require.Empty(t, a.Error)
			require.Equal(t, got.StartedAt, a.StartedAt)
			require.Equal(t, got.CompletedAt, a.EndedAt)
		}
	}
	// The first publish stays created_at; enqueued_at is the last entry into the stream (the
	// third retry's promotion).
	require.True(t, got.EnqueuedAt.After(got.CreatedAt), "created %s, enqueued %s", got.CreatedAt, got.EnqueuedAt)

	// The wire form: an attempts array, times in unix ms.
	raw, err := json.Marshal(got)
	require.NoError(t, err)
	var w struct {
		Attempts []struct {
			Attempt   int    `json:"attempt"`
			Worker    string `json:"worker"`
			StartedAt int64  `json:"started_at"`
			EndedAt   int64  `json:"ended_at"`
			Outcome   string `json:"outcome"`
			Error     string `json:"error"`
		} `json:"attempts"`
	}
	require.NoError(t, json.Unmarshal(raw, &w))
	require.Len(t, w.Attempts, 4)
	require.Equal(t, "retry", w.Attempts[0].Outcome)
	require.Equal(t, "boom 1 second line", w.Attempts[0].Error)
	require.Equal(t, got.CompletedAt.UnixMilli(), w.Attempts[3].EndedAt)

	// A job that never ran has none, an empty array on the wire.
	idle, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "later"}, pipeline.WithDelay(time.Hour))
	require.NoError(t, err)
	idle, err = b.client.Get(t.Context(), b.queue, idle.ID)
	require.NoError(t, err)
	require.Empty(t, idle.Attempts)
	raw, err = json.Marshal(idle)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"attempts":[]`)
}

// The history keeps the last 20 attempts (MaxAttempts); a job that dies has its last attempt
// in it, with the error, once.
func TestAttemptHistoryBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, pipeline.WorkerConfig{Backoff: pipeline.Backoff{Base: time.Millisecond, Max: 2 * time.Millisecond}},
		map[string]pipeline.HandlerFunc{
			"fail": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
				return nil, fmt.Errorf("fail %d", j.Attempt)
			},
		})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "fail"}, pipeline.WithMaxRetries(24))
	require.NoError(t, err)
	got := b.waitStatus(t, j.ID, status.Failed)
	require.Equal(t, 25, got.Attempt)
	require.Len(t, got.Attempts, pipeline.MaxAttempts)
	for k, a := range got.Attempts {
		require.Equal(t, 6+k, a.Number, "the latest 20")
		require.Equal(t, fmt.Sprintf("fail %d", a.Number), a.Error)
		want := status.AttemptRetried
		if a.Number == 25 {
			want = status.AttemptFailed
		}
		require.Equal(t, want, a.Outcome)
	}
}

// A snoozed attempt is in the history (not counted: the next run has its number too), and a job
// canceled while it runs ends with a canceled attempt.
func TestAttemptHistorySnoozeAndCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	running := make(chan struct{}, 1)
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{
		"nap": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			if runs.Add(1) == 1 {
				return nil, pipeline.Snooze(time.Millisecond)
			}
			running <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "nap"})
	require.NoError(t, err)
	<-running
	got := b.waitStatus(t, j.ID, status.InProgress)
	require.Len(t, got.Attempts, 2, "%+v", got.Attempts)
	require.Equal(t, status.AttemptSnoozed, got.Attempts[0].Outcome)
	require.Equal(t, 1, got.Attempts[0].Number)
	require.Equal(t, status.AttemptRunning, got.Attempts[1].Outcome)
	require.Equal(t, 1, got.Attempts[1].Number, "a snooze is no attempt")
	require.True(t, got.Attempts[1].EndedAt.IsZero())

	require.NoError(t, b.insp.Cancel(t.Context(), b.queue, j.ID))
	got = b.waitStatus(t, j.ID, status.Canceled)
	require.Len(t, got.Attempts, 2)
	require.Equal(t, status.AttemptCanceled, got.Attempts[1].Outcome)
	require.Equal(t, got.CompletedAt, got.Attempts[1].EndedAt)
}

// A replay starts a fresh set of attempts, numbered from 1 again: the history marks where it
// happened, so the second attempt 1 is not read as the first one twice.
func TestAttemptHistoryReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{
		"doomed": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			return nil, fmt.Errorf("run %d", runs.Add(1))
		},
	})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "doomed"}, pipeline.WithMaxRetries(0))
	require.NoError(t, err)
	dead := b.waitStatus(t, j.ID, status.Failed)
	require.Len(t, dead.Attempts, 1)
	require.NoError(t, b.insp.Replay(t.Context(), b.queue, j.ID))
	replayed, err := b.client.Get(t.Context(), b.queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, 0, replayed.Attempt, "a replay counts from 1 again")
	require.Eventually(t, func() bool { return runs.Load() == 2 }, 10*time.Second, 5*time.Millisecond)
	got := b.waitStatus(t, j.ID, status.Failed)
	require.Len(t, got.Attempts, 3, "%+v", got.Attempts)
	first, mark, second := got.Attempts[0], got.Attempts[1], got.Attempts[2]
	require.Equal(t, status.AttemptFailed, first.Outcome)
	require.Equal(t, "run 1", first.Error)
	require.Equal(t, "replayed", mark.Outcome)
	require.Equal(t, 0, mark.Number, "the mark is no attempt")
	require.False(t, mark.EndedAt.Before(first.EndedAt), "marked after the death it undid")
	require.Equal(t, mark.StartedAt, mark.EndedAt)
	require.Empty(t, mark.Worker)
	require.Equal(t, status.AttemptFailed, second.Outcome)
	require.Equal(t, 1, second.Number)
	require.Equal(t, "run 2", second.Error)
	require.False(t, second.StartedAt.Before(mark.EndedAt))
}

// Completed and canceled jobs are listed newest first, page by page, while retained.
func TestListCompletedAndCanceled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{
		"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) { return nil, nil },
	})
	jobs := b.enqueue(t, 7, nil)
	for _, j := range jobs {
		b.waitStatus(t, j.ID, status.Completed)
	}
	got, pages := listAll(t, b.insp, b.queue, status.Completed, 3)
	require.Equal(t, 3, pages)
	require.ElementsMatch(t, ids(jobs), ids(got))
	for k := 1; k < len(got); k++ {
		require.False(t, got[k].CompletedAt.After(got[k-1].CompletedAt), "newest first")
	}

	var canceled []*pipeline.Job
	for range 4 {
		j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "t"}, pipeline.WithDelay(time.Hour))
		require.NoError(t, err)
		require.NoError(t, b.insp.Cancel(t.Context(), b.queue, j.ID))
		canceled = append([]*pipeline.Job{j}, canceled...)
	}
	got, pages = listAll(t, b.insp, b.queue, status.Canceled, 2)
	require.Equal(t, 2, pages)
	require.ElementsMatch(t, ids(canceled), ids(got))

	// A job whose record expired is skipped.
	require.NoError(t, b.rdb.Del(t.Context(), b.q.Job(got[0].ID)).Err())
	p, err := b.insp.List(t.Context(), b.queue, status.Canceled, pipeline.Page{})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 3)
	require.Empty(t, p.Next)
	raw, err := json.Marshal(p)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"next":""`)
	require.False(t, errors.Is(err, pipeline.ErrInvalid))
}

// A partitioned queue's completed and canceled jobs are listed partition after partition, on
// a standalone server and on a cluster (each partition's index in its own slot).
func TestListFinishedPartitioned(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"Standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"Cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			x := newPartitioned(t, tc.rdb(t), redistest.UniqueName(t), 3)
			x.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{
				"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) { return nil, nil },
			})
			var done, canceled []string
			for k := range 9 {
				j, err := x.client.Enqueue(t.Context(), x.queue, pipeline.Task{Type: "t"}, pipeline.WithID(fmt.Sprintf("done-%d", k)))
				require.NoError(t, err)
				done = append(done, j.ID)
				c, err := x.client.Enqueue(t.Context(), x.queue, pipeline.Task{Type: "t"}, pipeline.WithID(fmt.Sprintf("cancel-%d", k)),
					pipeline.WithDelay(time.Hour))
				require.NoError(t, err)
				require.NoError(t, x.client.Cancel(t.Context(), x.queue, c.ID))
				canceled = append(canceled, c.ID)
			}
			for _, id := range done {
				x.waitStatus(t, id, status.Completed)
			}
			got, _ := listAll(t, x.insp, x.queue, status.Completed, 2)
			require.ElementsMatch(t, done, ids(got))
			got, _ = listAll(t, x.insp, x.queue, status.Canceled, 4)
			require.ElementsMatch(t, canceled, ids(got))
		})
	}
}
