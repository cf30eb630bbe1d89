package pipeline_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/conveyorq/conveyor/pipeline"
)

// Cancel a running job from any process: its worker hears the cancel on the queue's job events
// and ends the handler's context, with cause ErrJobCanceled. The job is canceled for good;
// whatever the handler returns after that is discarded.
func ExampleClient_Cancel() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	worker, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"reports"}})
	if err != nil {
		panic(err)
	}
	started, stopped := make(chan struct{}), make(chan error, 1)
	worker.Handle("build", func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		close(started)
		<-ctx.Done() // a long job that checks its context
		stopped <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	wctx, stop := context.WithCancel(ctx)
	go worker.Run(wctx)
	defer stop()
	// Ready: the worker hears cancels. A cancel it could not hear yet still stops the
	// handler, at its next lease renewal, but with cause stream.ErrLeaseLost.
	<-worker.Ready()

	job, err := client.Enqueue(ctx, "reports", pipeline.Task{Type: "build"})
	if err != nil {
		panic(err)
	}
	<-started
	if err := client.Cancel(ctx, "reports", job.ID); err != nil {
		panic(err)
	}
	fmt.Println("handler stopped:", errors.Is(<-stopped, pipeline.ErrJobCanceled))
	j, err := client.Get(ctx, "reports", job.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(j.Status)
	// Output:
	// handler stopped: true
	// canceled
}
