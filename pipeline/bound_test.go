package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/metakey"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// bounded makes the bundle's queue with partitions and sets its bound.
func bounded(t *testing.T, b *testBundle, partitions, max int, policy string) {
	t.Helper()
	_, err := b.insp.CreateQueue(t.Context(), b.queue, pipeline.QueueOptions{Partitions: partitions})
	require.NoError(t, err)
	st, err := b.insp.UpdateQueue(t.Context(), b.queue, pipeline.QueuePatch{MaxWaiting: &max, FullPolicy: &policy})
	require.NoError(t, err)
	require.Equal(t, max, st.MaxWaiting)
	require.Equal(t, policy, st.FullPolicy)
}

// At its bound a queue refuses a job with ErrQueueFull, whatever the publish (one job, a
// plain one or not): ready and scheduled jobs both count as waiting. Nothing of the refused
// job is written, and the refusal is counted.
func TestBoundedQueueRejects(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		bounded(t, b, 1, 3, pipeline.FullReject)
		_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithID("first"))
		require.NoError(t, err)
		_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithDelay(time.Hour))
		require.NoError(t, err)
		_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithPriority(3))
		require.NoError(t, err)

		for _, opts := range [][]pipeline.Option{nil, {pipeline.WithID("chosen")}, {pipeline.WithDelay(time.Minute)}} {
			j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, opts...)
			require.ErrorIs(t, err, pipeline.ErrQueueFull)
			require.Nil(t, j)
			var qf *pipeline.QueueFullError
			require.ErrorAs(t, err, &qf)
			require.Equal(t, b.queue, qf.Queue)
			require.Equal(t, 3, qf.MaxWaiting)
			require.EqualValues(t, 3, qf.Waiting)
			// No worker finished anything: the estimate is the cap.
			require.Equal(t, pipeline.MaxRetryAfter, qf.RetryAfter)
			ra, ok := pipeline.RetryAfter(err)
			require.True(t, ok)
			require.Equal(t, pipeline.MaxRetryAfter, ra)
		}
		_, err = b.client.Get(ctx, b.queue, "chosen")
		require.ErrorIs(t, err, pipeline.ErrNotFound)
		st := b.stats(t)
		require.EqualValues(t, 3, st.Enqueued)
		require.EqualValues(t, 3, st.RejectedFull)
		require.EqualValues(t, 3, st.Queued+st.Scheduled)

		// A job that exists already is answered as a duplicate, full or not, by either script.
		for _, opts := range [][]pipeline.Option{{pipeline.WithID("first")}, {pipeline.WithID("first"), pipeline.WithPriority(1), pipeline.WithDelay(0)}} {
			dup, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, opts...)
			require.NoError(t, err)
			require.True(t, dup.Duplicate)
		}
		jobs, err := b.client.EnqueueBatch(ctx, b.queue, []pipeline.Task{{Type: "t", Opts: []pipeline.Option{pipeline.WithID("first")}}, {Type: "t", Opts: []pipeline.Option{pipeline.WithDelay(time.Hour)}}})
		require.ErrorIs(t, err, pipeline.ErrQueueFull)
		require.True(t, jobs[0].Duplicate)
		require.EqualValues(t, 4, b.stats(t).RejectedFull)
		zero := 0
		_, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{MaxWaiting: &zero})
		require.NoError(t, err)
		_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
		require.NoError(t, err, "the bound removed")
	})
}

