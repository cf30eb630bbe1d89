package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// waitWorkflow waits until workflow id of the bundle's queue reaches status and returns it.
func (b *testBundle) waitWorkflow(t *testing.T, id string, status pipeline.WorkflowStatus) *pipeline.WorkflowState {
	t.Helper()
	var last *pipeline.WorkflowState
	var lastErr error
	// Not require.Eventually: its message's arguments are read when it is called, and would
	// show the first state (none), not the last.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		st, err := b.client.GetWorkflow(context.Background(), b.queue, id)
		if lastErr = err; err != nil {
			continue
		}
		if last = st; st.Status == status {
			return st
		}
	}
	t.Fatalf("workflow %s never reached %s (last: %+v, error: %v)", id, status, last, lastErr)
	return nil
}

// order records the order handlers ran in.
type order struct {
	mu  sync.Mutex
	ran []string
}

func (o *order) add(s string) {
	o.mu.Lock()
	o.ran = append(o.ran, s)
	o.mu.Unlock()
}

func (o *order) index(s string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Index(o.ran, s)
}

// A diamond: B and C wait for A, D for both; D reads the results of B and C, and runs after
// both, once.
func TestWorkflowDiamond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var ran order
	var depsOfD *pipeline.Dependencies
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 4}, map[string]pipeline.HandlerFunc{
		"step": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			ran.add(j.ID)
			if strings.HasSuffix(j.ID, ".D") {
				d, err := j.Dependencies(ctx)
				if err != nil {
					return nil, err
				}
				depsOfD = d
			}
			return []byte(`"` + string(j.Payload) + `-done"`), nil
		},
	})
	wf := pipeline.Workflow{ID: "diamond-" + b.queue, Name: "diamond", Tasks: []pipeline.WorkflowTask{
		{Name: "D", Task: pipeline.Task{Type: "step", Payload: []byte("d")}, After: []string{"B", "C"}},
		{Name: "B", Task: pipeline.Task{Type: "step", Payload: []byte("b")}, After: []string{"A"}},
		{Name: "A", Task: pipeline.Task{Type: "step", Payload: []byte("a")}},
		{Name: "C", Task: pipeline.Task{Type: "step", Payload: []byte("c")}, After: []string{"A"}},
	}}
	st, err := b.client.Workflow(ctx, b.queue, wf)
	require.NoError(t, err)
	require.False(t, st.Duplicate)
	require.Equal(t, 4, st.Total)
	require.Equal(t, "A", st.Tasks[0].Name, "topological order")
	require.Equal(t, "D", st.Tasks[3].Name)

	done := b.waitWorkflow(t, wf.ID, pipeline.WorkflowCompleted)
	require.Equal(t, 4, done.Completed)
	require.False(t, done.FinishedAt.IsZero())
	for _, task := range done.Tasks {
		require.Equal(t, status.Completed, task.Status, task.Name)
	}
	id := func(n string) string { return wf.ID + "." + n }
	require.Less(t, ran.index(id("A")), ran.index(id("B")))
	require.Less(t, ran.index(id("A")), ran.index(id("C")))
	require.Less(t, ran.index(id("B")), ran.index(id("D")))
	require.Less(t, ran.index(id("C")), ran.index(id("D")))
	require.Len(t, ran.ran, 4, "each task once")
	require.NotNil(t, depsOfD)
	require.Equal(t, 2, depsOfD.Completed)
	require.Equal(t, map[string][]byte{"B": []byte(`"b-done"`), "C": []byte(`"c-done"`)}, depsOfD.Results)

	j, err := b.client.Get(ctx, b.queue, id("D"))
	require.NoError(t, err)
	require.Equal(t, wf.ID, j.Workflow)
	require.Equal(t, "D", j.Task)

	// Sent again (a lost reply): found, nothing written.
	again, err := b.client.Workflow(ctx, b.queue, wf)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	// The same id with other tasks: a conflict.
	wf.Tasks = wf.Tasks[:3]
	wf.Tasks[0].After = []string{"B"}
	_, err = b.client.Workflow(ctx, b.queue, wf)
	require.ErrorIs(t, err, pipeline.ErrConflict)
}

