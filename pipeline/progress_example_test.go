package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// A handler reports its progress, and a caller follows the job until it ends. The handler may
// report as often as it likes: Redis sees at most one write per ProgressInterval, and the last
// report is written before the outcome, so the completed job keeps it.
func ExampleJob_Progress() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	job, err := client.Enqueue(ctx, "imports", pipeline.Task{Type: "import", Payload: []byte(`{"rows":1000}`)})
	if err != nil {
		panic(err)
	}

	worker, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"imports"}})
	if err != nil {
		panic(err)
	}
	worker.Handle("import", func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		const rows = 1000
		for i := 0; i <= rows; i++ {
			err := j.Progress(ctx, 100*i/rows, fmt.Sprintf("row %d of %d", i, rows))
			if errors.Is(err, pipeline.ErrProgressRefused) {
				return nil, err // the job moved on (canceled, recovered elsewhere): stop
			}
		}
		return []byte(`{"imported":1000}`), nil
	})
	wctx, stop := context.WithCancel(ctx)
	go worker.Run(wctx)
	defer stop()

	follow, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last *pipeline.Job
	err = client.Follow(follow, "imports", job.ID, func(j *pipeline.Job) error {
		last = j // a live view would show j.Status and j.Reported here
		return nil
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(last.Status, last.Reported.Percent, last.Reported.Message)
	// Output:
	// completed 100 row 1000 of 1000
}