// A batch over the room left is admitted in part: the jobs up to the bound are written, each
// other one says it was refused (an empty Status and its own QueueFullError, by task index).
func TestBoundedBatchAdmittedInPart(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		bounded(t, b, 1, 5, pipeline.FullReject)
		_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
		require.NoError(t, err)
		tasks := make([]pipeline.Task, 7)
		for i := range tasks {
			tasks[i] = pipeline.Task{Type: "t", Payload: []byte(fmt.Sprint(i))}
		}
		jobs, err := b.client.EnqueueBatch(ctx, b.queue, tasks)
		require.ErrorIs(t, err, pipeline.ErrQueueFull)
		require.Len(t, jobs, 7)
		for i, j := range jobs {
			if i < 4 {
				require.Equal(t, status.Queued, j.Status, "task %d", i)
				continue
			}
			require.Equal(t, status.Status(""), j.Status, "task %d", i)
			_, err := b.client.Get(ctx, b.queue, j.ID)
			require.ErrorIs(t, err, pipeline.ErrNotFound, "task %d", i)
		}
		var refused []int
		for _, qf := range pipeline.QueueFullErrors(err) {
			refused = append(refused, qf.Task)
		}
		require.Equal(t, []int{4, 5, 6}, refused)
		require.EqualValues(t, 3, b.stats(t).RejectedFull)
	})
}

// drop-oldest cancels the oldest ready job of the lowest priority level (the level read
// last), with the reason as its last error, and admits the new job: the queue stays at its
// bound.
func TestBoundedDropOldest(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		bounded(t, b, 1, 3, pipeline.FullDropOldest)
		first, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
		require.NoError(t, err)
		low, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithPriority(3))
		require.NoError(t, err)
		second, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
		require.NoError(t, err)

		admitted, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
		require.NoError(t, err)
		require.Equal(t, status.Queued, admitted.Status)
		got, err := b.client.Get(ctx, b.queue, low.ID)
		require.NoError(t, err)
		require.Equal(t, status.Canceled, got.Status)
		require.Equal(t, "dropped: queue full (max_waiting 3)", got.LastError)

		// Level 1 alone left: its oldest goes next, the batch's jobs admitted all.
		jobs, err := b.client.EnqueueBatch(ctx, b.queue, []pipeline.Task{{Type: "t"}})
		require.NoError(t, err)
		require.Equal(t, status.Queued, jobs[0].Status)
		got, err = b.client.Get(ctx, b.queue, first.ID)
		require.NoError(t, err)
		require.Equal(t, status.Canceled, got.Status)
		for _, id := range []string{second.ID, admitted.ID, jobs[0].ID} {
			got, err := b.client.Get(ctx, b.queue, id)
			require.NoError(t, err)
			require.Equal(t, status.Queued, got.Status, id)
		}
		st := b.stats(t)
		require.EqualValues(t, 2, st.DroppedFull)
		require.EqualValues(t, 2, st.Canceled)
		require.EqualValues(t, 3, st.Queued)
		require.EqualValues(t, 0, st.RejectedFull)
	})
}

// Publishers on several clients, in many goroutines, singly and in batches, never take a
// queue past its bound: the check is one step with the write.
func TestBoundedConcurrentPublishersExact(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		const max = 40
		bounded(t, b, 1, max, pipeline.FullReject)
		var mu sync.Mutex
		admitted, refused := 0, 0
		var wg sync.WaitGroup
		for g := range 8 {
			cl, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range 10 {
					tasks := []pipeline.Task{{Type: "t"}}
					if (g+k)%2 == 0 {
						tasks = append(tasks, pipeline.Task{Type: "t"}, pipeline.Task{Type: "t"})
					}
					jobs, err := cl.EnqueueBatch(ctx, b.queue, tasks)
					if err != nil && !errors.Is(err, pipeline.ErrQueueFull) {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, j := range jobs {
						if j.Status != "" {
							admitted++
						} else {
							refused++
						}
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		require.Equal(t, max, admitted)
		st := b.stats(t)
		require.EqualValues(t, max, st.Queued)
		require.EqualValues(t, refused, st.RejectedFull)
		require.Positive(t, refused)
	})
}

// The count is of jobs not running: as a worker starts jobs, room comes back.
func TestBoundedCountFallsAsWorkersStart(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		bounded(t, b, 1, 2, pipeline.FullReject)
		for range 2 {
			_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
			require.NoError(t, err)
		}
		_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
		require.ErrorIs(t, err, pipeline.ErrQueueFull)

		started, release := make(chan string, 10), make(chan struct{})
		defer close(release)
		b.startWorker(t, pipeline.WorkerConfig{Concurrency: 4}, map[string]pipeline.HandlerFunc{"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			started <- j.ID
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		}})
		for range 2 {
			select {
			case <-started:
			case <-time.After(30 * time.Second):
				t.Fatal("the jobs did not start")
			}
		}
		for range 2 {
			_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithDelay(time.Hour))
			require.NoError(t, err)
		}
		_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithDelay(time.Hour))
		require.ErrorIs(t, err, pipeline.ErrQueueFull)
	})
}

