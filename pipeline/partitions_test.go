package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// partitioned is a queue of p partitions on rdb (standalone or cluster), for the tests that
// run the same features over a plain queue and a partitioned one.
type partitioned struct {
	rdb    redis.UniversalClient
	client *pipeline.Client
	insp   *pipeline.Inspector
	queue  string
	p      int
}

func newPartitioned(t *testing.T, rdb redis.UniversalClient, queue string, p int) *partitioned {
	t.Helper()
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	info, err := insp.CreateQueue(t.Context(), queue, pipeline.QueueOptions{Partitions: p})
	require.NoError(t, err)
	require.Equal(t, max(1, p), info.Partitions)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	return &partitioned{rdb: rdb, client: client, insp: insp, queue: queue, p: max(1, p)}
}

// parts are the keys of every partition.
func (x *partitioned) parts() []keys.Queue {
	qs := make([]keys.Queue, x.p)
	for i := range qs {
		qs[i] = keys.New(keys.DefaultPrefix, keys.PartitionName(x.queue, i, x.p))
	}
	return qs
}

func (x *partitioned) startWorker(t *testing.T, cfg pipeline.WorkerConfig, handlers map[string]pipeline.HandlerFunc) func() {
	t.Helper()
	cfg.Queues = []string{x.queue}
	_, stop := startWorkerOn(t, x.rdb, cfg, handlers)
	return func() { require.NoError(t, stop()) }
}

func (x *partitioned) waitStatus(t *testing.T, id string, status status.Status) *pipeline.Job {
	t.Helper()
	return waitJob(t, x.client, x.queue, id, status)
}

// TestPartitionFeatures runs the features of a queue over a plain queue and a queue of three
// partitions, on a standalone server and on the 3-master cluster: publish one and a batch,
// delay, retry, dead, list, replay, cancel, unique keys, stats, purge and delete.
func TestPartitionFeatures(t *testing.T) {
	t.Parallel()
	standalone := redistest.Client(t)
	cluster := redistest.StartCluster(t).Client(t)
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
		p    int
	}{
		{"standalone/plain", standalone, 1},
		{"standalone/3 partitions", standalone, 3},
		{"cluster/plain", cluster, 1},
		{"cluster/3 partitions", cluster, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			partitionFeatures(t, newPartitioned(t, tc.rdb, redistest.UniqueName(t), tc.p))
		})
	}
}

