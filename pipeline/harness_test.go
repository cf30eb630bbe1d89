package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// bundle is what most tests need: a private Redis client, a client and a queue of their own.
type bundle struct {
	rdb    *redis.Client
	client *pipeline.Client
	queue  string
	keys   keys.Queue
}

func setup(t *testing.T) *bundle {
	t.Helper()
	rdb := redistest.Client(t)
	q := redistest.UniqueName(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	return &bundle{
		rdb:    rdb,
		client: client,
		queue:  q,
		keys:   keys.New(keys.DefaultPrefix, q),
	}
}

// testLogger writes the worker's logs to the test log, so a failing test shows them.
func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel).With().Timestamp().Logger()
}

// startWorker runs a worker on the bundle's queue until the test ends and waits until it consumes.
// It returns a stop function that shuts the worker down and reports Run's error.
func (b *bundle) startWorker(t *testing.T, cfg pipeline.WorkerConfig, handlers map[string]pipeline.HandlerFunc) (*pipeline.Worker, func() error) {
	t.Helper()
	if cfg.Queues == nil {
		cfg.Queues = []string{b.queue}
	}
	return startWorkerOn(t, b.rdb, cfg, handlers)
}

// startWorkerOn is startWorker on any client (a cluster's too) and cfg's queues.
func startWorkerOn(t *testing.T, rdb redis.UniversalClient, cfg pipeline.WorkerConfig, handlers map[string]pipeline.HandlerFunc) (*pipeline.Worker, func() error) {
	t.Helper()
	if cfg.Backoff.Base == 0 {
		cfg.Backoff = pipeline.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	}
	cfg.Logger = testLogger(t)
	w, err := pipeline.NewWorker(rdb, cfg)
	require.NoError(t, err)
	for typ, h := range handlers {
		w.Handle(typ, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("worker stopped at start: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("worker not ready after 10s")
	}
	stopped := false
	var runErr error
	stop := func() error {
		if stopped {
			return runErr
		}
		stopped = true
		cancel()
		select {
		case runErr = <-done:
		case <-time.After(60 * time.Second):
			runErr = fmt.Errorf("worker did not stop within 60s")
		}
		return runErr
	}
	t.Cleanup(func() { require.NoError(t, stop()) })
	return w, stop
}

// waitStatus waits until the job reaches status and returns it.
func (b *bundle) waitStatus(t *testing.T, id string, status pipeline.Status) *pipeline.Job {
	t.Helper()
	return waitJob(t, b.client, b.queue, id, status)
}

// waitJob waits until job id of queue reaches status and returns it.
func waitJob(t *testing.T, c *pipeline.Client, queue, id string, status pipeline.Status) *pipeline.Job {
	t.Helper()
	var last *pipeline.Job
	require.Eventually(t, func() bool {
		j, err := c.Get(context.Background(), queue, id)
		if err != nil {
			return false
		}
		last = j
		return j.Status == status
	}, 20*time.Second, 2*time.Millisecond, "job %s never reached %s (last: %+v)", id, status, last)
	return last
}

func (b *bundle) stats(t *testing.T) *pipeline.QueueStats {
	t.Helper()
	s, err := b.client.Stats(context.Background(), b.queue)
	require.NoError(t, err)
	return s
}

// queueKeys lists every key of the bundle's queue.
func (b *bundle) queueKeys(t *testing.T) []string {
	t.Helper()
	var out []string
	iter := b.rdb.Scan(context.Background(), 0, keys.DefaultPrefix+":{"+b.queue+"}:*", 1000).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, iter.Val())
	}
	require.NoError(t, iter.Err())
	return out
}

func echo(_ context.Context, j *pipeline.Job) ([]byte, error) { return j.Payload, nil }

// redisAt is a client for an address nothing listens on, for outage tests.
func redisAt(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
}