// A partitioned queue applies ceil(max/partitions) to each partition: no partition holds
// more, and a refusal names that share.
func TestBoundedPartitionedQueue(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		bounded(t, b, 3, 7, pipeline.FullReject) // 3 a partition
		tasks := make([]pipeline.Task, 30)
		for i := range tasks {
			tasks[i] = pipeline.Task{Type: "t"}
		}
		jobs, err := b.client.EnqueueBatch(ctx, b.queue, tasks)
		require.ErrorIs(t, err, pipeline.ErrQueueFull)
		var qf *pipeline.QueueFullError
		require.ErrorAs(t, err, &qf)
		require.Equal(t, 3, qf.MaxWaiting)
		admitted := 0
		for _, j := range jobs {
			if j.Status != "" {
				admitted++
			}
		}
		require.Equal(t, 9, admitted, "30 jobs fill every partition")
		require.EqualValues(t, 9, b.stats(t).Queued)
	})
}

// A bound's settings are checked at the edge: a negative bound or an unknown policy changes
// nothing; 0 removes the bound and reject the policy's field (the default).
func TestBoundedSettingsChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	bounded(t, b, 1, 4, pipeline.FullDropOldest)
	minus, bad := -1, "drop-newest"
	_, err := b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{MaxWaiting: &minus})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	_, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{FullPolicy: &bad})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	var p pipeline.QueuePatch
	require.NoError(t, p.UnmarshalJSON([]byte(`{"full_policy":"drop"}`)))
	_, err = b.insp.UpdateQueue(ctx, b.queue, p)
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	require.NoError(t, p.UnmarshalJSON([]byte(`{"max_waiting":9,"full_policy":"reject"}`)))
	require.Equal(t, 9, *p.MaxWaiting)
	st, err := b.insp.QueueSettings(ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 4, st.MaxWaiting)
	require.Equal(t, pipeline.FullDropOldest, st.FullPolicy)
	zero, reject := 0, pipeline.FullReject
	st, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{MaxWaiting: &zero, FullPolicy: &reject})
	require.NoError(t, err)
	require.Equal(t, 0, st.MaxWaiting)
	require.Equal(t, pipeline.FullReject, st.FullPolicy)
}

// The Watermill Publisher returns a bounded queue's refusal: the messages past the bound are
// not written, and publishing them all again once there is room writes only those.
func TestBoundedWatermillPublisher(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		bounded(t, b, 1, 2, pipeline.FullReject)
		pub := newTestPublisher(t, b.client, pipeline.PublisherConfig{})
		msgs := make([]*message.Message, 3)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))
			msgs[i].Metadata.Set(metakey.Type, "t")
		}
		err := pub.Publish(b.queue, msgs...)
		require.ErrorIs(t, err, pipeline.ErrQueueFull)
		fulls := pipeline.QueueFullErrors(err)
		require.Len(t, fulls, 1)
		require.Equal(t, 2, fulls[0].Task)
		three := 3
		_, err = b.insp.UpdateQueue(t.Context(), b.queue, pipeline.QueuePatch{MaxWaiting: &three})
		require.NoError(t, err)
		require.NoError(t, pub.Publish(b.queue, msgs...))
		st := b.stats(t)
		require.EqualValues(t, 3, st.Queued)
		require.EqualValues(t, 3, st.Enqueued)
	})
}

