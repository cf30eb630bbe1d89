package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/pipeline/pipelinetest"
)

// TestWorkerFollowsPartitionChange: a running worker reads the partitions of its queue's new
// count by itself, 1 -> 3 -> 1, without a restart: every job published after each change
// (to the new layout) runs on it, a delayed one too (the scheduler follows). Before, the
// worker kept reading the partitions it started with, and those jobs waited for a restart.
// A job of another queue of the worker, running during the change, is put back as on a
// shutdown (ShutdownTimeout) and runs again on the same attempt.
func TestWorkerFollowsPartitionChange(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	queue, other := redistest.UniqueName(t), redistest.UniqueName(t)+"-other"
	x := newPartitioned(t, rdb, queue, 1)

	var ran sync.Map // job id -> attempt
	var otherRuns atomic.Int32
	otherStarted := make(chan struct{})
	startWorkerOn(t, rdb, pipeline.WorkerConfig{Queues: []string{queue, other}, Concurrency: 4,
		Retention: pipeline.RetainNone, MinRetention: time.Millisecond, ShutdownTimeout: 500 * time.Millisecond},
		map[string]pipeline.HandlerFunc{
			"t": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
				ran.Store(j.ID, j.Attempt)
				return nil, nil
			},
			"hold": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
				if otherRuns.Add(1) == 1 {
					close(otherStarted)
					<-ctx.Done() // held through the change: the worker puts it back
					return nil, ctx.Err()
				}
				ran.Store(j.ID, j.Attempt)
				return nil, nil
			},
		})
	held, err := x.client.Enqueue(ctx, other, pipeline.Task{Type: "hold"})
	require.NoError(t, err)
	<-otherStarted

	publish := func(round string) []string {
		var ids []string
		for i := range 30 {
			j, err := x.client.Enqueue(ctx, queue, pipeline.Task{Type: "t"}, pipeline.WithID(fmt.Sprintf("%s-%d", round, i)))
			require.NoError(t, err)
			ids = append(ids, j.ID)
		}
		j, err := x.client.Enqueue(ctx, queue, pipeline.Task{Type: "t"}, pipeline.WithID(round+"-delayed"), pipeline.WithDelay(50*time.Millisecond))
		require.NoError(t, err)
		return append(ids, j.ID)
	}
	allRan := func(what string, ids ...string) {
		t.Helper()
		require.Eventually(t, func() bool {
			for _, id := range ids {
				if _, ok := ran.Load(id); !ok {
					return false
				}
			}
			return true
		}, 60*time.Second, 5*time.Millisecond, "%s: not every job ran on the running worker", what)
	}
	allRan("before any change", publish("p1")...)
	for _, n := range []int{3, 1} {
		// A change is refused while the last jobs' finished states are being written.
		require.Eventually(t, func() bool {
			_, err := x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: n})
			if err != nil && !errors.Is(err, pipeline.ErrQueueBusy) {
				require.NoError(t, err)
			}
			return err == nil
		}, 30*time.Second, 10*time.Millisecond)
		allRan(fmt.Sprintf("after the change to %d partitions", n), publish(fmt.Sprintf("p%d", n))...)
	}
	allRan("the job of the other queue", held.ID)
	attempt, _ := ran.Load(held.ID)
	require.Equal(t, 1, attempt, "the job put back during the change ran again on the same attempt")
	require.Equal(t, int32(2), otherRuns.Load())
	require.Eventually(t, func() bool {
		st, err := x.client.Stats(ctx, queue)
		require.NoError(t, err)
		return st.Queued+st.InProgress+st.Scheduled == 0
	}, 30*time.Second, 5*time.Millisecond, "nothing left in the new layout")
}

// TestWorkerKeepsPartitionsOnBadCount: a stored partition count the worker cannot use (here
// 0) is logged, once, and the worker keeps reading the partitions it has; once the count is
// usable again (the same as before) its jobs run on it as ever, with no new session.
func TestWorkerKeepsPartitionsOnBadCount(t *testing.T) {
	t.Parallel()
	// A server of its own: the unusable count below is in the default prefix's partition
	// counts, where every parallel test that lists the known queues (Find, Queues) would read it
	// and fail, as three did once on a loaded machine.
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	queue := redistest.UniqueName(t)
	x := newPartitioned(t, rdb, queue, 1)
	var logs lockedBuffer
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{queue}, Logger: zerolog.New(&logs)})
	require.NoError(t, err)
	ran := make(chan string, 1)
	w.Handle("t", func(_ context.Context, j *pipeline.Job) ([]byte, error) { ran <- j.ID; return nil, nil })
	pipelinetest.StartWorker(t, w)

	require.NoError(t, rdb.HSet(ctx, keys.Partitions(keys.DefaultPrefix), queue, "0").Err())
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "partition count is unusable") },
		30*time.Second, 10*time.Millisecond, "the worker logs the unusable count")
	require.NoError(t, rdb.HDel(ctx, keys.Partitions(keys.DefaultPrefix), queue).Err())
	j, err := x.client.Enqueue(ctx, queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	select {
	case id := <-ran:
		require.Equal(t, j.ID, id)
	case <-time.After(30 * time.Second):
		t.Fatal("the job never ran")
	}
	require.Equal(t, 1, strings.Count(logs.String(), "partition count is unusable"))
	require.NotContains(t, logs.String(), "following the queue's new partition count")
}

// lockedBuffer is a log sink that the test reads while the worker writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
