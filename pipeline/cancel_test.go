package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/faultproxy"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
	"github.com/conveyorq/conveyor/stream"
)

// cancelVT is the visibility timeout of the cancel tests that must be answered by events: its
// lease renewals (every third of it) come too late to explain a handler stopped in time.
const cancelVT = time.Minute

// within is how long those tests wait for a handler's context: far under cancelVT/3.
const within = 10 * time.Second

// outcomes records, by job id, what the worker's middleware saw each attempt come to.
type outcomes struct {
	mu  sync.Mutex
	got map[string]chan error
}

func (o *outcomes) ch(id string) chan error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.got == nil {
		o.got = map[string]chan error{}
	}
	if o.got[id] == nil {
		o.got[id] = make(chan error, 10)
	}
	return o.got[id]
}

func (o *outcomes) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		o.ch(msg.UUID) <- err
		return out, err
	}
}

// next waits for job id's next attempt to end and returns its outcome (0: completed).
func (o *outcomes) next(t *testing.T, id string) pipeline.Outcome {
	t.Helper()
	select {
	case err := <-o.ch(id):
		if err == nil {
			return 0
		}
		var jerr *pipeline.JobError
		require.ErrorAs(t, err, &jerr)
		return jerr.Outcome
	case <-time.After(30 * time.Second):
		t.Fatalf("job %s: no attempt ended", id)
	}
	return 0
}

// Issue 19: a cancel reaches the worker running the job through the queue's job events, well
// before any lease renewal: the handler's context ends with ErrJobCanceled, and the job ends
// canceled whatever the handler returns then, a late result or an error, and also when it
// ignored its context (then its late result is refused). Never a retry, never a failure. On a
// standalone server (sharded Pub/Sub, and plain) and on a cluster, where a queue of three
// partitions has its events on three masters.
func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	backends := []struct {
		name       string
		rdb        func(t *testing.T) redis.UniversalClient
		partitions int
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }, 0},
		{"standalone-plain", func(t *testing.T) redis.UniversalClient {
			rdb := redistest.Client(t)
			events.SetMode(rdb, events.Plain)
			return rdb
		}, 0},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }, 0},
		{"cluster-3-partitions", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }, 3},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{rdb: be.rdb(t)})
			ctx := t.Context()
			if be.partitions > 0 {
				_, err := b.insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{Partitions: be.partitions})
				require.NoError(t, err)
			}
			started := make(chan string, 10)
			causes := make(chan error, 10)
			release := make(chan struct{}) // the context-ignoring handler returns when closed
			var oc outcomes
			handler := func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
				started <- j.ID
				switch j.Type {
				case "ignores":
					// The handler never looks at ctx; the test does, on the side.
					go func() { <-ctx.Done(); causes <- context.Cause(ctx) }()
					<-release
					return []byte("late"), nil
				case "result":
					<-ctx.Done()
					causes <- context.Cause(ctx)
					return []byte("late"), nil
				}
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return nil, ctx.Err()
			}
			w, _ := b.startWorkerWith(t, pipeline.WorkerConfig{VisibilityTimeout: cancelVT},
				map[string]pipeline.HandlerFunc{"honors": handler, "result": handler, "ignores": handler}, oc.middleware)

			for i, typ := range []string{"honors", "result", "ignores", "honors", "result", "honors"} {
				// Each priority level is a stream of its own; the queue's events are one channel.
				j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: typ}, pipeline.WithMaxRetries(5),
					pipeline.WithPriority(1+i%4))
				require.NoError(t, err)
				require.Equal(t, j.ID, <-started)
				require.NoError(t, b.client.Cancel(ctx, b.queue, j.ID))
				got, err := b.client.Get(ctx, b.queue, j.ID)
				require.NoError(t, err)
				require.Equal(t, status.Canceled, got.Status, typ)
				select {
				case cause := <-causes:
					require.ErrorIs(t, cause, pipeline.ErrJobCanceled, typ)
				case <-time.After(within):
					t.Fatalf("%s: the handler's context did not end: the cancel's event did not reach the worker", typ)
				}
				if typ == "ignores" {
					close(release) // its late result comes now
				}
				require.Equal(t, pipeline.OutcomeCanceled, oc.next(t, j.ID), typ)
				got, err = b.client.Get(ctx, b.queue, j.ID)
				require.NoError(t, err)
				require.Equal(t, status.Canceled, got.Status, typ)
				require.Empty(t, got.Result, "%s: a late result is not kept", typ)
				require.LessOrEqual(t, got.Attempt, 1, "%s: never run again", typ)
			}
			st, err := b.client.Stats(ctx, b.queue)
			require.NoError(t, err)
			require.EqualValues(t, 6, st.Canceled)
			require.Zero(t, st.Failed)
			require.Zero(t, st.Retried)
			require.Zero(t, st.Completed)
			// The slot is freed once the middleware chain has returned, just after the outcome.
			require.Eventually(t, func() bool { return w.Running() == 0 }, 10*time.Second, time.Millisecond)
		})
	}
}

