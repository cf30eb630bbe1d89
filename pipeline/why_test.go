package pipeline_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// fakeReader writes the heartbeat of a live worker named name that reads queues and handles
// types (none: a record of a version before types, handling every type), without running one.
func fakeReader(t *testing.T, rdb redis.UniversalClient, prefix, name string, queues, types []string) {
	t.Helper()
	now := time.Now()
	rec, err := json.Marshal(pipeline.WorkerInfo{Name: name, Queues: queues, Types: types, Concurrency: 1,
		Started: now, LastHeartbeat: now, HeartbeatInterval: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, keys.WorkerBeat(prefix, name), rec, 3*time.Minute).Err())
	require.NoError(t, rdb.ZAdd(ctx, keys.Workers(prefix), redis.Z{Score: float64(now.Add(3 * time.Minute).UnixMilli()), Member: name}).Err())
}

// reasonOf reads job id through the Inspector and returns its reason (failing on none).
func reasonOf(t *testing.T, insp *pipeline.Inspector, queue, id string) *pipeline.WaitingFor {
	t.Helper()
	j, err := insp.Get(t.Context(), queue, id)
	require.NoError(t, err)
	require.NotNil(t, j.WaitingFor, "job %s (%s) has no reason", id, j.Status)
	// Find, which does not know the queue, says the same.
	f, _, err := insp.Find(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, j.WaitingFor, f.WaitingFor)
	return j.WaitingFor
}

