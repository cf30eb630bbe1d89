package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynqSystem is asynq v0.26 with its stock settings (task retention 0, delayed-task forwarding
// every 5s) and the given server Concurrency.
type asynqSystem struct {
	concurrency int
}

const asynqTaskType = "noop"

func (s *asynqSystem) Name() string  { return fmt.Sprintf("asynq_c%d", s.concurrency) }
func (s *asynqSystem) Delayed() bool { return true }

// asynqGoroutines is how many goroutines publish in Preload and Live: asynq has no batch call.
const asynqGoroutines = 8

func (s *asynqSystem) NewProducer(ctx context.Context, addr, queue string) (Producer, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2 * asynqGoroutines})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	return &asynqProducer{rdb: rdb, c: asynq.NewClientFromRedisClient(rdb), queue: queue}, nil
}

type asynqProducer struct {
	rdb   *redis.Client
	c     *asynq.Client
	queue string
}

func (p *asynqProducer) enqueue(ctx context.Context, payload []byte, opts ...asynq.Option) error {
	_, err := p.c.EnqueueContext(ctx, asynq.NewTask(asynqTaskType, payload), append(opts, asynq.Queue(p.queue))...)
	return err
}

// Preload: Enqueue from 8 goroutines.
func (p *asynqProducer) Preload(ctx context.Context, n int, payload []byte) error {
	return parallel(ctx, n, asynqGoroutines, func(ctx context.Context) error { return p.enqueue(ctx, payload) })
}

// Live: Enqueue from 8 goroutines.
func (p *asynqProducer) Live(ctx context.Context, n int, payload []byte) error {
	return p.Preload(ctx, n, payload)
}

func (p *asynqProducer) EnqueueOne(ctx context.Context, payload []byte) error {
	return p.enqueue(ctx, payload)
}

func (p *asynqProducer) EnqueueBatch(context.Context, int, []byte) error { return errNotApplicable }

func (p *asynqProducer) EnqueueDelayed(ctx context.Context, payload []byte, delay time.Duration) error {
	return p.enqueue(ctx, payload, asynq.ProcessIn(delay))
}

func (p *asynqProducer) Inspect(ctx context.Context) (map[string]int64, error) {
	return asynqInspect(ctx, p.rdb, p.queue)
}

func asynqInspect(ctx context.Context, rdb *redis.Client, queue string) (map[string]int64, error) {
	base := "asynq:{" + queue + "}:"
	var pending, active, scheduled, dbsize *redis.IntCmd
	var processed *redis.StringCmd
	_, err := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pending = pl.LLen(ctx, base+"pending")
		active = pl.LLen(ctx, base+"active")
		scheduled = pl.ZCard(ctx, base+"scheduled")
		processed = pl.Get(ctx, base+"processed")
		dbsize = pl.DBSize(ctx)
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, err
	}
	proc, _ := processed.Int64()
	return map[string]int64{
		"pending": pending.Val(), "active": active.Val(), "scheduled": scheduled.Val(),
		"processed": proc, "dbsize": dbsize.Val(),
	}, nil
}

func (p *asynqProducer) Close() error {
	_ = p.c.Close()
	return p.rdb.Close()
}

func (s *asynqSystem) NewConsumer(addr, queue string) (Consumer, error) {
	return &asynqConsumer{sys: s, addr: addr, queue: queue}, nil
}

type asynqConsumer struct {
	sys   *asynqSystem
	addr  string
	queue string
	srv   *asynq.Server
	rdb   *redis.Client // for the processed counter
}

func (c *asynqConsumer) Start(ctx context.Context, handle func([]byte)) error {
	c.rdb = redis.NewClient(&redis.Options{Addr: c.addr, PoolSize: 2})
	c.srv = asynq.NewServer(asynq.RedisClientOpt{Addr: c.addr}, asynq.Config{
		Concurrency:     c.sys.concurrency,
		Queues:          map[string]int{c.queue: 1},
		LogLevel:        asynq.WarnLevel,
		Logger:          stderrLogger{},
		ShutdownTimeout: 5 * time.Second,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(asynqTaskType, func(_ context.Context, t *asynq.Task) error {
		handle(t.Payload())
		return nil
	})
	return c.srv.Start(mux)
}

// Processed is asynq's own per-queue processed counter, incremented when a task is marked done.
func (c *asynqConsumer) Processed(ctx context.Context) (int64, error) {
	n, err := c.rdb.Get(ctx, "asynq:{"+c.queue+"}:processed").Int64()
	if err == redis.Nil {
		return 0, nil
	}
	return n, err
}

func (c *asynqConsumer) Describe(ctx context.Context) string {
	m, err := asynqInspect(ctx, c.rdb, c.queue)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprint(m)
}

func (c *asynqConsumer) Stop() error {
	c.srv.Shutdown()
	return c.rdb.Close()
}

// stderrLogger is asynq's Logger writing to stderr.
type stderrLogger struct{}

func (stderrLogger) log(level string, args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"asynq " + level + ":"}, args...)...)
}
func (l stderrLogger) Debug(args ...any) { l.log("debug", args...) }
func (l stderrLogger) Info(args ...any)  { l.log("info", args...) }
func (l stderrLogger) Warn(args ...any)  { l.log("warn", args...) }
func (l stderrLogger) Error(args ...any) { l.log("error", args...) }
func (l stderrLogger) Fatal(args ...any) { l.log("fatal", args...); os.Exit(1) }
