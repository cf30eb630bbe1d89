package stream

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// BenchmarkSubscriberThroughput drains a backlog of b.N entries with Concurrency 100, acking
// each message as soon as it arrives. It reports messages per second and the mean number of
// entries one XREADGROUP returned.
func BenchmarkSubscriberThroughput(b *testing.B) {
	rdb := redistest.Client(b)
	var reads, entries atomic.Int64
	// The XREADGROUP replies with entries, and their entries.
	redistest.CountCommands(rdb).Observe(func(cmd redis.Cmder) {
		if x, ok := cmd.(*redis.XStreamSliceCmd); ok && cmd.Name() == "xreadgroup" {
			for _, s := range x.Val() {
				if len(s.Messages) > 0 {
					reads.Add(1)
					entries.Add(int64(len(s.Messages)))
				}
			}
		}
	})
	topic := redistest.UniqueName(b)
	b.Cleanup(func() { rdb.Del(context.Background(), topic) })
	publish(b, rdb, topic, "m", b.N)
	sub := newTestSubscriber(b, rdb, Config{Concurrency: 100})

	b.ResetTimer()
	start := time.Now()
	msgs, err := sub.Subscribe(b.Context(), topic)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		msg, ok := <-msgs
		if !ok {
			b.Fatal("messages channel closed")
		}
		msg.Ack()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	if n := reads.Load(); n > 0 {
		b.ReportMetric(float64(entries.Load())/float64(n), "entries/read")
	}
}