// The reasons of issue 33's cases that need no worker to run: each job read through Get,
// Find and its status's listing, and its queue's counts by reason.
func TestInspectorWaitingFor(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix, client, insp := workersOf(t, rdb)
	ctx := t.Context()
	publish := func(queue, typ string, opts ...pipeline.Option) *pipeline.Job {
		t.Helper()
		j, err := client.Enqueue(ctx, queue, pipeline.Task{Type: typ}, opts...)
		require.NoError(t, err)
		return j
	}
	listed := func(queue string, st status.Status) map[string]*pipeline.WaitingFor {
		t.Helper()
		p, err := insp.List(ctx, queue, st, pipeline.Page{})
		require.NoError(t, err)
		out := map[string]*pipeline.WaitingFor{}
		for _, j := range p.Jobs {
			out[j.ID] = j.WaitingFor
		}
		return out
	}
	counts := func(queue string) map[status.Reason]int64 {
		t.Helper()
		st, err := insp.Stats(ctx, queue)
		require.NoError(t, err)
		return st.WaitingFor
	}

	t.Run("no worker reads the queue", func(t *testing.T) {
		fakeReader(t, rdb, prefix, "emails-worker", []string{"emails"}, []string{"send"})
		j := publish("emials", "send")
		w := reasonOf(t, insp, "emials", j.ID)
		require.Equal(t, status.NoReader, w.Kind)
		require.Equal(t, "no live worker reads queue emials", w.Detail)
		require.Equal(t, w, listed("emials", status.Queued)[j.ID])
		require.Equal(t, map[status.Reason]int64{status.NoReader: 1}, counts("emials"))
	})
	t.Run("no worker handles the type", func(t *testing.T) {
		fakeReader(t, rdb, prefix, "echo-worker", []string{"echoq"}, []string{"echo"})
		j := publish("echoq", "ecoh")
		w := reasonOf(t, insp, "echoq", j.ID)
		require.Equal(t, status.NoHandler, w.Kind)
		require.Contains(t, w.Detail, "handles type ecoh")
		// The queue's counts cannot tell a type no worker handles from a job about to run.
		require.Equal(t, map[status.Reason]int64{status.Ready: 1}, counts("echoq"))
	})
	t.Run("paused", func(t *testing.T) {
		_, err := insp.CreateQueue(ctx, "pausedq", pipeline.QueueOptions{})
		require.NoError(t, err)
		// Paused before the fake reader's beat: it would never confirm.
		require.NoError(t, insp.Pause(ctx, "pausedq"))
		fakeReader(t, rdb, prefix, "paused-worker", []string{"pausedq"}, []string{"t"})
		j := publish("pausedq", "t")
		require.Equal(t, status.Paused, reasonOf(t, insp, "pausedq", j.ID).Kind)
		require.Equal(t, map[status.Reason]int64{status.Paused: 1}, counts("pausedq"))
	})
	t.Run("priority", func(t *testing.T) {
		fakeReader(t, rdb, prefix, "prio-worker", []string{"prioq"}, []string{"t"})
		first := publish("prioq", "t")
		publish("prioq", "t")
		low := publish("prioq", "t", pipeline.WithPriority(3))
		require.Equal(t, status.Ready, reasonOf(t, insp, "prioq", first.ID).Kind)
		w := reasonOf(t, insp, "prioq", low.ID)
		require.Equal(t, status.Priority, w.Kind)
		require.Equal(t, int64(2), w.Jobs)
		require.Equal(t, "behind 2 jobs of a higher priority", w.Detail)
		require.Equal(t, w, listed("prioq", status.Queued)[low.ID])
		require.Equal(t, map[status.Reason]int64{status.Ready: 2, status.Priority: 1}, counts("prioq"))
	})
	t.Run("retry backoff, delay and overdue", func(t *testing.T) {
		fakeReader(t, rdb, prefix, "retry-worker", []string{"retryq"}, []string{"test"})
		r := jobtest.Seed(t, rdb, "retryq", jobtest.Retry, jobtest.Opts{Prefix: prefix})
		w := reasonOf(t, insp, "retryq", r.ID)
		require.Equal(t, status.Due, w.Kind)
		require.Equal(t, "retry", w.Cause)
		require.Equal(t, r.RunAt.UnixMilli(), w.Until.UnixMilli())
		require.Contains(t, w.Detail, "(retry backoff)")
		d := publish("retryq", "test", pipeline.WithDelay(time.Hour))
		require.Equal(t, "delay", reasonOf(t, insp, "retryq", d.ID).Cause)
		require.Equal(t, w, listed("retryq", status.Scheduled)[r.ID])
		require.Equal(t, map[status.Reason]int64{status.Due: 2}, counts("retryq"))
	})
	t.Run("debounce", func(t *testing.T) {
		fakeReader(t, rdb, prefix, "deb-worker", []string{"debq"}, []string{"t"})
		j := publish("debq", "t", pipeline.WithDebounce("k", time.Hour, 2*time.Hour))
		w := reasonOf(t, insp, "debq", j.ID)
		require.Equal(t, status.Debounce, w.Kind)
		require.False(t, w.Until.IsZero())
	})
	t.Run("group window", func(t *testing.T) {
		fakeReader(t, rdb, prefix, "group-worker", []string{"groupq"}, []string{"t"})
		_, err := insp.CreateQueue(ctx, "groupq", pipeline.QueueOptions{})
		require.NoError(t, err)
		require.NoError(t, insp.SetGroups(ctx, "groupq", pipeline.GroupChange{Window: 1}))
		in := publish("groupq", "t", pipeline.WithGroup("acme"))
		second := publish("groupq", "t", pipeline.WithGroup("acme"))
		third := publish("groupq", "t", pipeline.WithGroup("acme"))
		require.Equal(t, status.Ready, reasonOf(t, insp, "groupq", in.ID).Kind)
		for k, j := range []*pipeline.Job{second, third} {
			w := reasonOf(t, insp, "groupq", j.ID)
			require.Equal(t, status.GroupWindow, w.Kind)
			require.Equal(t, "acme", w.Group)
			require.Equal(t, k+1, w.Position)
		}
		c := counts("groupq")
		require.Equal(t, int64(2), c[status.GroupWindow])
		require.Equal(t, int64(1), c[status.Ready])
	})
	t.Run("workflow", func(t *testing.T) {
		fakeReader(t, rdb, prefix, "wf-worker", []string{"wfq"}, []string{"t"})
		wf, err := client.Workflow(ctx, "wfq", pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
			{Name: "A", Task: pipeline.Task{Type: "t"}}, {Name: "B", Task: pipeline.Task{Type: "t"}},
			{Name: "C", Task: pipeline.Task{Type: "t"}, After: []string{"A", "B"}}}})
		require.NoError(t, err)
		var c string
		for _, task := range wf.Tasks {
			if task.Name == "C" {
				c = task.JobID
			}
		}
		w := reasonOf(t, insp, "wfq", c)
		require.Equal(t, status.Dependencies, w.Kind)
		require.Equal(t, []string{"A", "B"}, w.Tasks)
		require.Equal(t, "waiting for tasks A, B", w.Detail)
	})
	t.Run("running and ended jobs have none", func(t *testing.T) {
		for _, st := range []status.Status{status.InProgress, status.Completed, status.Failed} {
			j := jobtest.Seed(t, rdb, "doneq", st, jobtest.Opts{Prefix: prefix})
			got, err := insp.Get(ctx, "doneq", j.ID)
			require.NoError(t, err)
			require.Nil(t, got.WaitingFor, st)
			for id, w := range listed("doneq", st) {
				require.Nil(t, w, "%s %s", st, id)
			}
		}
	})
}

