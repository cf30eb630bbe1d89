package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/metrics"
	"github.com/conveyorq/conveyor/pipeline"
)

// conveyorSystem is Conveyor: Client.EnqueueBatch / Enqueue, and one Worker with the default
// retention (24h), so finished jobs keep their state like asynq's tasks keep theirs.
type conveyorSystem struct {
	concurrency int
	batch       int
	// metrics wires in everything `conveyor worker --metrics-addr` does (package metrics:
	// middleware, hooks, the Redis hook, the queue collector) with a scrape every second.
	metrics bool
	// bound, when above 0, is set as the queue's max_waiting before the run, far above what
	// the run publishes: the cost of a bound that is set and never reached.
	bound int
	// keys, when set, seals payloads and results (ClientConfig.Keys, WorkerConfig.Keys).
	keys *keyring.Keyring
}

const conveyorJobType = "noop"

func (s *conveyorSystem) Name() string {
	switch {
	case s.metrics:
		return "conveyor_metrics"
	case s.bound > 0:
		return "conveyor_bounded"
	case s.keys != nil:
		return "conveyor_keys"
	}
	return "conveyor"
}
func (s *conveyorSystem) Delayed() bool { return true }

func (s *conveyorSystem) NewProducer(ctx context.Context, addr, queue string) (Producer, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Keys: s.keys})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	if s.bound > 0 {
		if err := setBound(ctx, rdb, queue, s.bound); err != nil {
			rdb.Close()
			return nil, err
		}
	}
	return &conveyorProducer{rdb: rdb, c: c, queue: queue}, nil
}

type conveyorProducer struct {
	rdb   *redis.Client
	c     *pipeline.Client
	queue string
}

func (p *conveyorProducer) batches(ctx context.Context, n, size int, payload []byte) error {
	tasks := make([]pipeline.Task, size)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: conveyorJobType, Payload: payload}
	}
	return chunks(ctx, n, size, func(ctx context.Context, k int) error {
		_, err := p.c.EnqueueBatch(ctx, p.queue, stamp(tasks[:k]))
		return err
	})
}

// distinctPayloads is the flag -distinct-payloads.
var distinctPayloads bool

// stampSeq numbers the stamped payloads of this process.
var stampSeq atomic.Uint64

// stamp returns tasks as they are, or, with -distinct-payloads, copies whose payloads begin
// with a number no other job of this process has (their length unchanged where it has room).
func stamp(tasks []pipeline.Task) []pipeline.Task {
	if !distinctPayloads {
		return tasks
	}
	out := make([]pipeline.Task, len(tasks))
	for i, t := range tasks {
		p := bytes.Clone(t.Payload)
		n := strconv.AppendUint(nil, stampSeq.Add(1), 10)
		copy(p, n)
		t.Payload = p
		out[i] = t
	}
	return out
}

// Preload: EnqueueBatch in chunks of 1000.
func (p *conveyorProducer) Preload(ctx context.Context, n int, payload []byte) error {
	return p.batches(ctx, n, 1000, payload)
}

// Live: EnqueueBatch in chunks of 100 from 4 goroutines (asynq's producer gets 8 goroutines
// of single Enqueue calls; one goroutine waiting for each batch's reply leaves Redis idle).
func (p *conveyorProducer) Live(ctx context.Context, n int, payload []byte) error {
	const goroutines, size = 4, 100
	tasks := make([]pipeline.Task, size)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: conveyorJobType, Payload: payload}
	}
	var claimed atomic.Int64 // jobs claimed by the goroutines, so that exactly n are published
	return parallel(ctx, goroutines, goroutines, func(ctx context.Context) error {
		for {
			end := claimed.Add(size)
			start := end - size
			if start >= int64(n) {
				return nil
			}
			if _, err := p.c.EnqueueBatch(ctx, p.queue, stamp(tasks[:min(end, int64(n))-start])); err != nil {
				return err
			}
		}
	})
}

func (p *conveyorProducer) EnqueueOne(ctx context.Context, payload []byte) error {
	_, err := p.c.Enqueue(ctx, p.queue, stamp([]pipeline.Task{{Type: conveyorJobType, Payload: payload}})[0])
	return err
}

// EnqueueBatch: EnqueueBatch in chunks of 1000.
func (p *conveyorProducer) EnqueueBatch(ctx context.Context, n int, payload []byte) error {
	return p.batches(ctx, n, 1000, payload)
}

func (p *conveyorProducer) EnqueueDelayed(ctx context.Context, payload []byte, delay time.Duration) error {
	_, err := p.c.Enqueue(ctx, p.queue, pipeline.Task{Type: conveyorJobType, Payload: payload}, pipeline.WithDelay(delay))
	return err
}