// startWorkerWith is startWorker with middleware.
func (b *testBundle) startWorkerWith(t *testing.T, cfg pipeline.WorkerConfig, handlers map[string]pipeline.HandlerFunc,
	mw ...message.HandlerMiddleware) (*pipeline.Worker, func() error) {
	t.Helper()
	cfg.Queues = []string{b.queue}
	return startWorkerOn(t, b.rdb, cfg, handlers, mw...)
}

// A cancel whose event the worker missed (the canceling process publishes none: an older
// version, or Mode None) is found by the lease renewal, which ends the handler's context with
// stream.ErrLeaseLost; the job still ends canceled, not lost, retried or failed.
func TestCancelMissedEventFallsBackOnLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	quiet := redis.NewClient(&redis.Options{Addr: b.addr(t)})
	t.Cleanup(func() { _ = quiet.Close() })
	events.SetMode(quiet, events.None)
	canceler, err := pipeline.NewClient(quiet, pipeline.ClientConfig{})
	require.NoError(t, err)

	started := make(chan struct{}, 1)
	cause := make(chan error, 1)
	var oc outcomes
	b.startWorkerWith(t, pipeline.WorkerConfig{VisibilityTimeout: 600 * time.Millisecond},
		map[string]pipeline.HandlerFunc{"block": func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
			started <- struct{}{}
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil, errors.New("stopped")
		}}, oc.middleware)
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "block"})
	require.NoError(t, err)
	<-started
	require.NoError(t, canceler.Cancel(ctx, b.queue, j.ID))
	select {
	case err := <-cause:
		require.ErrorIs(t, err, stream.ErrLeaseLost)
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's context was not cancelled at the next lease renewal")
	}
	require.Equal(t, pipeline.OutcomeCanceled, oc.next(t, j.ID))
	got, err := b.client.Get(ctx, b.queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, status.Canceled, got.Status)
}

// A cancel sent while the worker's events subscription is down is lost, but the subscription
// made again renews the worker's leases at once: the handler stops then, long before the next
// renewal is due.
func TestCancelWhileEventsDownRenewsOnReconnect(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	proxy := faultproxy.Start(t, srv.Addr)
	wrdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = wrdb.Close() })
	b := setup(t)
	ctx := t.Context()

	started := make(chan struct{}, 1)
	cause := make(chan error, 1)
	var oc outcomes
	cfg := pipeline.WorkerConfig{Queues: []string{b.queue}, VisibilityTimeout: cancelVT}
	startWorkerOn(t, wrdb, cfg, map[string]pipeline.HandlerFunc{"block": func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil, ctx.Err()
	}}, oc.middleware)
	// The worker's events subscription is confirmed once a cancel's event reaches it: cancel a
	// first job, running, the usual way.
	first, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "block"})
	require.NoError(t, err)
	<-started
	require.NoError(t, b.client.Cancel(ctx, b.queue, first.ID))
	select {
	case err := <-cause:
		require.ErrorIs(t, err, pipeline.ErrJobCanceled)
	case <-time.After(within):
		t.Fatal("the first cancel did not reach the worker")
	}
	require.Equal(t, pipeline.OutcomeCanceled, oc.next(t, first.ID))

	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "block"})
	require.NoError(t, err)
	<-started
	proxy.Refuse(true)
	proxy.CutAll()
	require.NoError(t, b.client.Cancel(ctx, b.queue, j.ID)) // its event reaches nobody
	proxy.Refuse(false)
	select {
	case err := <-cause:
		require.ErrorIs(t, err, stream.ErrLeaseLost, "found by the renewal the new subscription asked for")
	case <-time.After(within):
		t.Fatal("the handler's context did not end after the events subscription was made again")
	}
	require.Equal(t, pipeline.OutcomeCanceled, oc.next(t, j.ID))
}