func partitionFeatures(t *testing.T, x *partitioned) {
	ctx := t.Context()
	task := func(typ, payload string) pipeline.Task {
		return pipeline.Task{Type: typ, Payload: []byte(payload)}
	}
	// Published before the worker runs: they wait in the partitions' streams and sets.
	batch := make([]pipeline.Task, 120)
	for k := range batch {
		batch[k] = task("ok", fmt.Sprint("batch ", k))
	}
	jobs, err := x.client.EnqueueBatch(ctx, x.queue, batch)
	require.NoError(t, err)
	one, err := x.client.Enqueue(ctx, x.queue, task("ok", "one"))
	require.NoError(t, err)
	delayedJob, err := x.client.Enqueue(ctx, x.queue, task("ok", "later"), pipeline.WithDelay(300*time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, status.Scheduled, delayedJob.Status)
	canceled, err := x.client.Enqueue(ctx, x.queue, task("ok", "never"), pipeline.WithDelay(time.Hour))
	require.NoError(t, err)
	require.NoError(t, x.client.Cancel(ctx, x.queue, canceled.ID))
	got, err := x.insp.Get(ctx, x.queue, canceled.ID)
	require.NoError(t, err)
	require.Equal(t, status.Canceled, got.Status)
	require.ErrorIs(t, x.client.Cancel(ctx, x.queue, canceled.ID), pipeline.ErrNotCancelable)
	require.ErrorIs(t, x.client.Cancel(ctx, x.queue, "no-such-job"), pipeline.ErrNotFound)

	// Unique keys hold across partitions: the key routes, so every holder meets one key.
	for k := range 10 {
		key := fmt.Sprint("unique-", k)
		a, err := x.client.Enqueue(ctx, x.queue, task("ok", key), pipeline.WithUnique(key, time.Hour), pipeline.WithDelay(time.Hour))
		require.NoError(t, err)
		b, err := x.client.Enqueue(ctx, x.queue, task("ok", key), pipeline.WithUnique(key, time.Hour), pipeline.WithDelay(time.Hour))
		require.NoError(t, err)
		require.True(t, b.Duplicate, "a second job of unique key %s", key)
		require.Equal(t, a.ID, b.ID)
		// Found by id whatever partition the key sent it to.
		got, err := x.client.Get(ctx, x.queue, a.ID)
		require.NoError(t, err)
		require.Equal(t, x.queue, got.Queue)
		require.NoError(t, x.client.Cancel(ctx, x.queue, a.ID))
	}

	st, err := x.client.Stats(ctx, x.queue)
	require.NoError(t, err)
	require.EqualValues(t, 121, st.Queued)
	require.EqualValues(t, 1, st.Scheduled)
	require.EqualValues(t, 11, st.Canceled)
	if x.p > 1 {
		// Every partition got some of the 121 jobs.
		for _, q := range x.parts() {
			n, err := x.rdb.XLen(ctx, q.Stream()).Result()
			require.NoError(t, err)
			require.Positive(t, n, "partition %s got none of the jobs", q.Tag())
		}
	}
	// A listing of queued jobs, 7 a page, walks every partition and sees every job once.
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100)
		page, err := x.insp.List(ctx, x.queue, status.Queued, pipeline.Page{Cursor: cursor, Limit: 7})
		require.NoError(t, err)
		for _, j := range page.Jobs {
			require.False(t, seen[j.ID], "job %s listed twice", j.ID)
			require.Equal(t, x.queue, j.Queue)
			seen[j.ID] = true
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	require.Len(t, seen, 121)

	var failedOnce sync.Map
	var replayOK sync.Map
	stop := x.startWorker(t, pipeline.WorkerConfig{Concurrency: 20}, map[string]pipeline.HandlerFunc{
		"ok": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			if j.Queue != x.queue {
				return nil, pipeline.SkipRetry(fmt.Errorf("job.Queue is %q", j.Queue))
			}
			return []byte("done"), nil
		},
		"flaky": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			if _, again := failedOnce.LoadOrStore(j.ID, true); !again {
				return nil, errors.New("first attempt fails")
			}
			return nil, nil
		},
		"doomed": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			if _, ok := replayOK.Load(j.ID); ok {
				return nil, nil
			}
			return nil, pipeline.SkipRetry(errors.New("doomed"))
		},
	})
	for _, j := range append(jobs, one) {
		x.waitStatus(t, j.ID, status.Completed)
	}
	x.waitStatus(t, delayedJob.ID, status.Completed)

	// Retry: the second attempt completes.
	flaky, err := x.client.Enqueue(ctx, x.queue, task("flaky", "x"))
	require.NoError(t, err)
	require.Equal(t, 2, x.waitStatus(t, flaky.ID, status.Completed).Attempt)

	// Dead, listed over the partitions, replayed one by one and all at once, purged.
	var doomed []string
	for k := range 6 {
		j, err := x.client.Enqueue(ctx, x.queue, task("doomed", fmt.Sprint(k)))
		require.NoError(t, err)
		doomed = append(doomed, j.ID)
	}
	for _, id := range doomed {
		x.waitStatus(t, id, status.Failed)
	}
	dead := map[string]bool{}
	cursor = ""
	for {
		page, err := x.insp.List(ctx, x.queue, status.Failed, pipeline.Page{Cursor: cursor, Limit: 2})
		require.NoError(t, err)
		for _, j := range page.Jobs {
			dead[j.ID] = true
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	require.Len(t, dead, 6)
	replayOK.Store(doomed[0], true)
	require.NoError(t, x.insp.Replay(ctx, x.queue, doomed[0]))
	x.waitStatus(t, doomed[0], status.Completed)
	n, err := x.insp.Purge(ctx, x.queue, doomed[1], doomed[2], "no-such-job")
	require.ErrorIs(t, err, pipeline.ErrNotFound)
	require.Equal(t, 2, n)
	for _, id := range doomed[3:] {
		replayOK.Store(id, true)
	}
	n, err = x.insp.ReplayAll(ctx, x.queue)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for _, id := range doomed[3:] {
		x.waitStatus(t, id, status.Completed)
	}
	n, err = x.insp.PurgeAll(ctx, x.queue, 0)
	require.NoError(t, err)
	require.Zero(t, n)

	st, err = x.insp.Stats(ctx, x.queue)
	require.NoError(t, err)
	require.EqualValues(t, 0, st.Queued+st.Scheduled+st.InProgress+st.Dead)
	require.EqualValues(t, 120+1+1+1+4, st.Completed) // batch, one, delayed, flaky, doomed replayed
	require.EqualValues(t, 1, st.Retried)
	all, err := x.insp.Queues(ctx)
	require.NoError(t, err)
	i := slices.IndexFunc(all, func(q *pipeline.QueueStats) bool { return q.Queue == x.queue })
	require.GreaterOrEqual(t, i, 0, "Queues does not list %s", x.queue)
	require.Equal(t, st.Completed, all[i].Completed)
	found, _, err := x.insp.Find(ctx, one.ID)
	require.NoError(t, err)
	require.Equal(t, x.queue, found.Queue)

	stop()
	require.NoError(t, x.insp.DeleteQueue(ctx, x.queue, false))
	for _, q := range x.parts() {
		n, err := x.rdb.Exists(ctx, q.Stream(), q.Stats(), q.Job(one.ID)).Result()
		require.NoError(t, err)
		require.Zero(t, n, "keys of %s left after DeleteQueue", q.Tag())
	}
	p, err := x.insp.Partitions(ctx, x.queue)
	require.NoError(t, err)
	require.Equal(t, 1, p, "the partition count goes with the queue")
}

// TestPartitionsLandOnEveryMaster: the partitions of any queue spread over the masters of the
// 3-master test cluster (its default slot layout): 3 partitions on 3 masters, 6 on 3 masters
// two each, whatever the name (a queue named hot once put none on one master), and
// CreateQueue says which master holds each.
func TestPartitionsLandOnEveryMaster(t *testing.T) {
	t.Parallel()
	cc := redistest.StartCluster(t).Client(t)
	insp, err := pipeline.NewInspector(cc, pipeline.InspectorConfig{})
	require.NoError(t, err)
	names := []string{"hot", "emails", "default"}
	for k := range 20 {
		names = append(names, fmt.Sprint("q", k))
	}
	for _, name := range names {
		for _, p := range []int{3, 6} {
			perMaster := map[string]int{}
			for i := range p {
				node, err := cc.MasterForKey(t.Context(), keys.New(keys.DefaultPrefix, keys.PartitionName(name, i, p)).Stream())
				require.NoError(t, err)
				perMaster[node.Options().Addr]++
			}
			require.Len(t, perMaster, 3, "%d partitions of %s: %v", p, name, perMaster)
			for addr, n := range perMaster {
				require.Equal(t, p/3, n, "%d partitions of %s: master %s holds %d", p, name, addr, n)
			}
		}
	}
	queue := redistest.UniqueName(t)
	info, err := insp.CreateQueue(t.Context(), queue, pipeline.QueueOptions{Partitions: 3})
	require.NoError(t, err)
	require.Len(t, info.Nodes, 3)
	for i, addr := range info.Nodes {
		node, err := cc.MasterForKey(t.Context(), keys.New(keys.DefaultPrefix, keys.PartitionName(queue, i, 3)).Stream())
		require.NoError(t, err)
		require.Equal(t, node.Options().Addr, addr, "the node of partition %d", i)
	}
	require.NotEqual(t, info.Nodes[0], info.Nodes[1])
	require.NotEqual(t, info.Nodes[1], info.Nodes[2])
	require.NotEqual(t, info.Nodes[0], info.Nodes[2])
}

// TestPartitionsSpreadOverMasters shows a 3-partition queue using all three masters of the
// cluster (each master's key count), and a worker recovering the jobs of a worker that died
// holding jobs in every partition.
func TestPartitionsSpreadOverMasters(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	cc := c.Client(t)
	ctx := t.Context()
	queue := redistest.UniqueName(t)
	x := newPartitioned(t, cc, queue, 3)

	masters := make([]*redis.Client, len(c.Addrs))
	for k, addr := range c.Addrs {
		masters[k] = redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = masters[k].Close() })
	}
	dbsize := func() []int64 {
		out := make([]int64, len(masters))
		for k, m := range masters {
			n, err := m.DBSize(ctx).Result()
			require.NoError(t, err)
			out[k] = n
		}
		return out
	}
	before := dbsize()
	tasks := make([]pipeline.Task, 300)
	for k := range tasks {
		tasks[k] = pipeline.Task{Type: "ok", Payload: []byte(fmt.Sprint(k))}
	}
	jobs, err := x.client.EnqueueBatch(ctx, queue, tasks)
	require.NoError(t, err)
	after := dbsize()
	t.Logf("keys per master before the publish %v, after 300 jobs on %s with 3 partitions %v", before, queue, after)
	for k := range masters {
		// Each partition holds about 100 job records, its stream and its counters.
		require.Greater(t, after[k]-before[k], int64(50), "master %s got too few of the queue's keys", c.Addrs[k])
	}

	// A worker that dies holding jobs of every partition: it read them and never finishes.
	for _, q := range x.parts() {
		require.NoError(t, cc.XGroupCreateMkStream(ctx, q.Stream(), keys.Group, "0").Err())
		_, err := cc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "dead-worker",
			Streams: []string{q.Stream(), ">"}, Count: 5, Block: -1}).Result()
		require.NoError(t, err)
	}
	st, err := x.insp.Stats(ctx, queue)
	require.NoError(t, err)
	require.EqualValues(t, 15, st.InProgress)
	x.startWorker(t, pipeline.WorkerConfig{Concurrency: 20, VisibilityTimeout: 600 * time.Millisecond,
		RecoveryInterval: 50 * time.Millisecond}, map[string]pipeline.HandlerFunc{
		"ok": func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil },
	})
	for _, j := range jobs {
		x.waitStatus(t, j.ID, status.Completed)
	}
	st, err = x.insp.Stats(ctx, queue)
	require.NoError(t, err)
	require.EqualValues(t, 300, st.Completed)
	require.EqualValues(t, 15, st.Recovered, "the dead worker's jobs in all three partitions")
}