// A task waits, in status.Waiting, until its dependency completed; nothing polls: the script
// that completes the dependency queues it.
func TestWorkflowTaskWaitsForItsDependency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	release := make(chan struct{})
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 2}, map[string]pipeline.HandlerFunc{
		"slow": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			<-release
			return nil, nil
		},
		"fast": echo,
	})
	wf := pipeline.Chain(pipeline.Task{Type: "slow"}, pipeline.Task{Type: "fast"})
	st, err := b.client.Workflow(ctx, b.queue, wf)
	require.NoError(t, err)
	b.waitStatus(t, st.ID+".1", status.InProgress)
	second, err := b.client.Get(ctx, b.queue, st.ID+".2")
	require.NoError(t, err)
	require.Equal(t, status.Waiting, second.Status)
	close(release)
	b.waitStatus(t, st.ID+".2", status.Completed)
	b.waitWorkflow(t, st.ID, pipeline.WorkflowCompleted)
}

// A dead task cancels its dependents (and theirs) with the reason; a replay of it resumes the
// workflow, which then completes.
func TestWorkflowDeadTaskThenReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var mu sync.Mutex
	healed := false
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 2}, map[string]pipeline.HandlerFunc{
		"ok": echo,
		"flaky": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			if !healed {
				return nil, pipeline.SkipRetry(errors.New("disk full"))
			}
			return []byte(`"fixed"`), nil
		},
	})
	wf := pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
		{Name: "a", Task: pipeline.Task{Type: "ok"}},
		{Name: "b", Task: pipeline.Task{Type: "flaky"}, After: []string{"a"}},
		{Name: "c", Task: pipeline.Task{Type: "ok"}, After: []string{"b"}},
		{Name: "d", Task: pipeline.Task{Type: "ok"}, After: []string{"c", "a"}},
		{Name: "side", Task: pipeline.Task{Type: "ok"}, After: []string{"a"}},
		{Name: "cleanup", Task: pipeline.Task{Type: "ok"}, After: []string{"d", "side"}, Finally: true},
	}}
	st, err := b.client.Workflow(ctx, b.queue, wf)
	require.NoError(t, err)
	failed := b.waitWorkflow(t, st.ID, pipeline.WorkflowFailed)
	require.Equal(t, 1, failed.Failed)
	require.Equal(t, 2, failed.Canceled, "c and d")
	require.Equal(t, 3, failed.Completed, "a, side and the Finally cleanup")
	require.True(t, failed.FinishedAt.IsZero(), "a dead task may be replayed: not finished")
	c, err := b.client.Get(ctx, b.queue, st.ID+".c")
	require.NoError(t, err)
	require.Equal(t, status.Canceled, c.Status)
	require.Contains(t, c.LastError, "dependency b failed: disk full")
	d, err := b.client.Get(ctx, b.queue, st.ID+".d")
	require.NoError(t, err)
	require.Equal(t, status.Canceled, d.Status)
	require.Contains(t, d.LastError, "dependency c was canceled")

	mu.Lock()
	healed = true
	mu.Unlock()
	err = b.insp.Replay(ctx, b.queue, st.ID+".b")
	require.NoError(t, err)
	done := b.waitWorkflow(t, st.ID, pipeline.WorkflowCompleted)
	require.Equal(t, 6, done.Completed)
	require.Zero(t, done.Canceled)
	require.Zero(t, done.Failed)
}

// A batch's callback runs once, when every job is final, with the counts of each outcome.
func TestBatchCallbackOnceWithCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var mu sync.Mutex
	var calls []pipeline.Dependencies
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 8}, map[string]pipeline.HandlerFunc{
		"job": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			if string(j.Payload) == "bad" {
				return nil, pipeline.SkipRetry(errors.New("bad input"))
			}
			return j.Payload, nil
		},
		"done": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			d, err := j.Dependencies(ctx)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			calls = append(calls, *d)
			mu.Unlock()
			return nil, nil
		},
	})
	var jobs []pipeline.Task
	for i := range 50 {
		p := fmt.Sprintf(`"%d"`, i)
		if i%10 == 0 {
			p = "bad"
		}
		jobs = append(jobs, pipeline.Task{Type: "job", Payload: []byte(p)})
	}
	st, err := b.client.Batch(ctx, b.queue, pipeline.Batch{Name: "fifty", Jobs: jobs, Callback: &pipeline.Task{Type: "done"}})
	require.NoError(t, err)
	require.Equal(t, "batch", st.Kind)
	require.Equal(t, 51, st.Total)
	b.waitStatus(t, st.ID+".callback", status.Completed)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, 1)
	require.Equal(t, 45, calls[0].Completed)
	require.Equal(t, 5, calls[0].Failed)
	require.Len(t, calls[0].Results, 45)
	end, err := b.client.GetWorkflow(ctx, b.queue, st.ID)
	require.NoError(t, err)
	require.Equal(t, pipeline.WorkflowFailed, end.Status)
	require.Equal(t, 46, end.Completed)
	require.Equal(t, 5, end.Failed)
}

