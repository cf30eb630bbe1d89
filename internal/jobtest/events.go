package jobtest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/events"
)

// Listen subscribes to channel (keys.Queue.Events) with SSUBSCRIBE, and waits until the
// subscription is confirmed. It returns a function that returns the events of the next message.
// That function fails the test when none comes within 30 s, or when it does not parse.
func Listen(tb testing.TB, rdb redis.UniversalClient, channel string) func() []events.Event {
	tb.Helper()
	ps := rdb.SSubscribe(context.Background(), channel)
	tb.Cleanup(func() { _ = ps.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ps.ReceiveTimeout(ctx, 30*time.Second); err != nil {
		tb.Fatalf("jobtest: subscribe to %s: %v", channel, err)
	}
	return func() []events.Event {
		tb.Helper()
		m, err := ps.ReceiveTimeout(context.Background(), 30*time.Second)
		if err != nil {
			tb.Fatalf("jobtest: no event on %s: %v", channel, err)
		}
		msg, ok := m.(*redis.Message)
		if !ok {
			tb.Fatalf("jobtest: %T on %s, not a message", m, channel)
		}
		evs, err := events.Parse(msg.Payload)
		if err != nil {
			tb.Fatalf("jobtest: %v", err)
		}
		return evs
	}
}
