package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/pipeline"
)

// Read the last 15 minutes of a queue's history, written by its workers as they finish jobs,
// and print the minutes that had traffic with their queue wait and execution time. The
// history is in Redis, so any process can read it, whenever the jobs ran.
func ExampleInspector_History() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		panic(err)
	}
	h, err := insp.History(context.Background(), "emails", pipeline.HistoryStepCoarse, time.Now().Add(-15*time.Minute))
	if err != nil {
		panic(err)
	}
	for _, p := range h.Points {
		if p.Completed+p.Failed+p.Retried == 0 {
			continue
		}
		fmt.Printf("%s  %d done %d dead %d retried  wait p50 %s p99 %s  exec p50 %s p99 %s\n",
			p.At.Format("15:04"), p.Completed, p.Failed, p.Retried, p.Wait.P50, p.Wait.P99, p.Exec.P50, p.Exec.P99)
	}
	fmt.Printf("15 min: %d done, wait p99 %s\n", h.Total.Completed, h.Total.Wait.P99)
}
