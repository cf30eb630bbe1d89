package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// progressOf is a job's report as (percent, message), or (-1, "") when it shows none.
func progressOf(j *pipeline.Job) (int, string) {
	if j.Reported == nil {
		return -1, ""
	}
	return j.Reported.Percent, j.Reported.Message
}

// A handler's progress is in the job while it runs (Get), Follow sees each report and the
// final status, and the completed job keeps its last report, held by the rate limit and
// written before the outcome. On a standalone server, and on a cluster with a queue of three
// partitions (Follow finds the job's partition, whose events channel is on its own shard).
func TestProgressWhileRunning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		rdb        func(t *testing.T) redis.UniversalClient
		partitions int
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }, 1},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{rdb: tc.rdb(t)})
			ctx := t.Context()
			if tc.partitions > 1 {
				_, err := b.insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{Partitions: tc.partitions})
				require.NoError(t, err)
			}
			step := make(chan struct{})
			var mu sync.Mutex // the handler's errors, read after the job ended
			var handlerErrs []error
			var looped time.Duration // how long the 80 reports took
			w, _ := b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour}, map[string]pipeline.HandlerFunc{
				"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
					mu.Lock()
					defer mu.Unlock()
					handlerErrs = append(handlerErrs, j.Progress(ctx, 10, "first"))
					select { // the test saw 10
					case <-step:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
					// Within the interval of the first: held, and only the last is written.
					start := time.Now()
					for i := 11; i <= 90; i++ {
						handlerErrs = append(handlerErrs, j.Progress(ctx, i, "step\nmany"))
					}
					looped = time.Since(start)
					return []byte(`"ok"`), nil
				},
			})
			j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
			require.NoError(t, err)

			type seen struct {
				status status.Status
				pct    int
				msg    string
			}
			var got []seen
			released := false
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			err = b.client.Follow(fctx, b.queue, j.ID, func(j *pipeline.Job) error {
				pct, msg := progressOf(j)
				got = append(got, seen{j.Status, pct, msg})
				// Once: the start mark may come after the first report (queued, then
				// in_progress, both at 10), and a second close would panic.
				if pct == 10 && !released {
					released = true
					g, err := b.client.Get(ctx, b.queue, j.ID)
					require.NoError(t, err)
					require.Equal(t, 10, g.Reported.Percent, "Get shows it too")
					require.Equal(t, "first", g.Reported.Message)
					require.False(t, g.Reported.At.IsZero())
					close(step)
				}
				return nil
			})
			require.NoError(t, err)
			last := got[len(got)-1]
			require.Equal(t, seen{status.Completed, 90, "step many"}, last,
				"the last report, held by the rate limit, is written before the outcome (one line)")
			saw10 := false
			for _, g := range got {
				saw10 = saw10 || g.pct == 10 && g.msg == "first" && !g.status.Final()
			}
			require.True(t, saw10, "%v", got) // queued or in_progress: the start mark may come after it
			mu.Lock()
			for _, e := range handlerErrs {
				require.NoError(t, e)
			}
			mu.Unlock()
			// The first and the last; between them at most one an interval while the loop ran
			// (its first report writes when the test took an interval to see 10, and a write
			// slower than an interval lets the next one through: a loaded machine).
			writes := pipeline.ProgressWrites(w)
			mu.Lock()
			bound := 3 + int64(looped/pipeline.ProgressInterval)
			mu.Unlock()
			require.True(t, writes >= 2 && writes <= bound, "81 reports in %v, %d writes (at most %d)", looped, writes, bound)

			done, err := b.client.Get(ctx, b.queue, j.ID)
			require.NoError(t, err)
			require.Equal(t, 90, done.Reported.Percent, "a completed job keeps its last report")
		})
	}
}

// A chatty handler writes at most one report per ProgressInterval (and its last one at the
// end), whatever it calls: the bound is measured against the time it ran, so a loaded machine
// only makes fewer writes.
func TestProgressRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	var mu sync.Mutex // ran and calls, read after the job ended
	var ran time.Duration
	var calls int
	w, _ := b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour}, map[string]pipeline.HandlerFunc{
		"chatty": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			start := time.Now()
			for time.Since(start) < 3*pipeline.ProgressInterval {
				calls++
				if err := j.Progress(ctx, calls%100, "busy"); err != nil {
					return nil, err
				}
				time.Sleep(time.Millisecond) // the rate, not the CPU, is under test
			}
			ran = time.Since(start)
			return nil, j.Progress(ctx, 100, "done")
		},
	})
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "chatty"})
	require.NoError(t, err)
	done, err := b.client.Wait(ctx, b.queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, status.Completed, done.Status, done.LastError)
	writes := pipeline.ProgressWrites(w)
	mu.Lock()
	defer mu.Unlock()
	require.LessOrEqual(t, writes, int64(ran/pipeline.ProgressInterval)+2,
		"%d calls in %s: at most one write per interval, and the last", calls, ran)
	require.GreaterOrEqual(t, writes, int64(2))
	pct, msg := progressOf(done)
	require.Equal(t, 100, pct)
	require.Equal(t, "done", msg)
}

