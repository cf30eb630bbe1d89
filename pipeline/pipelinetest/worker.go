package pipelinetest

import (
	"context"
	"testing"

	"github.com/conveyorq/conveyor/pipeline"
)

// StartWorker runs w until the test ends and returns once it consumes. At the end of the test
// it stops w (as SIGTERM would) and fails the test if Run returned an error.
func StartWorker(tb testing.TB, w *pipeline.Worker) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("pipelinetest: the worker's Run returned %v", err)
		}
	})
	select {
	case <-w.Ready():
	case err := <-done:
		tb.Fatalf("pipelinetest: the worker stopped at start: %v", err)
	}
}

// Work enqueues task on queue through client and returns the job once it is final (completed,
// failed or canceled): a worker serving queue (StartWorker) must run it. It fails tb if the
// job cannot be enqueued or ctx ends first.
func Work(ctx context.Context, tb testing.TB, client *pipeline.Client, queue string, task pipeline.Task, opts ...pipeline.Option) *pipeline.Job {
	tb.Helper()
	j, err := client.Enqueue(ctx, queue, task, opts...)
	if err != nil {
		tb.Fatalf("pipelinetest: enqueue %s on %s: %v", task.Type, queue, err)
	}
	final, err := client.Wait(ctx, queue, j.ID)
	if err != nil {
		tb.Fatalf("pipelinetest: wait for job %s on %s: %v", j.ID, queue, err)
	}
	return final
}
