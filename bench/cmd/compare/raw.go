package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/rediserr"
)

// rawSystem is plain go-redis on a stream: the ceiling for any streams queue here. The producer
// XADDs, pipelined for batches. The consumer reads XREADGROUP COUNT 100 and acknowledges each
// batch with one XACK. While there is a backlog, the XACK is pipelined with the next read.
type rawSystem struct{}

const (
	rawGroup     = "bench"
	rawReadCount = 100
	rawField     = "payload"
)

func (s *rawSystem) Name() string  { return "raw" }
func (s *rawSystem) Delayed() bool { return false }

func (s *rawSystem) NewProducer(ctx context.Context, addr, queue string) (Producer, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	return &rawProducer{rdb: rdb, stream: queue}, nil
}

type rawProducer struct {
	rdb    *redis.Client
	stream string
}

func (p *rawProducer) xaddArgs(payload []byte) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: p.stream, Values: []any{rawField, payload}}
}

// pipelined XADDs n entries, size per pipeline.
func (p *rawProducer) pipelined(ctx context.Context, n, size int, payload []byte) error {
	return chunks(ctx, n, size, func(ctx context.Context, k int) error {
		_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for range k {
				pl.XAdd(ctx, p.xaddArgs(payload))
			}
			return nil
		})
		return err
	})
}

// Preload: XADD, 1000 per pipeline.
func (p *rawProducer) Preload(ctx context.Context, n int, payload []byte) error {
	return p.pipelined(ctx, n, 1000, payload)
}

// Live: XADD, 100 per pipeline.
func (p *rawProducer) Live(ctx context.Context, n int, payload []byte) error {
	return p.pipelined(ctx, n, 100, payload)
}

func (p *rawProducer) EnqueueOne(ctx context.Context, payload []byte) error {
	return p.rdb.XAdd(ctx, p.xaddArgs(payload)).Err()
}

// EnqueueBatch: XADD, 1000 per pipeline.
func (p *rawProducer) EnqueueBatch(ctx context.Context, n int, payload []byte) error {
	return p.pipelined(ctx, n, 1000, payload)
}

func (p *rawProducer) EnqueueDelayed(context.Context, []byte, time.Duration) error {
	return errNotApplicable
}

func (p *rawProducer) Inspect(ctx context.Context) (map[string]int64, error) {
	return streamInspect(ctx, p.rdb, p.stream, rawGroup)
}

func (p *rawProducer) Close() error { return p.rdb.Close() }

func (s *rawSystem) NewConsumer(addr, queue string) (Consumer, error) {
	return &rawConsumer{addr: addr, stream: queue}, nil
}

type rawConsumer struct {
	addr   string
	stream string
	rdb    *redis.Client
	acked  atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *rawConsumer) Start(ctx context.Context, handle func([]byte)) error {
	c.rdb = redis.NewClient(&redis.Options{Addr: c.addr, PoolSize: 2})
	err := c.rdb.XGroupCreateMkStream(ctx, c.stream, rawGroup, "0").Err()
	if err != nil && !rediserr.IsGroupExists(err) {
		return err
	}
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		if err := c.loop(ctx, handle); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "raw consumer: %v\n", err)
		}
	}()
	return nil
}

func (c *rawConsumer) loop(ctx context.Context, handle func([]byte)) error {
	consumer := fmt.Sprintf("bench-%d", os.Getpid())
	var toAck []string
	for ctx.Err() == nil {
		args := &redis.XReadGroupArgs{
			Group: rawGroup, Consumer: consumer, Streams: []string{c.stream, ">"},
			Count: rawReadCount, Block: 100 * time.Millisecond,
		}
		var ack *redis.IntCmd
		var read *redis.XStreamSliceCmd
		if len(toAck) > 0 {
			// A backlog: acknowledge the last batch and read the next one in one round trip,
			// without blocking (an empty reply means the backlog is gone).
			args.Block = -1
			_, _ = c.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
				ack = pl.XAck(ctx, c.stream, rawGroup, toAck...)
				read = pl.XReadGroup(ctx, args)
				return nil
			})
			if err := ack.Err(); err != nil {
				return fmt.Errorf("XACK: %w", err)
			}
			c.acked.Add(ack.Val())
			toAck = toAck[:0]
		} else {
			read = c.rdb.XReadGroup(ctx, args)
		}
		streams, err := read.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("XREADGROUP: %w", err)
		}
		for _, st := range streams {
			for _, m := range st.Messages {
				p, _ := m.Values[rawField].(string)
				handle([]byte(p))
				toAck = append(toAck, m.ID)
			}
		}
	}
	return nil
}

// Processed counts acknowledged entries.
func (c *rawConsumer) Processed(context.Context) (int64, error) { return c.acked.Load(), nil }

func (c *rawConsumer) Describe(context.Context) string {
	return fmt.Sprintf("acked=%d", c.acked.Load())
}

func (c *rawConsumer) Stop() error {
	c.cancel()
	<-c.done
	return c.rdb.Close()
}
