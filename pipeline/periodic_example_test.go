package pipeline_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/conveyorq/conveyor/pipeline"
)

// Register a periodic schedule in code: every worker started with it stores it in Redis, and
// the workers between them enqueue exactly one job per tick.
func ExampleWorkerConfig_periodic() {
	rdb, done := exampleRedis()
	defer done()

	worker, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{
		Queues: []string{"reports"},
		Periodic: []pipeline.Periodic{
			{Name: "heartbeat", Spec: "@every 1s", Queue: "reports", Type: "heartbeat"},
			{Name: "daily-report", Spec: "CRON_TZ=Europe/Berlin 0 0 9 * * 1-5", Queue: "reports", Type: "report",
				Missed: pipeline.MissedRunOnce},
		},
	})
	if err != nil {
		panic(err)
	}
	ran := make(chan string, 1)
	worker.Handle("heartbeat", func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		select {
		case ran <- j.ID:
		default:
		}
		return nil, nil
	})
	worker.Handle("report", func(ctx context.Context, j *pipeline.Job) ([]byte, error) { return nil, nil })
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go worker.Run(ctx)

	id := <-ran
	fmt.Println("tick's job:", strings.HasPrefix(id, "cron:heartbeat:"))
	// Output: tick's job: true
}

// Store a schedule without a deploy, pause it and list it.
func ExampleInspector_CreateSchedule() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		panic(err)
	}
	err = insp.CreateSchedule(ctx, pipeline.Periodic{Name: "cleanup", Spec: "0 */15 * * * *", Queue: "maintenance",
		Type: "cleanup", Payload: []byte(`{"older_than":"24h"}`)})
	if err != nil {
		panic(err)
	}
	if err := insp.PauseSchedule(ctx, "cleanup"); err != nil {
		panic(err)
	}
	list, err := insp.Schedules(ctx)
	if err != nil {
		panic(err)
	}
	for _, s := range list {
		fmt.Println(s.Name, s.Spec, s.Queue, s.Type, "paused:", s.Paused, "source:", s.Source)
	}
	// Output: cleanup 0 */15 * * * * maintenance cleanup paused: true source: api
}
