package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
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
		p, err := insp.List(ctx, "reports", status.Scheduled, page)
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

	queued, _ := insp.List(ctx, "reports", status.Queued, pipeline.Page{})
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

// Limit a queue's jobs of one type, live: every worker obeys the limits stored in Redis.
func ExampleInspector_SetLimit() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	if _, err := client.Enqueue(ctx, "emails", pipeline.Task{Type: "send"}); err != nil {
		panic(err)
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		panic(err)
	}
	// At most 100 sends a minute, and each limit key's sends one at a time.
	if err := insp.SetLimit(ctx, "emails", pipeline.Limit{Type: "send", Rate: 100, Interval: time.Minute}); err != nil {
		panic(err)
	}
	if err := insp.SetLimit(ctx, "emails", pipeline.Limit{Type: "send", PerKey: true, Concurrency: 1}); err != nil {
		panic(err)
	}
	all, err := insp.AllLimits(ctx)
	if err != nil {
		panic(err)
	}
	for _, l := range all["emails"] {
		fmt.Printf("type=%s per_key=%v rate=%d/%v concurrency=%d\n", l.Type, l.PerKey, l.Rate, l.Interval, l.Concurrency)
	}
	deleted, _ := insp.DeleteLimit(ctx, "emails", "send", true)
	fmt.Println("deleted:", deleted)
	// Output:
	// type=send per_key=false rate=100/1m0s concurrency=0
	// type=send per_key=true rate=0/0s concurrency=1
	// deleted: true
}

// List the live workers: each running Worker writes a heartbeat record every few seconds
// (WorkerConfig.HeartbeatInterval) with what it reads and runs.
func ExampleInspector_Workers() {
	rdb, done := exampleRedis()
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	worker, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Name: "worker-1", Queues: []string{"emails"}, Concurrency: 5})
	if err != nil {
		panic(err)
	}
	worker.Handle("welcome", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })
	go func() { _ = worker.Run(ctx) }()
	<-worker.Ready()

	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		panic(err)
	}
	workers, err := insp.Workers(ctx)
	if err != nil {
		panic(err)
	}
	for _, w := range workers {
		fmt.Println(w.Name, w.Queues, w.Concurrency, "running:", len(w.Running))
	}
	// Output:
	// worker-1 [emails] 5 running: 0
}