// Jobs that no handler runs end canceled too, and never run afterwards: one queued, one
// waiting for its retry (a chain of retries, scheduled), and one whose worker died while it
// ran (its entry pending for a consumer that is gone: recovery must not bring it back).
func TestCancelJobNotRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	queued, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "run"})
	require.NoError(t, err)
	require.NoError(t, b.client.Cancel(ctx, b.queue, queued.ID))

	// A worker that dies holding a job: its client closed mid-run, as in a crash.
	victimRDB := redis.NewClient(&redis.Options{Addr: b.addr(t), MaxRetries: -1})
	victim, err := pipeline.NewWorker(victimRDB, pipeline.WorkerConfig{Name: "victim", Queues: []string{b.queue},
		VisibilityTimeout: 600 * time.Millisecond, ShutdownTimeout: 100 * time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	held := make(chan struct{})
	victim.Handle("hold", func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
		close(held)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	vctx, stopVictim := context.WithCancel(context.Background())
	victimDone := make(chan struct{})
	go func() { defer close(victimDone); _ = victim.Run(vctx) }()
	t.Cleanup(func() { stopVictim(); <-victimDone })
	orphan, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "hold"})
	require.NoError(t, err)
	<-held
	_ = victimRDB.Close()
	require.NoError(t, b.client.Cancel(ctx, b.queue, orphan.ID))

	// Nothing is left pending for recovery to put back: the dead worker's entry is gone.
	pend, err := b.rdb.XPending(ctx, b.q.Stream(), "conveyor").Result()
	require.NoError(t, err)
	require.Zero(t, pend.Count, "the canceled job's entry is no longer pending")

	// The rescuer fails its jobs' first attempts, so a job waits for its retry, scheduled.
	ran := make(chan string, 100)
	b.startWorker(t, pipeline.WorkerConfig{Name: "rescuer", VisibilityTimeout: 600 * time.Millisecond,
		RecoveryInterval: 50 * time.Millisecond, Backoff: pipeline.Backoff{Base: time.Hour, Max: time.Hour}},
		map[string]pipeline.HandlerFunc{
			"run":  func(_ context.Context, j *pipeline.Job) ([]byte, error) { ran <- j.ID; return nil, nil },
			"hold": func(_ context.Context, j *pipeline.Job) ([]byte, error) { ran <- j.ID; return nil, nil },
			"flaky": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
				ran <- j.ID
				return nil, errors.New("first attempt fails")
			},
		})
	retrying, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "flaky"}, pipeline.WithMaxRetries(3))
	require.NoError(t, err)
	require.Equal(t, retrying.ID, <-ran, "the queued job canceled before it never runs")
	b.waitStatus(t, retrying.ID, status.Scheduled)
	require.NoError(t, b.client.Cancel(ctx, b.queue, retrying.ID))
	_, err = b.rdb.ZScore(ctx, b.q.Scheduled(), retrying.ID).Result()
	require.ErrorIs(t, err, redis.Nil, "the retry is no longer scheduled")
	last, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "run"})
	require.NoError(t, err)
	require.Equal(t, last.ID, <-ran, "nothing canceled ran before the last job")
	b.waitStatus(t, last.ID, status.Completed)
	for _, id := range []string{queued.ID, orphan.ID, retrying.ID} {
		got, err := b.client.Get(ctx, b.queue, id)
		require.NoError(t, err)
		require.Equal(t, status.Canceled, got.Status, id)
	}
	st, err := b.client.Stats(ctx, b.queue)
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Canceled)
	require.Zero(t, st.Failed)
}