// TestCreateQueuePartitions: the count is stored, the same count again is a no-op, a change
// is refused while jobs are unfinished and allowed once they are not.
func TestCreateQueuePartitions(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	queue := redistest.UniqueName(t)
	x := newPartitioned(t, rdb, queue, 3)
	_, err := x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 3})
	require.NoError(t, err, "the same count again")
	for _, bad := range []int{-1, pipeline.MaxPartitions + 1} {
		_, err := x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: bad})
		require.ErrorIs(t, err, pipeline.ErrInvalid)
	}
	_, err = x.insp.CreateQueue(ctx, "bad#1", pipeline.QueueOptions{Partitions: 2})
	require.ErrorIs(t, err, pipeline.ErrInvalid)

	j, err := x.client.Enqueue(ctx, queue, pipeline.Task{Type: "t"}, pipeline.WithDelay(time.Hour))
	require.NoError(t, err)
	// A partitioned listing's cursor names its partition; a plain one, or a partition out of
	// range, is refused.
	page, err := x.insp.List(ctx, queue, status.Scheduled, pipeline.Page{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	for _, bad := range []string{"x", "9/", "1/x", "123:" + j.ID} {
		_, err = x.insp.List(ctx, queue, status.Scheduled, pipeline.Page{Cursor: bad})
		require.ErrorIs(t, err, pipeline.ErrInvalid, "cursor %q", bad)
	}
	// A cursor of no form at all is refused before Redis is asked.
	down, err := pipeline.NewInspector(redisAt("127.0.0.1:1"), pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = down.List(ctx, queue, status.Scheduled, pipeline.Page{Cursor: "x"})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	_, err = x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 4})
	require.ErrorIs(t, err, pipeline.ErrQueueBusy)
	p, err := x.insp.Partitions(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, 3, p, "a refused change changes nothing")

	require.NoError(t, x.client.Cancel(ctx, queue, j.ID))
	// The canceled job's record is kept for its retention, and would be orphaned too.
	_, err = x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 4})
	require.ErrorIs(t, err, pipeline.ErrQueueBusy)
	for _, q := range x.parts() {
		require.NoError(t, rdb.Del(ctx, q.Job(j.ID)).Err())
	}
	info, err := x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 4})
	require.NoError(t, err)
	require.Equal(t, 4, info.Partitions)
	// Back to one partition: the plain keys again, and no field left in the hash.
	_, err = x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{})
	require.NoError(t, err)
	require.False(t, rdb.HExists(ctx, keys.Partitions(keys.DefaultPrefix), queue).Val())
	names, err := rdb.SMembers(ctx, keys.Queues(keys.DefaultPrefix)).Result()
	require.NoError(t, err)
	require.Contains(t, names, queue)
}