// Flow control's reasons, with a worker that runs: a concurrency limit of 1 with three jobs
// (two wait for the slot the running one holds), and a rate of one job an hour (the second
// is due when the rate frees, marked by admit.lua).
func TestInspectorWaitingForLimits(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix, client, insp := workersOf(t, rdb)
	ctx := t.Context()
	release := make(chan struct{})
	defer close(release) // before the workers stop (t.Cleanup)
	block := func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	}
	for _, c := range []struct {
		queue string
		limit pipeline.Limit
		kind  status.Reason
	}{
		{"conc", pipeline.Limit{Concurrency: 1}, status.ConcurrencyLimit},
		{"rate", pipeline.Limit{Rate: 1, Interval: time.Hour}, status.RateLimit},
	} {
		_, err := insp.CreateQueue(ctx, c.queue, pipeline.QueueOptions{})
		require.NoError(t, err)
		require.NoError(t, insp.SetLimit(ctx, c.queue, c.limit))
		startWorkerOn(t, rdb, pipeline.WorkerConfig{Prefix: prefix, Queues: []string{c.queue}, Concurrency: 3},
			map[string]pipeline.HandlerFunc{"sleep": block})
		var ids []string
		for range 3 {
			j, err := client.Enqueue(ctx, c.queue, pipeline.Task{Type: "sleep"})
			require.NoError(t, err)
			ids = append(ids, j.ID)
		}
		// Two of the three wait, the third runs.
		var waits []*pipeline.WaitingFor
		require.Eventually(t, func() bool {
			waits = waits[:0]
			running := 0
			for _, id := range ids {
				j, err := insp.Get(ctx, c.queue, id)
				if err != nil {
					return false
				}
				if j.Status == status.InProgress {
					running++
				} else if j.WaitingFor != nil && j.WaitingFor.Kind == c.kind {
					waits = append(waits, j.WaitingFor)
				}
			}
			return running == 1 && len(waits) == 2
		}, 20*time.Second, 10*time.Millisecond, "%s: one runs, two wait", c.queue)
		for _, w := range waits {
			require.Equal(t, "queue", w.Scope)
			if c.kind == status.ConcurrencyLimit {
				require.Equal(t, 1, w.Held)
				require.Equal(t, 1, w.Slots)
				require.Equal(t, "concurrency limit of queue: 1 of 1 slots held", w.Detail)
			} else {
				require.True(t, w.Until.After(time.Now().Add(50*time.Minute)), "due when the rate frees: %s", w.Until)
				require.Contains(t, w.Detail, "rate limit of queue until ")
			}
		}
	}
}

// A reason costs its read a bounded number of round trips, whatever the page's size: the
// heartbeats (the index, then the records) and one pipeline of the facts the jobs need. And it
// costs a job's own path nothing: publishing reads no heartbeat and no fact.
func TestWaitingForRoundTrips(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix, client, _ := workersOf(t, rdb)
	counted := redis.NewClient(rdb.Options())
	t.Cleanup(func() { _ = counted.Close() })
	cc := redistest.CountCommands(counted)
	insp, err := pipeline.NewInspector(counted, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	ctx := t.Context()
	fakeReader(t, rdb, prefix, "w", []string{"rt"}, []string{"t"})
	var ids []string
	for k := range 100 {
		j, err := client.Enqueue(ctx, "rt", pipeline.Task{Type: "t"}, pipeline.WithPriority(1+k%4))
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	_, err = insp.Get(ctx, "rt", ids[0]) // loads get.lua into the server's script cache
	require.NoError(t, err)

	base := cc.RoundTrips()
	cc.Record()
	j, err := insp.Get(ctx, "rt", ids[99])
	require.NoError(t, err)
	require.Equal(t, status.Priority, j.WaitingFor.Kind)
	get := cc.RoundTrips() - base
	// The partition count, get.lua, the heartbeats' index and records, the facts.
	require.LessOrEqual(t, get, int64(5), "%v", cc.Take())

	base = cc.RoundTrips()
	p, err := insp.List(ctx, "rt", status.Queued, pipeline.Page{Limit: 100})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 100)
	for _, j := range p.Jobs {
		require.NotNil(t, j.WaitingFor)
	}
	list := cc.RoundTrips() - base

	_, err = insp.Stats(ctx, "rt") // loads latency.lua into the server's script cache
	require.NoError(t, err)
	base = cc.RoundTrips()
	_, err = insp.Stats(ctx, "rt")
	require.NoError(t, err)
	stats := cc.RoundTrips() - base
	t.Logf("round trips: Get %d, List of 100 queued %d, Stats %d", get, list, stats)
	// The gauges' own reads, one for the latency of a queue with queued jobs, and 4 for the
	// reasons: the partitions, the heartbeats (2), the facts.
	require.LessOrEqual(t, stats, int64(8))
}
