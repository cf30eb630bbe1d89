package pipeline_test

import (
	"context"
	"fmt"

	"github.com/conveyorq/conveyor/pipeline"
)

// Tell a publisher about a queue name or a job type that no worker has used lately: a typo is
// published all the same, and the warning says what the workers do read.
func ExampleInspector_PublishWarnings() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	worker, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"emails"}})
	if err != nil {
		panic(err)
	}
	worker.Handle("welcome", func(ctx context.Context, j *pipeline.Job) ([]byte, error) { return nil, nil })
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go worker.Run(wctx)
	<-worker.Ready() // its first heartbeat is written

	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		panic(err)
	}
	for _, p := range []struct{ queue, jobType string }{{"emails", "welcome"}, {"emials", "welcome"}, {"emails", "welcom"}} {
		warnings, err := insp.PublishWarnings(ctx, p.queue, p.jobType)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s/%s: %d warning(s)\n", p.queue, p.jobType, len(warnings))
		for _, w := range warnings {
			fmt.Println("  warning:", w)
		}
	}
	// Output:
	// emails/welcome: 0 warning(s)
	// emials/welcome: 1 warning(s)
	//   warning: no worker has read queue "emials" in the last 10m0s (known queues read: emails)
	// emails/welcom: 1 warning(s)
	//   warning: no worker has handled type "welcom" on any queue in the last 10m0s (did you mean "welcome"?)
}
