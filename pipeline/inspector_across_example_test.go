package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// Page through the scheduled jobs of every queue: queue by queue in name order, each queue's
// earliest first. Each job's Queue says where it is.
func ExampleInspector_ListAllQueues() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	for i, queue := range []string{"reports", "emails", "reports", "emails", "billing"} {
		_, err := client.Enqueue(ctx, queue, pipeline.Task{Type: "later"},
			pipeline.WithID(fmt.Sprintf("job-%d", i)), pipeline.WithDelay(time.Duration(i+1)*time.Hour))
		if err != nil {
			panic(err)
		}
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		panic(err)
	}
	page := pipeline.Page{Limit: 2}
	for {
		p, err := insp.ListAllQueues(ctx, status.Scheduled, page)
		if err != nil {
			panic(err)
		}
		for _, j := range p.Jobs {
			fmt.Print(j.Queue, "/", j.ID, " ")
		}
		fmt.Println("| more:", p.Next != "")
		if p.Next == "" {
			break
		}
		page.Cursor = p.Next
	}
	// Output:
	// billing/job-4 emails/job-1 | more: true
	// emails/job-3 reports/job-0 | more: true
	// reports/job-2 | more: false
}
