package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// Publish a job and wait for its end: Wait returns when the job is completed, failed or
// canceled, woken by the job's events rather than by reading it over and over.
func ExampleClient_Wait() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	job, err := client.Enqueue(ctx, "thumbnails", pipeline.Task{Type: "resize", Payload: []byte(`{"w":128}`)})
	if err != nil {
		panic(err)
	}

	worker, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"thumbnails"}})
	if err != nil {
		panic(err)
	}
	worker.Handle("resize", func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		return []byte(`{"ok":true}`), nil
	})
	wctx, stop := context.WithCancel(ctx)
	go worker.Run(wctx)
	defer stop()

	// Bound the wait as you would bound any call.
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	j, err := client.Wait(wait, "thumbnails", job.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(j.Status, string(j.Result))
	// Output:
	// completed {"ok":true}
}
