package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/faultproxy"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// waitResult is what a Wait returned.
type waitResult struct {
	job *pipeline.Job
	err error
}

// startWait runs w.Wait in the background.
func startWait(ctx context.Context, w *pipeline.Waiter, queue, id string) <-chan waitResult {
	out := make(chan waitResult, 1)
	go func() {
		j, err := w.Wait(ctx, queue, id)
		out <- waitResult{j, err}
	}()
	return out
}

func waited(t *testing.T, ch <-chan waitResult) *pipeline.Job {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r.job
	case <-time.After(60 * time.Second):
		t.Fatal("Wait did not return")
		return nil
	}
}

// waitOnNewJob publishes an echo job with payload under a prefix of the test's own and starts a
// Waiter's wait on it, returning once the wait's subscription is confirmed and its read marked
// the job watched (so that finish.lua announces its outcome from then on).
func waitOnNewJob(t *testing.T, payload string) (*pipeline.Client, *pipeline.Waiter, string, *pipeline.Job, <-chan waitResult) {
	t.Helper()
	prefix, queue := redistest.UniqueName(t), "waits"
	rdb := redistest.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	waiter := client.NewWaiter()
	t.Cleanup(waiter.Close)
	job, err := client.Enqueue(t.Context(), queue, pipeline.Task{Type: "echo", Payload: []byte(payload)})
	require.NoError(t, err)
	res := startWait(t.Context(), waiter, queue, job.ID)
	require.Eventually(t, func() bool { return pipeline.WaiterReady(waiter, queue) }, 30*time.Second, time.Millisecond)
	requireWatched(t, rdb, keys.New(prefix, queue), job.ID)
	return client, waiter, prefix, job, res
}

// requireWatched waits until a wait's read marked job id of q watched.
func requireWatched(t *testing.T, rdb redis.UniversalClient, q keys.Queue, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, err := rdb.HGet(t.Context(), q.Job(id), keys.FieldWatched).Result()
		return err == nil && v == "1"
	}, 30*time.Second, time.Millisecond, "the wait marks %s watched", id)
}

// A wait is woken by the job's event: the worker's finish.lua announces completed (the wait
// marked the job watched), and Wait returns the completed job. The
// worker starts only once the wait's subscription is confirmed and the job marked, so the event
// cannot come before it.
func TestWaitWokenByEvent(t *testing.T) {
	t.Parallel()
	client, waiter, prefix, job, res := waitOnNewJob(t, `"hi"`)
	queue := job.Queue

	w, err := pipeline.NewWorker(redistest.Client(t), pipeline.WorkerConfig{Queues: []string{queue}, Prefix: prefix})
	require.NoError(t, err)
	w.Handle("echo", func(_ context.Context, j *pipeline.Job) ([]byte, error) { return j.Payload, nil })
	jobtest.RunWorker(t, w)
	j := waited(t, res)
	require.Equal(t, status.Completed, j.Status)
	require.Equal(t, `"hi"`, string(j.Result))
	require.GreaterOrEqual(t, pipeline.WaiterDelivered(waiter), int64(1), "an event woke the wait")

	// A wait on a job that ended already answers at once, and on no job with ErrNotFound.
	j, err = client.Wait(t.Context(), queue, job.ID)
	require.NoError(t, err)
	require.Equal(t, status.Completed, j.Status)
	_, err = client.Wait(t.Context(), queue, "nope")
	require.ErrorIs(t, err, pipeline.ErrNotFound)
}

// An event that is never published (the worker's client runs with events.None, as a worker of
// an older version would) is caught by the fallback read: the wait still returns the completed
// job, and no event woke it.
func TestWaitCatchesMissedEvent(t *testing.T) {
	t.Parallel()
	_, waiter, prefix, job, res := waitOnNewJob(t, `1`)
	queue := job.Queue

	silent := redistest.Client(t)
	events.SetMode(silent, events.None)
	w, err := pipeline.NewWorker(silent, pipeline.WorkerConfig{Queues: []string{queue}, Prefix: prefix})
	require.NoError(t, err)
	w.Handle("echo", func(_ context.Context, j *pipeline.Job) ([]byte, error) { return nil, nil })
	jobtest.RunWorker(t, w)
	require.Equal(t, status.Completed, waited(t, res).Status)
	require.Zero(t, pipeline.WaiterDelivered(waiter), "no event was published: the fallback read caught the end")
}

