package stream

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/leaktest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// The suite's multiplier forwards each subscriber's messages in a goroutine that blocks for
// good once the test stops reading; those are the suite's, not ours.
var suiteLeaks = []leaktest.Option{
	leaktest.IgnoreFunction("github.com/ThreeDotsLabs/watermill/internal/subscriber.(*multiplier).Subscribe.func2"),
	leaktest.IgnoreFunction("github.com/ThreeDotsLabs/watermill/internal/subscriber.(*multiplier).Subscribe.func3"),
}

// TestPubSub holds the Subscriber to Watermill's universal Pub/Sub suite, paired with the stock
// watermill-redisstream Publisher, set up as watermill-redisstream's own pubsub_test.go is: each
// constructor call makes a new consumer group (created from "0"), so a new subscriber reads the
// whole stream.
func TestPubSub(t *testing.T) {
	checkLeaks(t, suiteLeaks...)
	features := tests.Features{
		ConsumerGroups: true,
		// At-least-once: a released entry is put back and may be read again.
		ExactlyOnceDelivery: false,
		// Not with Concurrency > 1: up to Concurrency messages are out at once, each handed out
		// by its own goroutine, and a nacked one comes back after NackResendSleep behind later
		// ones (the suite's TestPublishSubscribeInOrder and TestNoAck fail). With Concurrency 1
		// order holds: see TestPubSubInOrder.
		GuaranteedOrder:                     false,
		GuaranteedOrderWithSingleSubscriber: false,
		Persistent:                          true,
		RequireSingleInstance:               false,
		NewSubscriberReceivesOldMessages:    true,
		// The suite restarts the broker with an external command (TestReconnect);
		// TestSubscriber/RedisRestart covers reconnection against a private server instead.
		RestartServiceCommand: nil,
	}
	tests.TestPubSub(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return newSuitePubSub(t, watermill.NewShortUUID(), 0)
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return newSuitePubSub(t, group, 0)
		},
	)
}

// TestPubSubInOrder runs the suite's order tests with Concurrency 1, where one message is out
// at a time and a nacked one is handed out again before anything else is read.
func TestPubSubInOrder(t *testing.T) {
	checkLeaks(t, suiteLeaks...)
	features := tests.Features{
		ConsumerGroups:                      true,
		GuaranteedOrder:                     true,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    true,
	}
	ctor := func(t *testing.T) (message.Publisher, message.Subscriber) {
		return newSuitePubSub(t, watermill.NewShortUUID(), 1)
	}
	for name, test := range map[string]func(*testing.T, tests.TestContext, tests.PubSubConstructor){
		"TestPublishSubscribeInOrder": tests.TestPublishSubscribeInOrder,
		"TestNoAck":                   tests.TestNoAck,
		"TestResendOnError":           tests.TestResendOnError,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, tests.TestContext{TestID: tests.NewTestID(), Features: features}, ctor)
		})
	}
}

func newSuitePubSub(t *testing.T, group string, concurrency int) (message.Publisher, message.Subscriber) {
	// The stock Publisher closes its client on Close: it gets its own.
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: redistest.Client(t)}, nil)
	require.NoError(t, err)
	rdb := redistest.Client(t)
	sub, err := NewSubscriber(Config{
		Client:          rdb,
		Group:           group,
		Concurrency:     concurrency,
		BlockTime:       50 * time.Millisecond,
		NackResendSleep: 10 * time.Millisecond,
		// The suite waits at most 15s for a closed subscription's messages to be cancelled,
		// and closes up to 50 multiplied subscribers one after another, each of which may
		// have handed a message to a forwarding goroutine that nobody reads any more.
		CloseTimeout: 50 * time.Millisecond,
		// As Conveyor's worker does, put back at once what a closing subscription held, so
		// the next subscription of the group reads it (TestSubscribeCtx re-subscribes the
		// same Subscriber, and so the same consumer, right away). Without OnRelease those
		// entries wait, pending, for the application's recovery.
		OnRelease: requeue(rdb, group),
	})
	require.NoError(t, err)
	// Some suite tests never close what they construct (TestPublishSubscribeInOrder defers
	// the result of Close called at once, before its multiplier makes any subscriber).
	t.Cleanup(func() { _ = sub.Close() })
	return pub, sub
}