// drop-oldest drops the oldest job not yet handed to a worker: entries a worker has read (here
// running, then the queue paused so that it reads no more) are neither counted nor dropped.
func TestBoundedDropOldestSkipsDelivered(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		bounded(t, b, 1, 2, pipeline.FullDropOldest)
		running := map[string]bool{}
		for range 2 {
			j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
			require.NoError(t, err)
			running[j.ID] = true
		}
		started, release := make(chan string, 10), make(chan struct{})
		defer close(release)
		b.startWorker(t, pipeline.WorkerConfig{Concurrency: 2}, map[string]pipeline.HandlerFunc{"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			started <- j.ID
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		}})
		for range 2 {
			select {
			case id := <-started:
				require.True(t, running[id], id)
			case <-time.After(30 * time.Second):
				t.Fatal("the jobs did not start")
			}
		}
		yes := true
		_, err := b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{Paused: &yes})
		require.NoError(t, err)

		var ids []string
		for range 3 {
			j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
			require.NoError(t, err)
			ids = append(ids, j.ID)
		}
		got, err := b.client.Get(ctx, b.queue, ids[0])
		require.NoError(t, err)
		require.Equal(t, status.Canceled, got.Status, "the oldest not handed out")
		require.Contains(t, got.LastError, "dropped: queue full (max_waiting 2)")
		for id := range running {
			got, err := b.client.Get(ctx, b.queue, id)
			require.NoError(t, err)
			require.NotEqual(t, status.Canceled, got.Status, "a running job is not dropped")
		}
		for _, id := range ids[1:] {
			got, err := b.client.Get(ctx, b.queue, id)
			require.NoError(t, err)
			require.Equal(t, status.Queued, got.Status)
		}
		require.EqualValues(t, 1, b.stats(t).DroppedFull)
	})
}

// The script's count of waiting jobs is the gauges' Queued plus Scheduled, whatever the jobs'
// places: queued at two levels, scheduled, waiting for a retry, in a fair group's line, running
// (not counted), finished (not counted), a workflow task waiting for its dependency (not
// counted). A bound of that count refuses the next job, saying the count; one more admits it.
func TestBoundedCountMatchesGauges(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		_, err := b.insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
		require.NoError(t, err)
		one := 1
		_, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{GroupWindow: &one})
		require.NoError(t, err)
		for _, s := range []struct {
			st   status.Status
			opts []pipeline.Option
		}{
			{status.Queued, nil}, {status.Queued, []pipeline.Option{pipeline.WithPriority(3)}},
			{status.Scheduled, nil}, {jobtest.Retry, nil}, {status.InProgress, nil}, {status.InProgress, nil},
			{status.Failed, nil}, {status.Completed, nil}, {status.Canceled, nil}, {status.Waiting, nil},
		} {
			jobtest.Seed(t, rdb, b.queue, s.st, jobtest.Opts{Options: s.opts})
		}
		for range 3 {
			_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithGroup("g"))
			require.NoError(t, err)
		}
		st := b.stats(t)
		require.Positive(t, st.GroupWaiting)
		require.Positive(t, st.InProgress)
		require.Positive(t, st.Waiting)
		waiting := int(st.Queued + st.Scheduled)
		require.GreaterOrEqual(t, waiting, 7)

		_, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{MaxWaiting: &waiting})
		require.NoError(t, err)
		for _, opts := range [][]pipeline.Option{nil, {pipeline.WithDelay(time.Hour)}} {
			_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, opts...)
			require.ErrorIs(t, err, pipeline.ErrQueueFull)
			fulls := pipeline.QueueFullErrors(err)
			require.Len(t, fulls, 1)
			require.EqualValues(t, waiting, fulls[0].Waiting)
		}
		more := waiting + 1
		_, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{MaxWaiting: &more})
		require.NoError(t, err)
		_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
		require.NoError(t, err)
	})
}