// TestCreateQueueRefusesToOrphanRecords: a change of the partition count would leave dead jobs
// and finished records in keys the new layout never reads (Get, Replay and List would not find
// them, and a resent WithID publish would make a second job). The change is refused, naming
// what is left with counts, and changes nothing; once the records are gone it goes through and
// the counters move with it.
func TestCreateQueueRefusesToOrphanRecords(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	queue := redistest.UniqueName(t)
	x := newPartitioned(t, rdb, queue, 1)
	stop := x.startWorker(t, pipeline.WorkerConfig{Retention: time.Hour}, map[string]pipeline.HandlerFunc{
		"ok": func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil },
		"doomed": func(context.Context, *pipeline.Job) ([]byte, error) {
			return nil, pipeline.SkipRetry(errors.New("doomed"))
		},
	})
	_, err := x.client.Enqueue(ctx, queue, pipeline.Task{Type: "ok"}, pipeline.WithID("done1"))
	require.NoError(t, err)
	_, err = x.client.Enqueue(ctx, queue, pipeline.Task{Type: "doomed"}, pipeline.WithID("dead1"))
	require.NoError(t, err)
	x.waitStatus(t, "done1", status.Completed)
	x.waitStatus(t, "dead1", status.Failed)
	stop()

	_, err = x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 4})
	require.ErrorIs(t, err, pipeline.ErrQueueBusy, "a change that would orphan a dead job and a finished record")
	require.ErrorContains(t, err, "1 dead")
	require.ErrorContains(t, err, "1 finished")
	p, err := x.insp.Partitions(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, 1, p, "a refused change changes nothing")
	st, err := x.insp.Stats(ctx, queue)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Completed)
	require.EqualValues(t, 1, st.Failed)
	_, err = x.insp.Get(ctx, queue, "done1")
	require.NoError(t, err)
	page, err := x.insp.List(ctx, queue, status.Failed, pipeline.Page{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	again, err := x.client.Enqueue(ctx, queue, pipeline.Task{Type: "ok"}, pipeline.WithID("done1"))
	require.NoError(t, err)
	require.True(t, again.Duplicate, "a resent publish finds the finished job")

	// With the dead job purged and the finished record gone the change goes through, and the
	// counters the queue had are still its counters.
	n, err := x.insp.PurgeAll(ctx, queue, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 4})
	require.ErrorIs(t, err, pipeline.ErrQueueBusy)
	require.ErrorContains(t, err, "1 finished")
	require.NoError(t, rdb.Del(ctx, keys.New(keys.DefaultPrefix, queue).Job("done1")).Err())
	info, err := x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 4})
	require.NoError(t, err)
	require.Equal(t, 4, info.Partitions)
	st, err = x.insp.Stats(ctx, queue)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Completed, "the counters move to the new layout")
	require.EqualValues(t, 1, st.Failed)
	require.EqualValues(t, 2, st.Enqueued)
	require.Zero(t, rdb.Exists(ctx, keys.New(keys.DefaultPrefix, queue).Stats()).Val(), "the old counters are not left behind")
}