// A handler whose job was canceled under it gets ErrProgressRefused and writes nothing: the
// canceled job keeps the report made before the cancel. Out-of-range percents are ErrInvalid,
// and a Job not handed by a Worker reports nothing, without error.
func TestProgressFencedAndChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	reported := make(chan struct{})
	canceled := make(chan struct{})
	var after, invalid error
	var mu sync.Mutex
	b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour}, map[string]pipeline.HandlerFunc{
		"t": func(hctx context.Context, j *pipeline.Job) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			invalid = j.Progress(hctx, 101, "")
			if err := j.Progress(hctx, 40, "before"); err != nil {
				return nil, err
			}
			close(reported)
			select {
			case <-canceled:
			case <-time.After(30 * time.Second):
			}
			// The handler's context ends at its next lease renewal. Its next report is held
			// (within the interval of the last) and refused when written; every report
			// after that is refused at once.
			deadline := time.Now().Add(30 * time.Second)
			for after == nil && time.Now().Before(deadline) {
				after = j.Progress(context.Background(), 80, "after")
				time.Sleep(10 * time.Millisecond)
			}
			return nil, nil
		},
	})
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	<-reported
	// Once started: a job canceled before its start mark counts no attempt, and shows no
	// report of one.
	b.waitStatus(t, j.ID, status.InProgress)
	require.NoError(t, b.client.Cancel(ctx, b.queue, j.ID))
	close(canceled)
	mu.Lock()
	defer mu.Unlock()
	require.ErrorIs(t, invalid, pipeline.ErrInvalid)
	require.ErrorIs(t, after, pipeline.ErrProgressRefused)
	got, err := b.client.Get(ctx, b.queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, status.Canceled, got.Status)
	pct, msg := progressOf(got)
	require.Equal(t, 40, pct)
	require.Equal(t, "before", msg)

	require.NoError(t, (&pipeline.Job{ID: "x"}).Progress(ctx, 50, "a test's job"))
}

// A retry shows no progress of the attempt before once the next attempt runs, until that one
// reports: Reported belongs to the attempt Attempt counts.
func TestProgressBelongsToItsAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	second := make(chan struct{})
	release := make(chan struct{})
	b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour}, map[string]pipeline.HandlerFunc{
		"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			if j.Attempt == 1 {
				_ = j.Progress(ctx, 30, "first attempt")
				return nil, errors.New("again")
			}
			close(second)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		},
	})
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithMaxRetries(1))
	require.NoError(t, err)
	<-second
	got := b.waitStatus(t, j.ID, status.InProgress) // the start mark of attempt 2
	require.Equal(t, 2, got.Attempt)
	require.Nil(t, got.Reported, "attempt 2 reported nothing yet")
	close(release)
	done, err := b.client.Wait(ctx, b.queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, status.Completed, done.Status)
	require.Nil(t, done.Reported, "the completed attempt reported nothing")
}

// A handler that ignores its timeout and goes on reporting after the worker gave up on it is
// refused: no report lands after the attempt's outcome.
func TestProgressAfterTimeoutIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	refused := make(chan error, 1)
	b.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour}, map[string]pipeline.HandlerFunc{
		"stubborn": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			deadline := time.Now().Add(30 * time.Second)
			for i := 0; time.Now().Before(deadline); i++ {
				if err := j.Progress(context.Background(), i%100, "ignoring my context"); err != nil {
					refused <- err
					return nil, err
				}
				time.Sleep(5 * time.Millisecond)
			}
			refused <- nil
			return nil, nil
		},
	})
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "stubborn"},
		pipeline.WithTimeout(50*time.Millisecond), pipeline.WithMaxRetries(0))
	require.NoError(t, err)
	require.ErrorIs(t, <-refused, pipeline.ErrProgressRefused)
	done, err := b.client.Wait(ctx, b.queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, status.Failed, done.Status)
	require.Contains(t, done.LastError, "timed out")
	before := done.Reported
	time.Sleep(2 * pipeline.ProgressInterval) // a stray trailing write would land by now
	after, err := b.client.Get(ctx, b.queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, before, after.Reported, "nothing written after the outcome")
}
