package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/conveyorq/conveyor/metakey"
	"github.com/conveyorq/conveyor/pipeline"
)

// Publish Watermill messages as jobs: the topic is the queue, the message UUID the job id, and
// control keys in the metadata set the job's type and options.
func ExamplePublisher() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	pub, err := pipeline.NewPublisher(client, pipeline.PublisherConfig{DefaultType: "notify"})
	if err != nil {
		panic(err)
	}
	defer pub.Close()

	welcome := message.NewMessage("user-42-welcome", []byte(`{"user":42}`))
	welcome.Metadata.Set("tenant", "acme") // plain metadata: the handler gets it
	reminder := message.NewMessage("user-42-reminder", []byte(`{"user":42}`))
	reminder.Metadata.Set(metakey.Type, "remind")
	reminder.Metadata.Set(metakey.Delay, "24h")
	reminder.Metadata.Set(metakey.MaxRetries, "2")
	if err := pub.Publish("emails", welcome, reminder); err != nil {
		panic(err)
	}
	// Publishing a message again makes no second job.
	if err := pub.Publish("emails", welcome); err != nil {
		panic(err)
	}

	for _, id := range []string{"user-42-welcome", "user-42-reminder"} {
		j, err := client.Get(ctx, "emails", id)
		if err != nil {
			panic(err)
		}
		fmt.Println(j.ID, j.Type, j.Status, j.MaxRetries, j.Metadata)
	}
	stats, _ := client.Stats(ctx, "emails")
	fmt.Println("enqueued:", stats.Enqueued)

	// One invalid message refuses the whole call, and nothing is written.
	bad := message.NewMessage("user-43-welcome", nil)
	bad.Metadata.Set(metakey.Delay, "tomorrow")
	err = pub.Publish("emails", message.NewMessage("user-44-welcome", nil), bad)
	fmt.Println(errors.Is(err, pipeline.ErrInvalid))
	fmt.Println(err)
	// Output:
	// user-42-welcome notify queued 5 map[tenant:acme]
	// user-42-reminder remind scheduled 2 map[]
	// enqueued: 2
	// true
	// publish to emails: message 1 (uuid "user-43-welcome"): pipeline: invalid argument: conveyor_delay "tomorrow": not a Go duration (such as 90s or 1h30m)
}

// Every option of a Client publish has its control key: here a priority level, a fair group,
// a limit key and a retention; and a debounce window, which several messages join to become
// one job.
func ExamplePublisher_options() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	pub, err := pipeline.NewPublisher(client, pipeline.PublisherConfig{DefaultType: "invoice"})
	if err != nil {
		panic(err)
	}
	defer pub.Close()

	routine := message.NewMessage("invoice-7", []byte(`{"invoice":7}`))
	routine.Metadata.Set(metakey.Priority, "3")     // after the queue's levels 1 and 2
	routine.Metadata.Set(metakey.Group, "acme")     // round-robin with other tenants
	routine.Metadata.Set(metakey.LimitKey, "acme")  // counted under acme's per-key limits
	routine.Metadata.Set(metakey.Retention, "168h") // kept a week once it completes
	if err := pub.Publish("billing", routine); err != nil {
		panic(err)
	}
	j, err := client.Get(ctx, "billing", "invoice-7")
	if err != nil {
		panic(err)
	}
	fmt.Println(j.ID, j.Priority, j.Group, j.Metadata)

	// Three edits of one document within two seconds of each other: one reindex job.
	for i := range 3 {
		edit := message.NewMessage(fmt.Sprintf("edit-%d", i), []byte(fmt.Sprintf(`{"doc":42,"rev":%d}`, i)))
		edit.Metadata.Set(metakey.Type, "reindex")
		edit.Metadata.Set(metakey.DebounceKey, "doc-42")
		edit.Metadata.Set(metakey.DebounceQuiet, "2s")
		edit.Metadata.Set(metakey.DebounceMaxWait, "1m")
		if err := pub.Publish("search", edit); err != nil {
			panic(err)
		}
	}
	stats, _ := client.Stats(ctx, "search")
	fmt.Println("jobs:", stats.Enqueued, "joined:", stats.Debounced)

	bad := message.NewMessage("invoice-8", nil)
	bad.Metadata.Set(metakey.Priority, "urgent")
	fmt.Println(pub.Publish("billing", bad))
	// Output:
	// invoice-7 3 acme map[]
	// jobs: 1 joined: 2
	// publish to billing: message 0 (uuid "invoice-8"): pipeline: invalid argument: conveyor_priority "urgent": not an integer
}

// A Watermill router handler turns events into jobs through a Publisher, and a Worker runs
// them.
func ExamplePublisher_router() {
	rdb, done := exampleRedis()
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		panic(err)
	}
	jobs, err := pipeline.NewPublisher(client, pipeline.PublisherConfig{})
	if err != nil {
		panic(err)
	}

	// The application's events, here on Watermill's in-process Pub/Sub.
	events := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	router.AddHandler("ship-orders", "order_placed", events, "shipping", jobs,
		func(event *message.Message) ([]*message.Message, error) {
			job := message.NewMessage("ship-"+event.UUID, event.Payload)
			job.Metadata.Set(metakey.Type, "ship")
			return []*message.Message{job}, nil
		})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	worker, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"shipping"}})
	if err != nil {
		panic(err)
	}
	worker.Handle("ship", func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		return []byte("shipped " + string(j.Payload)), nil
	})
	workerDone := make(chan error, 1)
	go func() { workerDone <- worker.Run(ctx) }()

	if err := events.Publish("order_placed", message.NewMessage("order-1", []byte("order 1"))); err != nil {
		panic(err)
	}
	for {
		j, err := client.Get(ctx, "shipping", "ship-order-1")
		if err == nil && j.Status.Final() {
			fmt.Println(j.ID, j.Type, j.Status, string(j.Result))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	stop()
	<-workerDone
	_ = router.Close()
	_ = events.Close()
	// Output: ship-order-1 ship completed shipped order 1
}