// TestStoredPartitionCountRefused: a partition count in Redis that is not one this version
// writes (out of 1..MaxPartitions, not a number, or a bare count of the version before, whose
// partitions are other keys) is refused by every reader, never taken as some count: a
// publish would route jobs to keys no worker reads.
func TestStoredPartitionCountRefused(t *testing.T) {
	t.Parallel()
	// A server of its own: the unusable counts are in the default prefix's partition counts,
	// where parallel tests that list every known queue would read them (see
	// TestWorkerKeepsPartitionsOnBadCount).
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	for _, tc := range []struct{ stored, want string }{
		{"0/spread", "not a number in 1..1024"},
		{"1025/spread", "not a number in 1..1024"},
		{"x", "not a number in 1..1024"},
		{"x/spread", "not a number in 1..1024"},
		{"-3/spread", "not a number in 1..1024"},
		{"03/spread", "not a number in 1..1024"},
		{"3", "older Conveyor"},
	} {
		t.Run(tc.stored, func(t *testing.T) {
			t.Parallel()
			queue := redistest.UniqueName(t)
			require.NoError(t, rdb.HSet(ctx, keys.Partitions(keys.DefaultPrefix), queue, tc.stored).Err())
			client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
			require.NoError(t, err)
			_, err = client.Enqueue(ctx, queue, pipeline.Task{Type: "t"})
			require.ErrorContains(t, err, tc.want, "Enqueue")
			_, err = client.EnqueueBatch(ctx, queue, []pipeline.Task{{Type: "t"}, {Type: "t"}})
			require.ErrorContains(t, err, tc.want, "EnqueueBatch")
			insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
			require.NoError(t, err)
			_, err = insp.Stats(ctx, queue)
			require.ErrorContains(t, err, tc.want, "Stats")
			// Queues reads every queue's count, the other subtests' unusable ones too (one server
			// for all, in parallel): it is refused for one of them, the first by name.
			_, err = insp.Queues(ctx)
			require.Error(t, err, "Queues")
			require.Regexp(t, "not a number in 1..1024|older Conveyor", err.Error(), "Queues")
			w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{queue}, Logger: testLogger(t)})
			require.NoError(t, err)
			w.Handle("t", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })
			err = w.Run(ctx) // returns at once: waiting cannot fix the stored count
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			require.ErrorContains(t, err, tc.want, "Worker.Run")
			for _, q := range []string{keys.New(keys.DefaultPrefix, queue).Stream(), keys.New(keys.DefaultPrefix, queue+"#0").Stream()} {
				require.Zero(t, rdb.Exists(ctx, q).Val(), "nothing was published to %s", q)
			}
			require.NoError(t, rdb.HDel(ctx, keys.Partitions(keys.DefaultPrefix), queue).Err())
		})
	}
}