// Inspect reports the queue's gauges and counters. It checks that no key grows without bound:
// the stream must be empty after a drain, and every job hash must have a TTL.
func (p *conveyorProducer) Inspect(ctx context.Context) (map[string]int64, error) {
	q := keys.New(p.c.Prefix(), p.queue)
	out := map[string]int64{}
	if st, err := p.c.Stats(ctx, p.queue); err == nil {
		out["enqueued"], out["completed"], out["failed"] = st.Enqueued, st.Completed, st.Failed
		out["retried"], out["recovered"], out["refused"] = st.Retried, st.Recovered, st.Refused
		out["in_progress"], out["queued"], out["scheduled"], out["dead"] = st.InProgress, st.Queued, st.Scheduled, st.Dead
	} else {
		return nil, err
	}
	xlen, err := p.rdb.XLen(ctx, q.Stream()).Result()
	if err != nil {
		return nil, err
	}
	out["stream_len"] = xlen
	var with, without, hashes int64
	var cursor uint64
	for {
		ks, next, err := p.rdb.Scan(ctx, cursor, q.JobPrefix()+"*", 1000).Result()
		if err != nil {
			return nil, err
		}
		if len(ks) > 0 {
			cmds := make([]*redis.DurationCmd, len(ks))
			if _, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
				for i, k := range ks {
					cmds[i] = pl.PTTL(ctx, k)
				}
				return nil
			}); err != nil {
				return nil, err
			}
			for _, c := range cmds {
				switch d := c.Val(); {
				case d == -2: // gone meanwhile
				case d < 0:
					without++
					hashes++
				default:
					with++
					hashes++
				}
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	out["job_hashes"], out["job_hashes_with_ttl"], out["job_hashes_without_ttl"] = hashes, with, without
	if n, err := p.rdb.DBSize(ctx).Result(); err == nil {
		out["dbsize"] = n
	}
	return out, nil
}

func (p *conveyorProducer) Close() error { return p.rdb.Close() }

// NewConsumer runs one pipeline.Worker with the configured Concurrency and ReadBatch and a no-op
// handler. Warnings and errors of the worker go to stderr.
func (s *conveyorSystem) NewConsumer(addr, queue string) (Consumer, error) {
	return &conveyorConsumer{sys: s, addr: addr, queue: queue}, nil
}

type conveyorConsumer struct {
	sys    *conveyorSystem
	addr   string
	queue  string
	rdb    *redis.Client
	client *pipeline.Client
	cancel context.CancelFunc
	done   chan error
}

func (c *conveyorConsumer) Start(ctx context.Context, handle func([]byte)) error {
	c.rdb = redis.NewClient(&redis.Options{Addr: c.addr})
	var err error
	if c.client, err = pipeline.NewClient(c.rdb, pipeline.ClientConfig{Keys: c.sys.keys}); err != nil {
		return err
	}
	logger := zerolog.New(os.Stderr).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	cfg := pipeline.WorkerConfig{
		Queues:          []string{c.queue},
		Concurrency:     c.sys.concurrency,
		ReadBatch:       c.sys.batch,
		ShutdownTimeout: 5 * time.Second,
		Logger:          logger,
		Keys:            c.sys.keys,
	}
	wctx, cancel := context.WithCancel(ctx)
	if c.sys.metrics {
		if err := instrument(wctx, c.rdb, &cfg); err != nil {
			cancel()
			return err
		}
	}
	w, err := pipeline.NewWorker(c.rdb, cfg)
	if err != nil {
		cancel()
		return err
	}
	w.Handle(conveyorJobType, func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		handle(j.Payload)
		return nil, nil
	})
	c.cancel = cancel
	c.done = make(chan error, 1)
	go func() { c.done <- w.Run(wctx) }()
	select {
	case <-w.Ready():
		return nil
	case err := <-c.done:
		return fmt.Errorf("conveyor worker stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		return errors.New("conveyor worker not ready within 30s")
	}
}

// Processed is the queue's completed counter (Client.Stats), written by the same script that
// marks the job completed.
func (c *conveyorConsumer) Processed(ctx context.Context) (int64, error) {
	st, err := c.client.Stats(ctx, c.queue)
	if err != nil {
		return 0, err
	}
	return st.Completed, nil
}

func (c *conveyorConsumer) Describe(ctx context.Context) string {
	st, err := c.client.Stats(ctx, c.queue)
	if err != nil {
		return "stats: " + err.Error()
	}
	b, _ := json.Marshal(st)
	return "stats=" + string(b)
}

func (c *conveyorConsumer) Stop() error {
	c.cancel()
	var err error
	select {
	case err = <-c.done:
	case <-time.After(12 * time.Second):
		err = errors.New("worker Run did not return within 12s of cancel")
	}
	_ = c.rdb.Close()
	return err
}

// instrument wires the metrics into rdb and cfg as the CLI's --metrics-addr does, and scrapes
// them every second until ctx ends.
func instrument(ctx context.Context, rdb *redis.Client, cfg *pipeline.WorkerConfig) error {
	reg := prometheus.NewRegistry()
	m, err := metrics.NewWorker(reg)
	if err != nil {
		return err
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		return err
	}
	qc, err := metrics.NewQueueCollector(insp, metrics.QueueCollectorConfig{Queues: cfg.Queues})
	if err != nil {
		return err
	}
	if err := reg.Register(qc); err != nil {
		return err
	}
	rdb.AddHook(m.RedisHook())
	cfg.Hooks = m.Hooks()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_, _ = reg.Gather()
			}
		}
	}()
	return nil
}

// setBound sets the queue's max_waiting (policy reject) before its producer's first publish,
// which reads it with the queue's route.
func setBound(ctx context.Context, rdb redis.UniversalClient, queue string, n int) error {
	in, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		return err
	}
	if _, err := in.CreateQueue(ctx, queue, pipeline.QueueOptions{}); err != nil {
		return err
	}
	_, err = in.UpdateQueue(ctx, queue, pipeline.QueuePatch{MaxWaiting: &n})
	return err
}

// benchKeyring is conveyor_keys' keyring: a fixed key, since only the cost is measured.
func benchKeyring() *keyring.Keyring {
	k, err := keyring.Parse("bench AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=")
	if err != nil {
		panic(err)
	}
	return k
}