// hgetHook reports each HGET the client sends, once answered, by key.
type hgetHook struct{ keys chan string }

func (h hgetHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h hgetHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h hgetHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); len(args) >= 2 && cmd.Name() == "hget" {
			select {
			case h.keys <- args[1].(string):
			default:
			}
		}
		return err
	}
}

// A "canceled" message on the channel is untrusted (anyone who may publish there can send
// one): the worker reads the job's record and leaves a job that is not canceled running.
func TestCancelSpoofedEventIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	hook := hgetHook{keys: make(chan string, 10)}
	wrdb := redis.NewClient(&redis.Options{Addr: b.addr(t)})
	wrdb.AddHook(hook)
	t.Cleanup(func() { _ = wrdb.Close() })
	started := make(chan struct{}, 1)
	cause := make(chan error, 1)
	var oc outcomes
	startWorkerOn(t, wrdb, pipeline.WorkerConfig{Queues: []string{b.queue}, VisibilityTimeout: cancelVT},
		map[string]pipeline.HandlerFunc{"block": func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
			started <- struct{}{}
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil, ctx.Err()
		}}, oc.middleware)
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "block"})
	require.NoError(t, err)
	<-started
	require.NoError(t, b.rdb.SPublish(ctx, b.q.Events(), "canceled 1 "+j.ID).Err())
	for read := false; !read; {
		select {
		case key := <-hook.keys:
			read = key == b.q.Job(j.ID) // the worker read the record: in_progress
		case <-time.After(within):
			t.Fatal("the worker did not check the event against the job's record")
		}
	}
	select {
	case err := <-cause:
		t.Fatalf("a spoofed event stopped the handler (%v)", err)
	default:
	}
	require.NoError(t, b.client.Cancel(ctx, b.queue, j.ID))
	select {
	case err := <-cause:
		require.ErrorIs(t, err, pipeline.ErrJobCanceled)
	case <-time.After(within):
		t.Fatal("the real cancel did not stop the handler")
	}
	require.Equal(t, pipeline.OutcomeCanceled, oc.next(t, j.ID))
}

// A job with a timeout runs its handler on a goroutine of its own, so a handler that ignores
// its context does not hold the slot after a cancel: the attempt ends canceled (100 ms after the
// cancel at most) while the handler still runs, and its late return changes nothing.
func TestCancelIgnoringHandlerWithTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	returned := make(chan struct{})
	var oc outcomes
	w, _ := b.startWorkerWith(t, pipeline.WorkerConfig{VisibilityTimeout: cancelVT},
		map[string]pipeline.HandlerFunc{"deaf": func(context.Context, *pipeline.Job) ([]byte, error) {
			defer close(returned)
			started <- struct{}{}
			<-release
			return []byte("late"), nil
		}}, oc.middleware)
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "deaf"}, pipeline.WithTimeout(time.Hour))
	require.NoError(t, err)
	<-started
	require.NoError(t, b.client.Cancel(ctx, b.queue, j.ID))
	require.Equal(t, pipeline.OutcomeCanceled, oc.next(t, j.ID), "ended while the handler still runs")
	require.Eventually(t, func() bool { return w.Running() == 0 }, 10*time.Second, time.Millisecond, "the slot is free")
	close(release)
	<-returned
	got, err := b.client.Get(ctx, b.queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, status.Canceled, got.Status)
	require.Empty(t, got.Result)
}
