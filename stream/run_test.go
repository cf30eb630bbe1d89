package stream

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// routerNames are the values a router's handler reads from its message's context.
type routerNames struct{ handler, publisher, subscriber, topic string }

func namesOf(ctx context.Context) routerNames {
	return routerNames{message.HandlerNameFromCtx(ctx), message.PublisherNameFromCtx(ctx),
		message.SubscriberNameFromCtx(ctx), message.SubscribeTopicFromCtx(ctx)}
}

func TestRun(t *testing.T) {
	checkLeaks(t)

	t.Run("NeedsManualSettle", func(t *testing.T) {
		t.Parallel()
		_, err := NewSubscriber(Config{Client: redistest.Client(t), Group: testGroup, Run: func(*message.Message) {}})
		require.ErrorContains(t, err, "Config.Run needs Config.ManualSettle")
	})

	t.Run("RunsEveryMessageWithinConcurrency", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		ids := publish(t, rdb, topic, "m", 40)
		var sub *Subscriber
		var running, most atomic.Int32
		seen := make(chan string, len(ids))
		sub = newTestSubscriber(t, rdb, Config{Concurrency: 3, BatchSize: 2, ManualSettle: true, Run: func(msg *message.Message) {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			seen <- msg.Metadata[EntryIDKey]
			running.Add(-1)
			sub.Settle(msg)
		}})
		msgs, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		var got []string
		for range ids {
			select {
			case id := <-seen:
				got = append(got, id)
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of %d messages ran", len(got), len(ids))
			}
		}
		require.ElementsMatch(t, ids, got)
		require.LessOrEqual(t, most.Load(), int32(3))
		require.NoError(t, sub.Close())
		requireClosed(t, msgs, 5*time.Second) // it carried nothing, and closes with the subscription
	})

	t.Run("ContextAnswersAsARouters", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		publish(t, rdb, topic, "m", 2)

		// A router's handler of a subscriber without Run, then a subscriber with Run.
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		require.NoError(t, err)
		viaRouter := make(chan routerNames, 1)
		routed := newTestSubscriber(t, rdb, Config{Concurrency: 1, ManualSettle: true})
		router.AddConsumerHandler("the-handler", topic, routed, func(msg *message.Message) error {
			select {
			case viaRouter <- namesOf(msg.Context()):
			default:
			}
			routed.Settle(msg)
			return nil
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- router.Run(ctx) }()
		want := <-viaRouter
		cancel()
		require.NoError(t, <-done)

		viaRun := make(chan routerNames, 1)
		var sub *Subscriber
		sub = newTestSubscriber(t, rdb, Config{Concurrency: 1, ManualSettle: true,
			RouterHandler: func(string) string { return "the-handler" },
			Run: func(msg *message.Message) {
				select {
				case viaRun <- namesOf(msg.Context()):
				default:
				}
				sub.Settle(msg)
			}})
		_, err = sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		require.NoError(t, rdb.XGroupSetID(t.Context(), topic, testGroup, "0").Err()) // read the entries again
		require.Equal(t, routerNames{"the-handler", "message.disabledPublisher", "stream.Subscriber", topic}, want)
		require.Equal(t, want, <-viaRun)
	})

	t.Run("PanicIsRecovered", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		ids := publish(t, rdb, topic, "m", 3)
		logs := newLogRecorder()
		var sub *Subscriber
		ran := make(chan string, len(ids))
		sub = newTestSubscriber(t, rdb, Config{Concurrency: 1, ManualSettle: true, Logger: logs, Run: func(msg *message.Message) {
			defer sub.Settle(msg)
			ran <- msg.Metadata[EntryIDKey]
			panic("boom")
		}})
		_, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		for range ids {
			<-ran // one runner, Concurrency 1: it went on after each panic
		}
		require.Contains(t, logs.Lines()[0], "Panic recovered in handler")
	})

	t.Run("CloseWaitsForRun", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		topic := redistest.UniqueName(t)
		publish(t, rdb, topic, "m", 1)
		var sub *Subscriber
		started := make(chan struct{})
		var mu sync.Mutex
		returned := false
		sub = newTestSubscriber(t, rdb, Config{Concurrency: 1, ManualSettle: true, CloseTimeout: time.Millisecond, Run: func(msg *message.Message) {
			close(started)
			<-msg.Context().Done() // cancelled once CloseTimeout passed
			sub.Settle(msg)
			mu.Lock()
			returned = true
			mu.Unlock()
		}})
		_, err := sub.Subscribe(t.Context(), topic)
		require.NoError(t, err)
		<-started
		require.NoError(t, sub.Close())
		mu.Lock()
		defer mu.Unlock()
		require.True(t, returned)
	})
}
