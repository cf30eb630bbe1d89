package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// watermillSystem is the stock watermill-redisstream Publisher and Subscriber alone: no job
// state at all. Its subs subscriptions share one consumer group, each a Subscriber with a
// distinct consumer name. Each reads COUNT 1 and XACKs before it takes the next message.
type watermillSystem struct {
	subs int
}

const (
	watermillGroup      = "bench"
	watermillGoroutines = 8 // publishers in Preload and Live: Publish sends one XADD per message
)

func (s *watermillSystem) Name() string  { return fmt.Sprintf("watermill_s%d", s.subs) }
func (s *watermillSystem) Delayed() bool { return false }

func (s *watermillSystem) NewProducer(ctx context.Context, addr, queue string) (Producer, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2 * watermillGoroutines})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb}, errorOnlyLogger{})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &watermillProducer{rdb: rdb, pub: pub, stream: queue}, nil
}

type watermillProducer struct {
	rdb    *redis.Client
	pub    *redisstream.Publisher
	stream string
}

func (p *watermillProducer) publish(payload []byte) error {
	return p.pub.Publish(p.stream, message.NewMessage(watermill.NewUUID(), payload))
}

// Preload: Publish one message per call from 8 goroutines.
func (p *watermillProducer) Preload(ctx context.Context, n int, payload []byte) error {
	return parallel(ctx, n, watermillGoroutines, func(context.Context) error { return p.publish(payload) })
}

// Live: as Preload, while the subscribers run.
func (p *watermillProducer) Live(ctx context.Context, n int, payload []byte) error {
	return p.Preload(ctx, n, payload)
}

func (p *watermillProducer) EnqueueOne(_ context.Context, payload []byte) error {
	return p.publish(payload)
}

func (p *watermillProducer) EnqueueBatch(context.Context, int, []byte) error { return errNotApplicable }

func (p *watermillProducer) EnqueueDelayed(context.Context, []byte, time.Duration) error {
	return errNotApplicable
}

func (p *watermillProducer) Inspect(ctx context.Context) (map[string]int64, error) {
	return streamInspect(ctx, p.rdb, p.stream, watermillGroup)
}

// streamInspect reports a stream's length and its group's pending count.
func streamInspect(ctx context.Context, rdb *redis.Client, stream, group string) (map[string]int64, error) {
	out := map[string]int64{}
	n, err := rdb.XLen(ctx, stream).Result()
	if err != nil {
		return nil, err
	}
	out["stream_len"] = n
	if groups, err := rdb.XInfoGroups(ctx, stream).Result(); err == nil {
		for _, g := range groups {
			if g.Name == group {
				out["pending"] = g.Pending
			}
		}
	}
	if n, err := rdb.DBSize(ctx).Result(); err == nil {
		out["dbsize"] = n
	}
	return out, nil
}

func (p *watermillProducer) Close() error { return p.pub.Close() } // closes rdb too

func (s *watermillSystem) NewConsumer(addr, queue string) (Consumer, error) {
	return &watermillConsumer{sys: s, addr: addr, stream: queue}, nil
}

type watermillConsumer struct {
	sys    *watermillSystem
	addr   string
	stream string
	subs   []*redisstream.Subscriber
	acked  atomic.Int64
	wg     sync.WaitGroup
	cancel context.CancelFunc
}

// Start subscribes sys.subs times. The stock subscriber is configured sanely: no indefinite
// first block, 100 ms block time, and its idle-claim loop off.
func (c *watermillConsumer) Start(ctx context.Context, handle func([]byte)) error {
	ctx, c.cancel = context.WithCancel(ctx)
	for i := range c.sys.subs {
		rdb := redis.NewClient(&redis.Options{Addr: c.addr, PoolSize: 4})
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client:                        rdb, // the Subscriber closes it
			Consumer:                      fmt.Sprintf("bench-%d-%d", os.Getpid(), i),
			ConsumerGroup:                 watermillGroup,
			BlockTime:                     100 * time.Millisecond,
			ClaimInterval:                 time.Hour,
			MaxIdleTime:                   time.Hour,
			CheckConsumersInterval:        time.Hour,
			ShouldClaimPendingMessage:     func(redis.XPendingExt) bool { return false },
			DisableIndefiniteInitialBlock: true,
		}, errorOnlyLogger{})
		if err != nil {
			return err
		}
		c.subs = append(c.subs, sub)
		msgs, err := sub.Subscribe(ctx, c.stream)
		if err != nil {
			return err
		}
		c.wg.Go(func() {
			for msg := range msgs {
				handle(msg.Payload)
				msg.Ack()
				c.acked.Add(1)
			}
		})
	}
	return nil
}

// Processed counts acked messages (the subscriber XACKs each before it reads the next).
func (c *watermillConsumer) Processed(context.Context) (int64, error) { return c.acked.Load(), nil }

func (c *watermillConsumer) Describe(context.Context) string {
	return fmt.Sprintf("acked=%d", c.acked.Load())
}

func (c *watermillConsumer) Stop() error {
	c.cancel()
	var errs []error
	for _, s := range c.subs {
		errs = append(errs, s.Close())
	}
	c.wg.Wait()
	return errors.Join(errs...)
}

// errorOnlyLogger is a Watermill logger that prints only errors, to stderr.
type errorOnlyLogger struct{}

func (errorOnlyLogger) Error(msg string, err error, f watermill.LogFields) {
	fmt.Fprintf(os.Stderr, "watermill error: %s: %v %v\n", msg, err, f)
}
func (errorOnlyLogger) Info(string, watermill.LogFields)                   {}
func (errorOnlyLogger) Debug(string, watermill.LogFields)                  {}
func (errorOnlyLogger) Trace(string, watermill.LogFields)                  {}
func (l errorOnlyLogger) With(watermill.LogFields) watermill.LoggerAdapter { return l }
