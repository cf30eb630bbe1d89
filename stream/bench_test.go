package stream

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
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

// readCounter is a go-redis hook that counts XREADGROUP replies with entries.
type readCounter struct{ reads, entries *atomic.Int64 }

func (readCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (readCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (c readCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if x, ok := cmd.(*redis.XStreamSliceCmd); ok && cmd.Name() == "xreadgroup" {
			for _, s := range x.Val() {
				if len(s.Messages) > 0 {
					c.reads.Add(1)
					c.entries.Add(int64(len(s.Messages)))
				}
			}
		}
		return err
	}
}

// BenchmarkPriorityReads drains b.N entries spread over three topics weighted 6:3:1 (and, for
// comparison, the same without Priority), with the slots contended: the consumer frees half of
// them at a time, as a worker's outcome writer does. It reports the mean entries per
// XREADGROUP: the weighted hand-out must keep reads batched.
func BenchmarkPriorityReads(b *testing.B) {
	for _, weighted := range []bool{false, true} {
		name := map[bool]string{false: "fifo", true: "weighted"}[weighted]
		b.Run(name, func(b *testing.B) {
			rdb := redistest.Client(b)
			var reads, entries atomic.Int64
			rdb.AddHook(readCounter{reads: &reads, entries: &entries})
			base := redistest.UniqueName(b)
			cfg := Config{Concurrency: 100, ManualSettle: true, CloseTimeout: time.Second}
			if weighted {
				cfg.Priority = weightsOf(map[string]int{"critical": 6, "default": 3, "low": 1})
			}
			sub := newTestSubscriber(b, rdb, cfg)
			var chs []<-chan *message.Message
			for _, c := range []string{"critical", "default", "low"} {
				topic := c + "/" + base
				b.Cleanup(func() { rdb.Del(context.Background(), topic) })
				publish(b, rdb, topic, c, b.N) // each could take all
				msgs, err := sub.Subscribe(b.Context(), topic)
				if err != nil {
					b.Fatal(err)
				}
				chs = append(chs, msgs)
			}
			b.ResetTimer()
			start := time.Now()
			in := merge(b, chs)
			var held []*message.Message
			for range b.N {
				m := <-in
				if held = append(held, m.msg); len(held) == cfg.Concurrency {
					for _, h := range held[:50] {
						sub.Settle(h)
					}
					held = append(held[:0], held[50:]...)
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			for _, h := range held {
				sub.Settle(h)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
			if n := reads.Load(); n > 0 {
				b.ReportMetric(float64(entries.Load())/float64(n), "entries/read")
			}
		})
	}
}