// TestDeleteLegacyPartitionedQueue: a queue partitioned by the version before ({q#i} keys, a
// bare count) cannot be used, but DeleteQueue removes its keys and count, after which the
// name is a plain queue again.
func TestDeleteLegacyPartitionedQueue(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t) // its own server: a legacy count fails every listing of the known queues

	ctx := t.Context()
	queue := redistest.UniqueName(t)
	require.NoError(t, rdb.HSet(ctx, keys.Partitions(keys.DefaultPrefix), queue, "2").Err())
	require.NoError(t, rdb.SAdd(ctx, keys.Queues(keys.DefaultPrefix), queue).Err())
	var legacy []string
	for i := range 2 {
		q := keys.New(keys.DefaultPrefix, fmt.Sprint(queue, "#", i))
		legacy = append(legacy, q.Job("old"), q.Stats())
		require.NoError(t, rdb.HSet(ctx, q.Job("old"), "status", "completed").Err())
		require.NoError(t, rdb.HSet(ctx, q.Stats(), "completed", 1).Err())
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 3})
	require.ErrorContains(t, err, "older Conveyor")
	require.NoError(t, insp.DeleteQueue(ctx, queue, false))
	require.Zero(t, rdb.Exists(ctx, legacy...).Val(), "the old partitions' keys are deleted")
	require.False(t, rdb.HExists(ctx, keys.Partitions(keys.DefaultPrefix), queue).Val())
	info, err := insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 3})
	require.NoError(t, err)
	require.Equal(t, 3, info.Partitions)
}

// TestOwnPartitionChangeSeenAtOnce: a process that changes a queue's count reads the new one
// on its next call, whatever its Clients cached (the HTTP API's PUT then GET of a job
// published to the new layout said not found for up to 5 s).
func TestOwnPartitionChangeSeenAtOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	queue := redistest.UniqueName(t)
	x := newPartitioned(t, rdb, queue, 1)
	_, err := x.client.Stats(ctx, queue) // caches the count: 1
	require.NoError(t, err)
	_, err = x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 3})
	require.NoError(t, err)
	fresh, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	j, err := fresh.Enqueue(ctx, queue, pipeline.Task{Type: "t"}, pipeline.WithID("in-a-partition"))
	require.NoError(t, err)
	got, err := x.client.Get(ctx, queue, j.ID)
	require.NoError(t, err, "the client that cached 1 partition finds a job of the new layout")
	require.Equal(t, status.Queued, got.Status)
	again, err := x.client.Enqueue(ctx, queue, pipeline.Task{Type: "t"}, pipeline.WithID("in-a-partition"))
	require.NoError(t, err)
	require.True(t, again.Duplicate, "and publishes to the new layout")
	require.Zero(t, rdb.XLen(ctx, keys.New(keys.DefaultPrefix, queue).Stream()).Val(), "nothing in the plain stream")
}

