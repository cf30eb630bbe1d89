package stream_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/stream"
)

// Read a stream in a consumer group as a Watermill Subscriber, in batches. Entries in
// watermill-redisstream's layout (here written by hand) come out as messages; an entry that
// cannot be read comes out marked with PoisonKey instead of stopping the subscription.
// (An in-process Redis stands in for yours.)
func Example() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	for _, v := range [][]any{
		{stream.FieldUUID, "m1", stream.FieldPayload, "hello", stream.FieldMetadata, ""},
		{"garbage", "no uuid here"},
		{stream.FieldUUID, "m2", stream.FieldPayload, "world", stream.FieldMetadata, ""},
	} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "events", Values: v})
	}

	// Concurrency 1 hands out one message at a time, in stream order; with more, messages are
	// handled side by side and order is not kept.
	sub, err := stream.NewSubscriber(stream.Config{Client: rdb, Group: "app", Concurrency: 1})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, "events")
	if err != nil {
		panic(err)
	}
	for range 3 {
		msg := <-msgs
		if reason, bad := msg.Metadata[stream.PoisonKey]; bad {
			fmt.Println("unreadable:", reason)
		} else {
			fmt.Println(msg.UUID, string(msg.Payload))
		}
		msg.Ack() // acks are sent in batches
	}
	// Output:
	// m1 hello
	// unreadable: missing _watermill_message_uuid
	// m2 world
}

// Pause one stream while the others are read on, then resume it. (An in-process Redis stands
// in for yours.)
func ExampleSubscriber_PauseTopic() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	for _, topic := range []string{"orders", "reports"} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: []any{
			stream.FieldUUID, topic + "-1", stream.FieldPayload, "", stream.FieldMetadata, ""}})
	}

	sub, err := stream.NewSubscriber(stream.Config{Client: rdb, Group: "app"})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	sub.PauseTopic("reports") // before or after Subscribe
	orders, _ := sub.Subscribe(ctx, "orders")
	reports, _ := sub.Subscribe(ctx, "reports")
	msg := <-orders
	msg.Ack()
	fmt.Println(msg.UUID, "paused:", sub.TopicPaused("reports"))
	sub.ResumeTopic("reports")
	msg = <-reports
	msg.Ack()
	fmt.Println(msg.UUID)
	// Output:
	// orders-1 paused: true
	// reports-1
}

// Stop a message's handler because the application learned that its entry was taken away (a
// job canceled elsewhere): Revoke cancels the message's context with the cause given, and the
// entry is neither renewed nor handed out again. (An in-process Redis stands in for yours.)
func ExampleSubscriber_Revoke() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{
		stream.FieldUUID, "job-1", stream.FieldPayload, "", stream.FieldMetadata, ""}})

	sub, err := stream.NewSubscriber(stream.Config{Client: rdb, Group: "app", ManualSettle: true})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	msgs, _ := sub.Subscribe(ctx, "jobs")
	msg := <-msgs
	errCanceled := errors.New("canceled by the user")
	fmt.Println(sub.Revoke("jobs", msg.Metadata[stream.EntryIDKey], errCanceled))
	<-msg.Context().Done() // what a handler watches
	fmt.Println(context.Cause(msg.Context()))
	sub.Settle(msg) // frees its slot
	// Output:
	// true
	// canceled by the user
}
