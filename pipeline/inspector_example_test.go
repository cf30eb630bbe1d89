package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// Page through a queue's scheduled jobs, earliest first, and look at its gauges.
func ExampleInspector_List() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	for i, id := range []string{"report-3", "report-1", "report-2", "report-5", "report-4"} {
		_, err := client.Enqueue(ctx, "reports", pipeline.Task{Type: "render"},
			pipeline.WithID(id), pipeline.WithDelay(time.Duration(5-i)*time.Hour))
		if err != nil {
			panic(err)
		}
	}
	_, _ = client.Enqueue(ctx, "reports", pipeline.Task{Type: "render"}, pipeline.WithID("now"))

	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		panic(err)
	}
	page := pipeline.Page{Limit: 2}
	for {
		p, err := insp.List(ctx, "reports", pipeline.StatusScheduled, page)
		if err != nil {
			panic(err)
		}
		for _, j := range p.Jobs {
			fmt.Print(j.ID, " ")
		}
		fmt.Println("| more:", p.Next != "")
		if p.Next == "" {
			break
		}
		page.Cursor = p.Next
	}

	queued, _ := insp.List(ctx, "reports", pipeline.StatusQueued, pipeline.Page{})
	fmt.Println("queued:", queued.Jobs[0].ID)
	st, _ := insp.Stats(ctx, "reports")
	fmt.Println("scheduled", st.Scheduled, "queued", st.Queued)
	// Output:
	// report-4 report-5 | more: true
	// report-2 report-1 | more: true
	// report-3 | more: false
	// queued: now
	// scheduled 5 queued 1
}

// Pause a queue: every worker stops taking its jobs, which wait, queued, until Resume.
func ExampleInspector_Pause() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(ctx, "exports", pipeline.Task{Type: "export"}); err != nil {
		panic(err)
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		panic(err)
	}
	if err := insp.Pause(ctx, "exports"); err != nil {
		panic(err)
	}
	paused, _ := insp.Paused(ctx)
	st, _ := insp.Stats(ctx, "exports")
	fmt.Println("paused:", paused, st.Paused, "queued:", st.Queued)
	if err := insp.Resume(ctx, "exports"); err != nil {
		panic(err)
	}
	st, _ = insp.Stats(ctx, "exports")
	fmt.Println("paused:", st.Paused)
	// Output:
	// paused: [exports] true queued: 1
	// paused: false
}