// TestPartitionCountCacheExpires: a Client reads a queue's count again once it is
// publish.RouteTTL (5 s) old, and not before, so a change made by another process reaches its
// reads. The other process is played by writing the count directly; the clock is the Client's.
func TestPartitionCountCacheExpires(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	queue := redistest.UniqueName(t)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Now: clock})
	require.NoError(t, err)
	_, err = client.Enqueue(ctx, queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	st, err := client.Stats(ctx, queue)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Queued)

	// Another process gives the queue 3 partitions (the plain job is moved out of the way by
	// hand: this is about the cache, not the change).
	require.NoError(t, rdb.HSet(ctx, keys.Partitions(keys.DefaultPrefix), queue, "3/spread").Err())
	st, err = client.Stats(ctx, queue)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Queued, "within 5 s the cached count (1) is used")
	mu.Lock()
	now = now.Add(5*time.Second + time.Millisecond)
	mu.Unlock()
	st, err = client.Stats(ctx, queue)
	require.NoError(t, err)
	require.Zero(t, st.Queued, "past 5 s the count is read again: the 3 partitions are empty")
}

// TestBatchRoutesByUniqueKey: EnqueueBatch sends a job with a unique key to the partition its
// key routes to, as Enqueue does, so a later publish of the same key finds it; a job without
// one goes where its id routes.
func TestBatchRoutesByUniqueKey(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	x := newPartitioned(t, rdb, redistest.UniqueName(t), 3)
	tasks := make([]pipeline.Task, 30)
	for k := range tasks {
		tasks[k] = pipeline.Task{Type: "t", Payload: []byte(fmt.Sprint(k))}
		if k%2 == 0 {
			tasks[k].Opts = []pipeline.Option{pipeline.WithUnique(fmt.Sprint("key-", k), time.Hour)}
		}
	}
	jobs, err := x.client.EnqueueBatch(ctx, x.queue, tasks)
	require.NoError(t, err)
	parts := x.parts()
	for k, j := range jobs {
		route := j.ID
		if k%2 == 0 {
			route = fmt.Sprint("key-", k)
		}
		want := parts[keys.PartitionOf(route, 3)]
		require.EqualValues(t, 1, rdb.Exists(ctx, want.Job(j.ID)).Val(), "job %d is in partition %s", k, want.Tag())
		if k%2 == 0 {
			again, err := x.client.Enqueue(ctx, x.queue, pipeline.Task{Type: "t"}, pipeline.WithUnique(fmt.Sprint("key-", k), time.Hour))
			require.NoError(t, err)
			require.True(t, again.Duplicate, "the key of job %d is held", k)
			require.Equal(t, j.ID, again.ID)
		}
	}
}

// TestCreateQueueRepairsHalfDoneChange: a change that stopped after closing the old layout
// (the process died) leaves publishes refused, nothing written; CreateQueue with the count the
// queue has opens its layout again.
func TestCreateQueueRepairsHalfDoneChange(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	x := newPartitioned(t, rdb, redistest.UniqueName(t), 3)
	for _, q := range x.parts() {
		require.NoError(t, rdb.Set(ctx, q.Closed(), "1", time.Hour).Err())
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := x.client.Enqueue(short, x.queue, pipeline.Task{Type: "t"})
	require.ErrorIs(t, err, context.DeadlineExceeded, "refused and tried again until the caller gave up")
	st, err := x.insp.Stats(ctx, x.queue)
	require.NoError(t, err)
	require.Zero(t, st.Queued+st.Enqueued, "nothing written")
	_, err = x.insp.CreateQueue(ctx, x.queue, pipeline.QueueOptions{Partitions: 3})
	require.NoError(t, err)
	j, err := x.client.Enqueue(ctx, x.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	require.Equal(t, status.Queued, j.Status)
}

// TestDeleteQueueCleansEveryLayout: the layouts a queue's count left (empty streams with their
// consumer groups, as workers of that count made them, and the closed flags) are deleted with
// the queue, on a standalone server and on a cluster, where they sit on every master.
func TestDeleteQueueCleansEveryLayout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
	}{{"standalone", redistest.Client(t)}, {"cluster", redistest.StartCluster(t).Client(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			x := newPartitioned(t, tc.rdb, redistest.UniqueName(t), 3)
			for _, n := range []int{4, 2, 1} {
				for _, q := range x.parts() { // what a worker of the count creates
					require.NoError(t, tc.rdb.XGroupCreateMkStream(ctx, q.Stream(), keys.Group, "0").Err())
				}
				_, err := x.insp.CreateQueue(ctx, x.queue, pipeline.QueueOptions{Partitions: n})
				require.NoError(t, err)
				x.p = n
			}
			require.NoError(t, x.insp.DeleteQueue(ctx, x.queue, false))
			var left []string
			scan := func(ctx context.Context, node *redis.Client) error {
				ks, _, err := node.Scan(ctx, 0, keys.DefaultPrefix+":{"+x.queue+"*", 10000).Result()
				left = append(left, ks...)
				return err
			}
			if cc, ok := tc.rdb.(*redis.ClusterClient); ok {
				var mu sync.Mutex
				require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
					mu.Lock()
					defer mu.Unlock()
					return scan(ctx, node)
				}))
			} else {
				require.NoError(t, scan(ctx, tc.rdb.(*redis.Client)))
			}
			require.Empty(t, left, "keys of the queue left after DeleteQueue")
		})
	}
}