// Bad workflows are refused before anything is written.
func TestWorkflowRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	task := pipeline.Task{Type: "t"}
	for _, tc := range []struct {
		name string
		wf   pipeline.Workflow
		want string
	}{
		{"empty", pipeline.Workflow{}, "needs a task"},
		{"cycle", pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
			{Name: "a", Task: task, After: []string{"b"}}, {Name: "b", Task: task, After: []string{"a"}}}}, "cycle"},
		{"self", pipeline.Workflow{Tasks: []pipeline.WorkflowTask{{Name: "a", Task: task, After: []string{"a"}}}}, "itself"},
		{"unknown dep", pipeline.Workflow{Tasks: []pipeline.WorkflowTask{{Name: "a", Task: task, After: []string{"z"}}}}, "no task"},
		{"duplicate name", pipeline.Workflow{Tasks: []pipeline.WorkflowTask{{Name: "a", Task: task}, {Name: "a", Task: task}}}, "two tasks"},
		{"bad name", pipeline.Workflow{Tasks: []pipeline.WorkflowTask{{Name: "a.b", Task: task}}}, "not allowed"},
		{"finally alone", pipeline.Workflow{Tasks: []pipeline.WorkflowTask{{Name: "a", Task: task, Finally: true}}}, "Finally"},
		{"delay", pipeline.Workflow{Tasks: []pipeline.WorkflowTask{{Name: "a", Task: pipeline.Task{Type: "t",
			Opts: []pipeline.Option{pipeline.WithDelay(time.Hour)}}}}}, "WithDelay"},
		{"unique", pipeline.Workflow{Tasks: []pipeline.WorkflowTask{{Name: "a", Task: pipeline.Task{Type: "t",
			Opts: []pipeline.Option{pipeline.WithUnique("k", time.Hour)}}}}}, "WithUnique"},
		{"no type", pipeline.Workflow{Tasks: []pipeline.WorkflowTask{{Name: "a"}}}, "type"},
		{"limit key", pipeline.Workflow{Tasks: []pipeline.WorkflowTask{{Name: "a", Task: pipeline.Task{Type: "t",
			Opts: []pipeline.Option{pipeline.WithLimitKey("tenant-1")}}}}}, "WithLimitKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.client.Workflow(ctx, b.queue, tc.wf)
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.Empty(t, b.queueKeys(t), "nothing written")
}

// The queue's workflows are listed newest first, without their tasks.
func TestInspectorWorkflowsNewestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fixedClock: true})
	ctx := context.Background()
	for i := range 3 {
		_, err := b.client.Workflow(ctx, b.queue, pipeline.Workflow{ID: fmt.Sprintf("wf-%d", i), Name: fmt.Sprintf("n%d", i),
			Tasks: []pipeline.WorkflowTask{{Name: "a", Task: pipeline.Task{Type: "t"}}}})
		require.NoError(t, err)
		b.now = b.now.Add(time.Second) // distinct publish times: the index's order
	}
	got, err := b.insp.Workflows(ctx, b.queue, 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "wf-2", got[0].ID)
	require.Equal(t, "wf-1", got[1].ID)
	require.Nil(t, got[0].Tasks)
	require.Equal(t, pipeline.WorkflowRunning, got[0].Status)
	_, err = b.insp.Workflows(ctx, b.queue, 0)
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}

// A workflow id sent again is the same workflow only with the same tasks and payloads (a job's
// rule: the same type and payload); other options do not count, as for a job.
func TestWorkflowRepublishComparesPayloads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := func(payload string, opts ...pipeline.Option) pipeline.Workflow {
		return pipeline.Workflow{ID: "w", Tasks: []pipeline.WorkflowTask{{Name: "a", Task: pipeline.Task{Type: "t", Payload: []byte(payload), Opts: opts}}}}
	}
	_, err := b.client.Workflow(ctx, b.queue, wf("ada"))
	require.NoError(t, err)
	_, err = b.client.Workflow(ctx, b.queue, wf("bob"))
	require.ErrorIs(t, err, pipeline.ErrConflict)
	again, err := b.client.Workflow(ctx, b.queue, wf("ada", pipeline.WithMaxRetries(0)))
	require.NoError(t, err)
	require.True(t, again.Duplicate)
}

// denseWorkflow is two layers of width tasks, every task of the second waiting for every task
// of the first: width*width dependencies.
func denseWorkflow(width int) pipeline.Workflow {
	var wf pipeline.Workflow
	top := make([]string, width)
	for i := range width {
		top[i] = fmt.Sprintf("a%d", i)
		wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: top[i], Task: pipeline.Task{Type: "t"}})
	}
	for i := range width {
		wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: fmt.Sprintf("b%d", i), Task: pipeline.Task{Type: "t"}, After: top})
	}
	return wf
}

