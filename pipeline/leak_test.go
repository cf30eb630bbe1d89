package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/leaktest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// A worker that ran (scheduler, recoverer, subscriber, completer, router) leaves no goroutine
// behind once Run returns and its client is closed. Not parallel: parallel tests are paused
// while it runs, so IgnoreCurrent sees a quiet package.
func TestWorkerLeavesNoGoroutines(t *testing.T) {
	srv := redistest.Shared(t)
	before := leaktest.IgnoreCurrent()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	queue := redistest.UniqueName(t)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{queue}, Logger: testLogger(t),
		VisibilityTimeout: time.Second, RecoveryInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	w.Handle("echo", echo)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	j, err := c.Enqueue(t.Context(), queue, pipeline.Task{Type: "echo"})
	require.NoError(t, err)
	delayed, err := c.Enqueue(t.Context(), queue, pipeline.Task{Type: "echo"}, pipeline.WithDelay(50*time.Millisecond))
	require.NoError(t, err)
	for _, id := range []string{j.ID, delayed.ID} {
		require.Eventually(t, func() bool {
			got, err := c.Get(t.Context(), queue, id)
			return err == nil && got.Status == status.Completed
		}, 10*time.Second, 10*time.Millisecond)
	}
	cancel()
	require.NoError(t, <-done)
	require.NoError(t, rdb.Close())
	leaktest.Verify(t, before)
}

// A handler that ignores its context and outlives the worker's shutdown (ShutdownTimeout and
// the router's wait) must not leave its goroutine blocked once it returns: its outcome comes
// after the completer stopped. Before, finish handed it a channel nobody would close. Not
// parallel, for the same reason as TestWorkerLeavesNoGoroutines.
func TestHandlerOutlivingShutdownLeavesNoGoroutine(t *testing.T) {
	srv := redistest.Shared(t)
	before := leaktest.IgnoreCurrent()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	queue := redistest.UniqueName(t)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{queue}, Logger: testLogger(t),
		ShutdownTimeout: 50 * time.Millisecond, DisableScheduler: true, DisableRecovery: true})
	require.NoError(t, err)
	running, release := make(chan struct{}), make(chan struct{})
	w.Handle("stubborn", func(context.Context, *pipeline.Job) ([]byte, error) {
		close(running)
		<-release // ignores its context
		return nil, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	_, err = c.Enqueue(t.Context(), queue, pipeline.Task{Type: "stubborn"})
	require.NoError(t, err)
	<-running
	cancel()
	require.NoError(t, <-done)
	close(release)
	require.NoError(t, rdb.Close())
	leaktest.Verify(t, before)
}