// The scripts first sum the streams' lengths, which count the entries handed to workers and
// not yet acknowledged, and count exactly only when that upper bound leaves no room for the
// call's jobs. With many such entries the upper bound is far over the bound while the queue
// holds nothing waiting: the exact count must still admit up to the bound and refuse at it,
// for a single publish (enqueue1.lua) and a batch (enqueue.lua) alike.
func TestBoundedExactPastUpperBound(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		bounded(t, b, 1, 2, pipeline.FullReject)
		// Four at level 1 and two at level 3: the exact count subtracts each stream's pending.
		for i := range 6 {
			var opts []pipeline.Option
			if i >= 4 {
				opts = []pipeline.Option{pipeline.WithPriority(3)}
			}
			jobtest.Seed(t, rdb, b.queue, status.InProgress, jobtest.Opts{Options: opts})
		}
		st := b.stats(t)
		require.EqualValues(t, 6, st.InProgress)
		require.Zero(t, st.Queued+st.Scheduled)

		_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
		require.NoError(t, err, "1 waiting: the upper bound (7) is over 2, the exact count is not")
		_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithDelay(time.Hour))
		require.NoError(t, err)
		_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
		require.ErrorIs(t, err, pipeline.ErrQueueFull)
		fulls := pipeline.QueueFullErrors(err)
		require.Len(t, fulls, 1)
		require.EqualValues(t, 2, fulls[0].Waiting, "the count reported is the exact one")

		four := 4
		_, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{MaxWaiting: &four})
		require.NoError(t, err)
		jobs, err := b.client.EnqueueBatch(ctx, b.queue, []pipeline.Task{{Type: "t"}, {Type: "t"}, {Type: "t"}})
		require.ErrorIs(t, err, pipeline.ErrQueueFull)
		require.Equal(t, status.Queued, jobs[0].Status)
		require.Equal(t, status.Queued, jobs[1].Status)
		require.Equal(t, status.Status(""), jobs[2].Status)
		fulls = pipeline.QueueFullErrors(err)
		require.Len(t, fulls, 1)
		require.Equal(t, 2, fulls[0].Task)
		require.EqualValues(t, 4, fulls[0].Waiting)
		st = b.stats(t)
		require.EqualValues(t, 4, st.Queued+st.Scheduled)
		require.EqualValues(t, 2, st.RejectedFull)
	})
}

// The count reads its rarer parts (priority levels above 1, fair groups' lines, limits' wait
// lists) only when the key that says they are in use exists, and a single publish asks for
// those keys in the EXISTS it makes for its job. Each part alone must still be counted, by a
// single plain publish (enqueue1.lua) and a batch (enqueue.lua) alike.
func TestBoundedCountEachRarePart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		seed func(t *testing.T, b *testBundle, rdb redis.UniversalClient)
	}{
		{"fair group line", func(t *testing.T, b *testBundle, rdb redis.UniversalClient) {
			one := 1
			_, err := b.insp.UpdateQueue(t.Context(), b.queue, pipeline.QueuePatch{GroupWindow: &one})
			require.NoError(t, err)
			for range 3 {
				_, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "t"}, pipeline.WithGroup("g"))
				require.NoError(t, err)
			}
			require.EqualValues(t, 2, b.stats(t).GroupWaiting)
		}},
		{"priority level", func(t *testing.T, b *testBundle, rdb redis.UniversalClient) {
			for range 2 {
				jobtest.Seed(t, rdb, b.queue, status.Queued, jobtest.Opts{Options: []pipeline.Option{pipeline.WithPriority(3)}})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
				b := setup(t, setupOpts{rdb: rdb})
				ctx := t.Context()
				_, err := b.insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{})
				require.NoError(t, err)
				tc.seed(t, b, rdb)
				st := b.stats(t)
				waiting := int(st.Queued + st.Scheduled)
				require.Positive(t, waiting)
				_, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{MaxWaiting: &waiting})
				require.NoError(t, err)
				_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
				require.ErrorIs(t, err, pipeline.ErrQueueFull, "a single publish")
				require.EqualValues(t, waiting, pipeline.QueueFullErrors(err)[0].Waiting)
				_, err = b.client.EnqueueBatch(ctx, b.queue, []pipeline.Task{{Type: "t"}, {Type: "t"}})
				require.ErrorIs(t, err, pipeline.ErrQueueFull, "a batch")
			})
		})
	}
}