// A workflow's dependencies are bounded as its tasks are: a few thousand tasks can name
// millions of them (issue 30: 5,000 tasks and 2.06M dependencies were accepted, and publishing
// and canceling them held Redis for seconds to minutes). One over the bound is refused, naming
// it, before anything is written; the bound itself is accepted.
func TestWorkflowRefusesTooManyDependencies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	over := denseWorkflow(101) // 10,201 dependencies
	_, err := b.client.Workflow(ctx, b.queue, over)
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	require.ErrorContains(t, err, "10201 dependencies, more than the 10000 of a workflow")
	require.Empty(t, b.queueKeys(t), "nothing written")

	// The bound exactly: two layers of 100 (100*100 = 10,000).
	st, err := b.client.Workflow(ctx, b.queue, denseWorkflow(100))
	require.NoError(t, err)
	require.Equal(t, 200, st.Total)
}

// A task keeps the retention its options gave it: its job's record, once completed, expires
// after that retention, not the queue's default (a mutant that dropped the task's retention_ms
// from workflow.lua's write survived every test).
func TestWorkflowTaskKeepsItsRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"t": echo})
	const keep = 7 * time.Minute
	st, err := b.client.Workflow(ctx, b.queue, pipeline.Workflow{ID: "w", Tasks: []pipeline.WorkflowTask{
		{Name: "a", Task: pipeline.Task{Type: "t", Opts: []pipeline.Option{pipeline.WithRetention(keep)}}},
		{Name: "b", Task: pipeline.Task{Type: "t"}, After: []string{"a"}},
	}})
	require.NoError(t, err)
	b.waitWorkflow(t, st.ID, pipeline.WorkflowCompleted)
	ttl, err := b.rdb.PTTL(ctx, b.q.Job("w.a")).Result()
	require.NoError(t, err)
	require.LessOrEqual(t, ttl, keep, "the task's own retention")
	require.Greater(t, ttl, keep-time.Minute)
	ttl, err = b.rdb.PTTL(ctx, b.q.Job("w.b")).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, keep, "a task without one keeps the default")
}

// A task's id that names a job of its own (a plain job published with that id) makes the
// workflow a conflict: ErrConflict naming the job, nothing of the workflow written, the job
// unchanged. The other way round, a plain job published with a task's id and another payload
// is ErrConflict too, and the task unchanged.
func TestWorkflowTaskIDOfAPlainJobConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "plain", Payload: []byte(`{"n":1}`)}, pipeline.WithID("w.a"))
	require.NoError(t, err)
	before, err := b.rdb.HGetAll(ctx, b.q.Job("w.a")).Result()
	require.NoError(t, err)
	_, err = b.client.Workflow(ctx, b.queue, pipeline.Workflow{ID: "w", Tasks: []pipeline.WorkflowTask{
		{Name: "z", Task: pipeline.Task{Type: "t"}},
		{Name: "a", Task: pipeline.Task{Type: "t", Payload: []byte(`{"n":2}`)}, After: []string{"z"}},
	}})
	require.ErrorIs(t, err, pipeline.ErrConflict)
	require.ErrorContains(t, err, "job w.a exists")
	after, err := b.rdb.HGetAll(ctx, b.q.Job("w.a")).Result()
	require.NoError(t, err)
	require.Equal(t, before, after, "the plain job unchanged")
	_, err = b.client.GetWorkflow(ctx, b.queue, "w")
	require.ErrorIs(t, err, pipeline.ErrNotFound, "nothing of the workflow written")
	n, err := b.rdb.Exists(ctx, b.q.Job("w.z")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no task written")

	_, err = b.client.Workflow(ctx, b.queue, pipeline.Workflow{ID: "v", Tasks: []pipeline.WorkflowTask{
		{Name: "a", Task: pipeline.Task{Type: "t", Payload: []byte(`{"n":3}`)}}}})
	require.NoError(t, err)
	task, err := b.rdb.HGetAll(ctx, b.q.Job("v.a")).Result()
	require.NoError(t, err)
	_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "plain", Payload: []byte(`{"n":4}`)}, pipeline.WithID("v.a"))
	require.ErrorIs(t, err, pipeline.ErrConflict)
	again, err := b.rdb.HGetAll(ctx, b.q.Job("v.a")).Result()
	require.NoError(t, err)
	require.Equal(t, task, again, "the task unchanged")
}
