package pipeline_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// A handler whose job is not ready yet snoozes it: the job runs again later, and the snooze
// counts as no attempt and records no error.
func ExampleSnooze() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	worker, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"exports"}})
	if err != nil {
		panic(err)
	}
	var checks atomic.Int32
	worker.Handle("export", func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		if checks.Add(1) < 3 { // the file is not there yet: look again in a moment
			return nil, pipeline.Snooze(10 * time.Millisecond)
		}
		return []byte(`"exported"`), nil
	})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go worker.Run(wctx)

	job, err := client.Enqueue(ctx, "exports", pipeline.Task{Type: "export"})
	if err != nil {
		panic(err)
	}
	j, err := client.Wait(ctx, "exports", job.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(j.Status, "after", j.Snoozes, "snoozes, attempt", j.Attempt, "error", fmt.Sprintf("%q", j.LastError))
	// Output: completed after 2 snoozes, attempt 1 error ""
}
