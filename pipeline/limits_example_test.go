package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// Hold each tenant to 2 reports running at once and 10 started a minute, across every worker:
// the limit is stored in Redis, and jobs carry the tenant as their limit key.
func ExampleWithLimitKey() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	job, err := client.Enqueue(ctx, "reports", pipeline.Task{Type: "monthly"}, pipeline.WithLimitKey("tenant-42"))
	if err != nil {
		panic(err)
	}
	fmt.Println("published:", job.Status)

	in, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		panic(err)
	}
	err = in.SetLimit(ctx, "reports", pipeline.Limit{PerKey: true, Rate: 10, Interval: time.Minute, Concurrency: 2})
	if err != nil {
		panic(err)
	}
	limits, err := in.Limits(ctx, "reports")
	if err != nil {
		panic(err)
	}
	for _, l := range limits {
		fmt.Printf("per key: %v, %d per %v, %d at once\n", l.PerKey, l.Rate, l.Interval, l.Concurrency)
	}

	_, err = client.Enqueue(ctx, "reports", pipeline.Task{Type: "monthly"}, pipeline.WithLimitKey(""))
	fmt.Println(err)
	// Output:
	// published: queued
	// per key: true, 10 per 1m0s, 2 at once
	// pipeline: invalid argument: limit key must be 1 to 128 bytes
}
