package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// testBundle is the package's one test bundle (river's maintenance tests' shape): a Redis
// client, a Client and an Inspector over it, and a queue of the test's own with its keys.
type testBundle struct {
	rdb    redis.UniversalClient
	client *pipeline.Client
	insp   *pipeline.Inspector
	queue  string
	q      keys.Queue
	// now is the Client's clock with setupOpts.fixedClock, which stands still so that due
	// times can be compared exactly; zero otherwise.
	now time.Time
}

// setupOpts changes what setup makes; the zero value is the usual test.
type setupOpts struct {
	rdb        redis.UniversalClient // default: a client of the package's shared server
	client     pipeline.ClientConfig // the Client's
	fixedClock bool                  // the Client's Now answers testBundle.now
}

// setup returns the bundle of a test: the first of opts, if any, says how it differs.
func setup(t *testing.T, opts ...setupOpts) *testBundle {
	t.Helper()
	var o setupOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.rdb == nil {
		o.rdb = redistest.Client(t)
	}
	b := &testBundle{rdb: o.rdb, queue: redistest.UniqueName(t)}
	b.q = keys.New(keys.DefaultPrefix, b.queue)
	if o.fixedClock {
		b.now = time.Now().Truncate(time.Millisecond)
		o.client.Now = func() time.Time { return b.now }
	}
	var err error
	b.client, err = pipeline.NewClient(o.rdb, o.client)
	require.NoError(t, err)
	b.insp, err = pipeline.NewInspector(o.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	return b
}

// addr is the address of the bundle's server; its client must be a plain one (not a
// cluster's or a failover one).
func (b *testBundle) addr(t *testing.T) string {
	t.Helper()
	c, ok := b.rdb.(*redis.Client)
	require.True(t, ok, "the bundle's client is a %T", b.rdb)
	return c.Options().Addr
}

// testLogger writes the worker's logs to the test log, so a failing test shows them.
func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel).With().Timestamp().Logger()
}

// startWorker runs a worker on the bundle's queue until the test ends and waits until it consumes.
// It returns a stop function that shuts the worker down and reports Run's error.
func (b *testBundle) startWorker(t *testing.T, cfg pipeline.WorkerConfig, handlers map[string]pipeline.HandlerFunc) (*pipeline.Worker, func() error) {
	t.Helper()
	if cfg.Queues == nil {
		cfg.Queues = []string{b.queue}
	}
	return startWorkerOn(t, b.rdb, cfg, handlers)
}

// startWorkerOn is startWorker on any client (a cluster's too) and cfg's queues, with mw (Use).
func startWorkerOn(t *testing.T, rdb redis.UniversalClient, cfg pipeline.WorkerConfig, handlers map[string]pipeline.HandlerFunc,
	mw ...message.HandlerMiddleware) (*pipeline.Worker, func() error) {
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
	w.Use(mw...)
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
func (b *testBundle) waitStatus(t *testing.T, id string, status status.Status) *pipeline.Job {
	t.Helper()
	return waitJob(t, b.client, b.queue, id, status)
}

// waitJob waits until job id of queue reaches status and returns it.
func waitJob(t *testing.T, c *pipeline.Client, queue, id string, status status.Status) *pipeline.Job {
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

func (b *testBundle) stats(t *testing.T) *pipeline.QueueStats {
	t.Helper()
	s, err := b.client.Stats(context.Background(), b.queue)
	require.NoError(t, err)
	return s
}

// queueKeys lists every key of the bundle's queue.
func (b *testBundle) queueKeys(t *testing.T) []string {
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
