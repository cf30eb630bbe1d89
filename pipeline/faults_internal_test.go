package pipeline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/status"
)

// failFinish makes the finish script's writes fail while on, as Redis refusing them would,
// and leaves every other command alone (a producer can still publish, the worker can read).
type failFinish struct{ on atomic.Bool }

func (h *failFinish) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failFinish) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (h *failFinish) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.on.Load() {
			return next(ctx, cmds)
		}
		for _, c := range cmds {
			if jobstate.IsFinishCall(c.Args()) {
				err := errors.New("simulated: writes refused")
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// While its outcomes cannot be written, a worker reads no new jobs: they would only run to
// wait for writes that may not come back soon. Before, reading went on into the free slots.
func TestWorkerStopsReadingWhileWritesFail(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &failFinish{}
	rdb.AddHook(hook)
	producer, err := NewClient(srv.Client(t), ClientConfig{})
	require.NoError(t, err)
	queue := redistest.UniqueName(t)
	ctx := t.Context()

	var ran atomic.Int64
	first := make(chan struct{})
	w, err := NewWorker(rdb, WorkerConfig{Queues: []string{queue}, Concurrency: 10,
		Logger: zerolog.New(zerolog.NewTestWriter(t))})
	require.NoError(t, err)
	w.Handle("t", func(context.Context, *Job) ([]byte, error) {
		if ran.Add(1) == 1 {
			close(first)
		}
		return nil, nil
	})
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	<-w.Ready()

	hook.on.Store(true)
	j, err := producer.Enqueue(ctx, queue, Task{Type: "t"})
	require.NoError(t, err)
	<-first // its outcome cannot be written: the worker pauses reading
	// Gate on the pause itself (set with the subscriber's Pause, under the loop's lock) and on the end of
	// any read sent before it: from then on no read may start, so not one more job may run.
	// Gating on the completer's failure alone raced the Pause call: a loaded machine ran a
	// read in between and took a job (TestWorkerStopsReadingWhileWritesFail, CI at 5fd75cc).
	require.Eventually(t, func() bool {
		troubled, idle := w.loop.Load().Troubled()
		return troubled && idle
	}, 5*time.Second, time.Millisecond)
	var later []string
	for range 5 {
		j, err := producer.Enqueue(ctx, queue, Task{Type: "t"})
		require.NoError(t, err)
		later = append(later, j.ID)
	}
	// Nothing would tell us that a read did not happen; give the reader ample time to take
	// the jobs (it takes them within milliseconds when it reads).
	time.Sleep(500 * time.Millisecond)
	require.EqualValues(t, 1, ran.Load(), "no new job ran while outcomes could not be written")

	hook.on.Store(false)
	for _, id := range append(later, j.ID) {
		require.Eventually(t, func() bool {
			got, err := producer.Get(ctx, queue, id)
			return err == nil && got.Status == status.Completed
		}, 10*time.Second, 10*time.Millisecond)
	}
	require.EqualValues(t, 6, ran.Load())
}