// TestPartitionChangeKeepsLimitsAndGroups: a change of the partition count moved no setting, so
// a limit stayed listed (read from the plain queue's keys) but no partition's admission read it,
// and the group window and weights were left behind in the old layout's keys. A change to more
// than one partition is refused while the queue has limits (a partitioned queue cannot hold
// them), naming them, and changes nothing; the group settings move with the change, both ways.
func TestPartitionChangeKeepsLimitsAndGroups(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	queue := redistest.UniqueName(t)
	x := newPartitioned(t, rdb, queue, 1)
	require.NoError(t, x.insp.SetLimit(ctx, queue, pipeline.Limit{Concurrency: 1}))
	require.NoError(t, x.insp.SetLimit(ctx, queue, pipeline.Limit{Type: "echo", PerKey: true, Rate: 5, Interval: time.Second}))
	_, err := x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 3})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	require.ErrorContains(t, err, "has 2 limits (every job; type echo, per limit key)")
	require.ErrorContains(t, err, "delete them first")
	p, err := x.insp.Partitions(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, 1, p, "a refused change changes nothing")
	j, err := x.client.Enqueue(ctx, queue, pipeline.Task{Type: "echo"})
	require.NoError(t, err, "the layout is open")
	require.NoError(t, x.client.Cancel(ctx, queue, j.ID))
	require.NoError(t, rdb.Del(ctx, keys.New(keys.DefaultPrefix, queue).Job(j.ID)).Err())
	for _, l := range []pipeline.Limit{{}, {Type: "echo", PerKey: true}} {
		ok, err := x.insp.DeleteLimit(ctx, queue, l.Type, l.PerKey)
		require.NoError(t, err)
		require.True(t, ok)
	}

	require.NoError(t, x.insp.SetGroups(ctx, queue, pipeline.GroupChange{Window: 2, Weights: map[string]int{"a": 3}}))
	want := &pipeline.Groups{Queue: queue, Window: 2, WindowSet: true, Groups: []pipeline.GroupInfo{{Group: "a", Weight: 3}}, Total: 1}
	cfgs := func(n int) []map[string]string {
		t.Helper()
		out := make([]map[string]string, n)
		for i := range out {
			q := keys.New(keys.DefaultPrefix, keys.PartitionName(queue, i, n))
			out[i] = rdb.HGetAll(ctx, q.GroupConfig()).Val()
		}
		return out
	}
	_, err = x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{Partitions: 3})
	require.NoError(t, err)
	gs, err := x.insp.Groups(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, want, gs)
	three := map[string]string{keys.GroupWindowField: "2", keys.GroupWeightPrefix + "a": "3"}
	require.Equal(t, []map[string]string{three, three, three}, cfgs(3), "every partition's scripts read them")
	require.Empty(t, cfgs(1)[0], "the old layout's settings are gone")

	// Changed while partitioned, they move back to one partition as they are now.
	require.NoError(t, x.insp.SetGroups(ctx, queue, pipeline.GroupChange{ResetWindow: true, Weights: map[string]int{"a": 0, "b": 2}}))
	_, err = x.insp.CreateQueue(ctx, queue, pipeline.QueueOptions{})
	require.NoError(t, err)
	require.Equal(t, []map[string]string{{keys.GroupWeightPrefix + "b": "2"}}, cfgs(1))
	for _, c := range cfgs(3) {
		require.Empty(t, c)
	}
	gs, err = x.insp.Groups(ctx, queue)
	require.NoError(t, err)
	require.Equal(t, &pipeline.Groups{Queue: queue, Window: pipeline.DefaultGroupWindow,
		Groups: []pipeline.GroupInfo{{Group: "b", Weight: 2}}, Total: 1}, gs)
}
