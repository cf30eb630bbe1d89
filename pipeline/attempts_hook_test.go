package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// WorkerHooks.Attempts hears every attempt once, with what a middleware around the job would
// see: completed, retry, dead (for want of a handler too), a middleware's refusal, and an
// attempt abandoned at shutdown, which no write carries; each with its queue, type and times.
func TestWorkerHooksAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	var mu sync.Mutex
	var got []pipeline.Attempt
	w, err := pipeline.NewWorker(b.rdb, pipeline.WorkerConfig{Queues: []string{b.queue}, Logger: testLogger(t),
		Backoff:         pipeline.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond},
		ShutdownTimeout: 10 * time.Millisecond,
		Hooks: pipeline.WorkerHooks{Attempts: func(as []pipeline.Attempt) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, as...)
		}}})
	require.NoError(t, err)
	w.Use(refuseMarked)
	w.Handle("ok", echo)
	w.Handle("flaky", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		if j.Attempt == 1 {
			return nil, errors.New("first attempt fails")
		}
		return nil, nil
	})
	blocked := make(chan struct{})
	w.Handle("block", func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
		close(blocked)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	enqueue := func(task pipeline.Task, opts ...pipeline.Option) string {
		j, err := b.client.Enqueue(ctx, b.queue, task, opts...)
		require.NoError(t, err)
		return j.ID
	}
	ok := enqueue(pipeline.Task{Type: "ok"})
	flaky := enqueue(pipeline.Task{Type: "flaky"})
	nobody := enqueue(pipeline.Task{Type: "nobody"}, pipeline.WithMaxRetries(0))
	refused := enqueue(pipeline.Task{Type: "ok", Metadata: map[string]string{"refuse": "yes"}}, pipeline.WithMaxRetries(0))
	enqueue(pipeline.Task{Type: "block"})

	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	b.waitStatus(t, ok, status.Completed)
	b.waitStatus(t, flaky, status.Completed)
	b.waitStatus(t, nobody, status.Failed)
	b.waitStatus(t, refused, status.Failed)
	<-blocked
	stop()
	require.NoError(t, <-done)

	type seen struct {
		typ                string
		outcome            pipeline.Outcome
		noHandler, refused bool
	}
	var seens []seen
	mu.Lock()
	defer mu.Unlock()
	for _, a := range got {
		seens = append(seens, seen{a.Type, a.Outcome, a.NoHandler, a.Refused})
		require.Equal(t, b.queue, a.Queue)
		require.False(t, a.Began.IsZero())
		require.GreaterOrEqual(t, a.Took, time.Duration(0))
		require.False(t, a.Entered.IsZero())
	}
	require.ElementsMatch(t, []seen{
		{typ: "ok"},
		{typ: "flaky", outcome: pipeline.OutcomeRetry}, {typ: "flaky"},
		{typ: "nobody", outcome: pipeline.OutcomeDead, noHandler: true},
		{typ: "ok", outcome: pipeline.OutcomeDead, refused: true},
		{typ: "block", outcome: pipeline.OutcomeAbandoned},
	}, seens)
}

// refuseMarked is a middleware that refuses the jobs whose metadata says refuse=yes, before
// their handlers run, with an error of its own.
func refuseMarked(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		if msg.Metadata.Get("refuse") == "yes" {
			return nil, errors.New("rate limited")
		}
		return h(msg)
	}
}