// On a cluster, the events of queues and partitions held by different masters all arrive: a
// wait on a job in each of three queues (one per master) and in each partition of a queue of
// three partitions is woken by the canceled event cancel.lua publishes on the job's shard.
func TestWaitClusterEvents(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	cc := c.Client(t)
	ctx := t.Context()
	prefix := redistest.UniqueName(t)
	client, err := pipeline.NewClient(cc, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(cc, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	waiter := client.NewWaiter()
	t.Cleanup(waiter.Close)

	// Three queues on three masters.
	type target struct{ queue, part, id string }
	var targets []target
	masters := map[string]bool{}
	for i := 0; len(masters) < len(c.Addrs); i++ {
		require.Less(t, i, 1000)
		q := fmt.Sprintf("q%d", i)
		addr, err := redistest.MasterOf(ctx, cc, keys.New(prefix, q).Events())
		require.NoError(t, err)
		if !masters[addr] {
			masters[addr] = true
			targets = append(targets, target{q, q, ""})
		}
	}
	// A partitioned queue, with a job routed to each partition.
	const parts = 3
	_, err = insp.CreateQueue(ctx, "parted", pipeline.QueueOptions{Partitions: parts})
	require.NoError(t, err)
	for p := range parts {
		for i := 0; ; i++ {
			id := fmt.Sprintf("job-%d", i)
			if keys.PartitionOf(id, parts) == p {
				targets = append(targets, target{"parted", keys.PartitionName("parted", p, parts), id})
				break
			}
		}
	}

	results := make([]<-chan waitResult, len(targets))
	for k := range targets {
		var opts []pipeline.Option
		if targets[k].id != "" {
			opts = append(opts, pipeline.WithID(targets[k].id))
		}
		j, err := client.Enqueue(ctx, targets[k].queue, pipeline.Task{Type: "t", Payload: []byte(`1`)}, opts...)
		require.NoError(t, err)
		targets[k].id = j.ID
		results[k] = startWait(ctx, waiter, targets[k].queue, j.ID)
	}
	for _, tg := range targets {
		require.Eventually(t, func() bool { return pipeline.WaiterReady(waiter, tg.part) }, 30*time.Second,
			time.Millisecond, tg.part)
		// Marked on the partition that holds the job, and made on no other.
		requireWatched(t, cc, keys.New(prefix, tg.part), tg.id)
		if tg.part != tg.queue {
			for p := range parts {
				if other := keys.PartitionName("parted", p, parts); other != tg.part {
					n, err := cc.Exists(ctx, keys.New(prefix, other).Job(tg.id)).Result()
					require.NoError(t, err)
					require.Zero(t, n, "no hash for %s on %s", tg.id, other)
				}
			}
		}
	}
	for _, tg := range targets {
		require.NoError(t, client.Cancel(ctx, tg.queue, tg.id))
	}
	for k := range targets {
		require.Equal(t, status.Canceled, waited(t, results[k]).Status, targets[k].part)
	}
	require.GreaterOrEqual(t, pipeline.WaiterDelivered(waiter), int64(len(targets)), "each cancel's event arrived")
}

// Wait's context bounds it: it returns the context's error with the job as last read.
func TestWaitContextEnds(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: redistest.UniqueName(t)})
	require.NoError(t, err)
	job, err := client.Enqueue(t.Context(), "waits", pipeline.Task{Type: "t", Payload: []byte(`1`)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	waiter := client.NewWaiter()
	t.Cleanup(waiter.Close)
	res := startWait(ctx, waiter, "waits", job.ID)
	cancel()
	r := <-res
	require.ErrorIs(t, r.err, context.Canceled)
	if r.job != nil {
		require.Equal(t, status.Queued, r.job.Status)
	}
}

// A wait whose connections are cut while its job ends (the event sent while its subscription is
// down, and its reads failing) still returns the completed job once Redis is reachable again:
// the subscription made again asks it to read the job.
func TestWaitSurvivesDroppedSubscription(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	proxy := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix, queue := redistest.UniqueName(t), "waits"
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	waiter := client.NewWaiter()
	t.Cleanup(waiter.Close)
	direct, err := pipeline.NewClient(redistest.Client(t), pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	job, err := direct.Enqueue(t.Context(), queue, pipeline.Task{Type: "echo", Payload: []byte(`1`)})
	require.NoError(t, err)
	res := startWait(t.Context(), waiter, queue, job.ID)
	require.Eventually(t, func() bool { return pipeline.WaiterReady(waiter, queue) && pipeline.WaiterReads(waiter) == 1 },
		30*time.Second, time.Millisecond, "the wait read its job once, after its subscription")

	proxy.Refuse(true)
	proxy.CutAll()
	// The job ends while the waiter cannot hear of it: canceled through another connection.
	require.NoError(t, direct.Cancel(t.Context(), queue, job.ID))
	proxy.Refuse(false)
	require.Equal(t, status.Canceled, waited(t, res).Status)
	require.Zero(t, pipeline.WaiterDelivered(waiter), "the event was lost: the read after the resubscription caught the end")
}
