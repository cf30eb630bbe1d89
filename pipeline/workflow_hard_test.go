package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/tracetest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// The hard cases of workflows: wide fan-out and fan-in, a wide batch, a Redis Cluster and a
// partitioned queue, a worker lost on a task's last attempt, and cancels of waiting and
// running tasks.

// fanWorkflow is "root", then width tasks "f<i>" after root, then "join" after all of them.
func fanWorkflow(id string, width int) pipeline.Workflow {
	wf := pipeline.Workflow{ID: id, Name: "fan", Tasks: []pipeline.WorkflowTask{{Name: "root", Task: pipeline.Task{Type: "root"}}}}
	after := make([]string, width)
	for i := range width {
		after[i] = "f" + strconv.Itoa(i)
		wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: after[i],
			Task: pipeline.Task{Type: "fan", Payload: []byte(strconv.Itoa(i))}, After: []string{"root"}})
	}
	wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: "join", Task: pipeline.Task{Type: "join"}, After: after})
	return wf
}

// Fan-out of 1000 then fan-in: the join runs once, after every one of the 1000 completed (as
// the workflow records it when the join starts), and reads all 1000 results.
func TestWorkflowFanOutFanIn1000(t *testing.T) {
	t.Parallel()
	const width = 1000
	b := setup(t)
	ctx := t.Context()
	id := "fan-" + b.queue
	var fanRuns, rootRuns, joinRuns atomic.Int32
	var rootDone atomic.Bool
	joinSaw := make(chan *pipeline.WorkflowState, 1)
	joinDeps := make(chan *pipeline.Dependencies, 1)
	lastGate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(lastGate) }) }
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 32}, map[string]pipeline.HandlerFunc{
		"root": func(context.Context, *pipeline.Job) ([]byte, error) {
			rootRuns.Add(1)
			return nil, nil
		},
		"fan": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			if !rootDone.Load() {
				// The root's record says completed before any fan task runs.
				r, err := b.client.Get(ctx, b.queue, id+".root")
				if err != nil || r.Status != status.Completed {
					return nil, pipeline.SkipRetry(fmt.Errorf("fan task ran before root completed: %v %v", r, err))
				}
				rootDone.Store(true)
			}
			fanRuns.Add(1)
			if string(j.Payload) == strconv.Itoa(width-1) {
				<-lastGate // the test checks the join waits for this one
			}
			return []byte(`"r` + string(j.Payload) + `"`), nil
		},
		"join": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			joinRuns.Add(1)
			st, err := b.client.GetWorkflow(ctx, b.queue, id)
			if err != nil {
				return nil, err
			}
			d, err := j.Dependencies(ctx)
			if err != nil {
				return nil, err
			}
			select {
			case joinSaw <- st:
				joinDeps <- d
			default:
			}
			return nil, nil
		},
	})
	t.Cleanup(openGate) // before the worker's stop: cleanups run last first
	st, err := b.client.Workflow(ctx, b.queue, fanWorkflow(id, width))
	require.NoError(t, err)
	require.Equal(t, width+2, st.Total)
	require.Equal(t, "join", st.Tasks[width+1].Name)

	// Everything but the last fan task completed (it is held): the join still waits.
	var held *pipeline.WorkflowState
	require.Eventually(t, func() bool {
		held, err = b.client.GetWorkflow(ctx, b.queue, id)
		return err == nil && held.Completed == width
	}, 60*time.Second, 5*time.Millisecond)
	join, err := b.client.Get(ctx, b.queue, id+".join")
	require.NoError(t, err)
	require.Equal(t, status.Waiting, join.Status, "the join waits for the last of %d", width)
	require.EqualValues(t, 0, joinRuns.Load())
	openGate()

	done := b.waitWorkflow(t, id, pipeline.WorkflowCompleted)
	require.Equal(t, width+2, done.Completed)
	require.Zero(t, done.Failed+done.Canceled)
	require.EqualValues(t, 1, rootRuns.Load())
	require.EqualValues(t, width, fanRuns.Load(), "each fan task once")
	require.EqualValues(t, 1, joinRuns.Load(), "the join once")

	seen := <-joinSaw
	require.Equal(t, width+1, seen.Completed, "when the join started, root and all %d had completed", width)
	for _, task := range seen.Tasks {
		if task.Name != "join" {
			require.Equal(t, status.Completed, task.Status, task.Name)
		}
	}
	d := <-joinDeps
	require.Equal(t, width, d.Completed)
	require.Zero(t, d.Failed+d.Canceled)
	require.Len(t, d.Results, width)
	require.Equal(t, []byte(`"r999"`), d.Results["f999"])
	var joinStart time.Time
	var lastFan time.Time
	for _, task := range done.Tasks {
		switch {
		case task.Name == "join":
			joinStart = task.StartedAt
		case task.Name != "root":
			lastFan = maxTime(lastFan, task.FinishedAt)
		}
	}
	require.False(t, joinStart.Before(lastFan), "join started %v, before the last fan task finished %v", joinStart, lastFan)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// A wide batch: 2,000 jobs, 100 of them dead at once, and a callback that runs once with the
// exact counts and results.
func TestBatchWide2000(t *testing.T) {
	t.Parallel()
	const n, bad = 2000, 100
	b := setup(t)
	ctx := t.Context()
	var calls atomic.Int32
	got := make(chan *pipeline.Dependencies, 1)
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 32}, map[string]pipeline.HandlerFunc{
		"job": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			if string(j.Payload) == "bad" {
				return nil, pipeline.SkipRetry(errors.New("bad"))
			}
			return j.Payload, nil
		},
		"cb": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			calls.Add(1)
			d, err := j.Dependencies(ctx)
			if err != nil {
				return nil, err
			}
			select {
			case got <- d:
			default:
			}
			return nil, nil
		},
	})
	jobs := make([]pipeline.Task, n)
	for i := range jobs {
		p := strconv.Itoa(i)
		if i%(n/bad) == 0 {
			p = "bad"
		}
		jobs[i] = pipeline.Task{Type: "job", Payload: []byte(p)}
	}
	st, err := b.client.Batch(ctx, b.queue, pipeline.Batch{Jobs: jobs, Callback: &pipeline.Task{Type: "cb"}})
	require.NoError(t, err)
	require.Equal(t, n+1, st.Total)
	b.waitStatus(t, st.ID+".callback", status.Completed)
	d := <-got
	require.EqualValues(t, 1, calls.Load())
	require.Equal(t, n-bad, d.Completed)
	require.Equal(t, bad, d.Failed)
	require.Zero(t, d.Canceled)
	require.Len(t, d.Results, n-bad)
	end, err := b.client.GetWorkflow(ctx, b.queue, st.ID)
	require.NoError(t, err)
	require.Equal(t, pipeline.WorkflowFailed, end.Status)
	require.Equal(t, n-bad+1, end.Completed)
	require.Equal(t, bad, end.Failed)
}

// On a Redis Cluster, a diamond and a batch complete: every script of a workflow touches keys
// of one hash tag (a CROSSSLOT error otherwise). In a partitioned queue the workflow lives in
// the partition its id routes to, and GetWorkflow and Inspector.Workflow find it there.
func TestWorkflowCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t)
	for _, tc := range []struct {
		name       string
		partitions int
	}{{"plain", 0}, {"3-partitions", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{rdb: cluster.Client(t)})
			ctx := t.Context()
			if tc.partitions > 0 {
				_, err := b.insp.CreateQueue(ctx, b.queue, pipeline.QueueOptions{Partitions: tc.partitions})
				require.NoError(t, err)
			}
			var dRuns atomic.Int32
			var healed atomic.Bool
			var cbDeps atomic.Pointer[pipeline.Dependencies]
			b.startWorker(t, pipeline.WorkerConfig{Concurrency: 4}, map[string]pipeline.HandlerFunc{
				"step": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
					if taskOf(j) == "D" {
						dRuns.Add(1)
						d, err := j.Dependencies(ctx)
						if err != nil {
							return nil, err
						}
						if d.Completed != 2 || len(d.Results) != 2 {
							return nil, pipeline.SkipRetry(fmt.Errorf("D's dependencies: %+v", d))
						}
					}
					return []byte(`"` + taskOf(j) + `"`), nil
				},
				"cb": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
					d, err := j.Dependencies(ctx)
					if err != nil {
						return nil, err
					}
					cbDeps.Store(d)
					return nil, nil
				},
				"flaky": func(context.Context, *pipeline.Job) ([]byte, error) {
					if !healed.Load() {
						return nil, pipeline.SkipRetry(errors.New("not yet"))
					}
					return nil, nil
				},
				"hold": func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
					<-ctx.Done() // until canceled
					return nil, ctx.Err()
				},
			})
			step := pipeline.Task{Type: "step"}
			wfs := make([]string, 0, 8)
			for i := range 4 { // several ids: in a partitioned queue they route to different partitions
				wf := pipeline.Workflow{ID: fmt.Sprintf("diamond-%d", i), Tasks: []pipeline.WorkflowTask{
					{Name: "A", Task: step},
					{Name: "B", Task: step, After: []string{"A"}},
					{Name: "C", Task: step, After: []string{"A"}},
					{Name: "D", Task: step, After: []string{"B", "C"}},
				}}
				_, err := b.client.Workflow(ctx, b.queue, wf)
				require.NoError(t, err)
				wfs = append(wfs, wf.ID)
			}
			jobs := make([]pipeline.Task, 50)
			for i := range jobs {
				jobs[i] = pipeline.Task{Type: "step"}
			}
			bst, err := b.client.Batch(ctx, b.queue, pipeline.Batch{ID: "batch", Jobs: jobs, Callback: &pipeline.Task{Type: "cb"}})
			require.NoError(t, err)
			wfs = append(wfs, bst.ID)

			parts := map[string]bool{}
			for _, id := range wfs {
				st := b.waitWorkflow(t, id, pipeline.WorkflowCompleted)
				require.Equal(t, st.Total, st.Completed)
				ist, err := b.insp.Workflow(ctx, b.queue, id)
				require.NoError(t, err)
				require.Equal(t, pipeline.WorkflowCompleted, ist.Status)

				// Every key of the workflow, the workflow's hash and each task's, in one slot:
				// the one of the partition its id routes to.
				p := max(tc.partitions, 1)
				q := keys.New(keys.DefaultPrefix, b.queue)
				if tc.partitions > 0 {
					q = keys.New(keys.DefaultPrefix, keys.PartitionName(b.queue, keys.PartitionOf(id, p), p))
				}
				parts[q.Tag()] = true
				slot := keySlot(t, b.rdb, q.Workflow(id))
				require.EqualValues(t, 1, b.rdb.Exists(ctx, q.Workflow(id)).Val(), "the workflow's hash in partition %s", q.Tag())
				for _, task := range st.Tasks {
					require.Equal(t, slot, keySlot(t, b.rdb, q.Job(task.JobID)), task.JobID)
					require.EqualValues(t, 1, b.rdb.Exists(ctx, q.Job(task.JobID)).Val(), task.JobID)
				}
			}
			require.EqualValues(t, 4, dRuns.Load(), "each D once")
			d := cbDeps.Load()
			require.NotNil(t, d)
			require.Equal(t, 50, d.Completed)
			require.Len(t, d.Results, 50)
			if tc.partitions > 0 {
				require.Greater(t, len(parts), 1, "the workflows spread over partitions")
			}
			list, err := b.insp.Workflows(ctx, b.queue, 100)
			require.NoError(t, err)
			require.Len(t, list, len(wfs), "listed across partitions")

			// The other scripts that end a task, on the cluster: death (finish.lua), replay
			// (replay.lua), a cancel of a running task (cancel.lua) and a purge.
			for i := range 3 {
				id := fmt.Sprintf("fail-%d", i)
				_, err := b.client.Workflow(ctx, b.queue, pipeline.Workflow{ID: id, Tasks: []pipeline.WorkflowTask{
					{Name: "a", Task: pipeline.Task{Type: "flaky"}},
					{Name: "b", Task: step, After: []string{"a"}},
					{Name: "h", Task: pipeline.Task{Type: "hold"}},
					{Name: "c", Task: step, After: []string{"h"}},
				}})
				require.NoError(t, err)
				b.waitStatus(t, id+".a", status.Failed)
				b.waitStatus(t, id+".h", status.InProgress)
				require.NoError(t, b.client.Cancel(ctx, b.queue, id+".h"))
				b.waitStatus(t, id+".c", status.Canceled)
			}
			b.waitWorkflow(t, "fail-0", pipeline.WorkflowFailed)
			n, err := b.insp.Purge(ctx, b.queue, "fail-0.a")
			require.NoError(t, err)
			require.Equal(t, 1, n)
			healed.Store(true)
			require.NoError(t, b.insp.Replay(ctx, b.queue, "fail-1.a"))
			b.waitStatus(t, "fail-1.b", status.Completed)
			purged := b.waitWorkflow(t, "fail-0", pipeline.WorkflowFailed)
			require.Equal(t, 1, purged.Purged)
			require.False(t, purged.FinishedAt.IsZero())
			replayed := b.waitWorkflow(t, "fail-1", pipeline.WorkflowCanceled) // h and c canceled
			require.Equal(t, 2, replayed.Completed)
		})
	}
}

// taskOf is the name of a task from its job's id: a handler's job, decoded from its stream
// entry, has no Task field (Job.Task: set on jobs read back).
func taskOf(j *pipeline.Job) string { return j.ID[strings.LastIndexByte(j.ID, '.')+1:] }

func keySlot(t *testing.T, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	s, err := rdb.ClusterKeySlot(context.Background(), key).Result()
	require.NoError(t, err)
	return s
}

// A task whose worker is lost on its last attempt goes to the dead set by recovery
// (recover.lua), which cancels the tasks after it; a replay resumes the workflow to the end.
func TestWorkflowTaskLostOnLastAttempt(t *testing.T) {
	t.Parallel()
	const vt = 1500 * time.Millisecond
	b := setup(t)
	ctx := t.Context()
	wf := pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
		{Name: "a", Task: pipeline.Task{Type: "ok"}},
		{Name: "b", Task: pipeline.Task{Type: "hold", Opts: []pipeline.Option{pipeline.WithMaxRetries(0)}}, After: []string{"a"}},
		{Name: "c", Task: pipeline.Task{Type: "ok"}, After: []string{"b"}},
		{Name: "d", Task: pipeline.Task{Type: "ok"}, After: []string{"c"}},
		{Name: "fin", Task: pipeline.Task{Type: "ok"}, After: []string{"d"}, Finally: true},
	}}
	// The victim runs b on a connection the test closes: it can neither renew b's lease nor
	// finish it, as if its process died.
	victimRDB := redis.NewClient(&redis.Options{Addr: b.addr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = victimRDB.Close() })
	started := make(chan struct{}, 1)
	victim, err := pipeline.NewWorker(victimRDB, pipeline.WorkerConfig{Queues: []string{b.queue}, Name: "victim",
		VisibilityTimeout: vt, DisableRecovery: true, ShutdownTimeout: 100 * time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	victim.Handle("ok", echo)
	victim.Handle("hold", func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	vctx, stopVictim := context.WithCancel(context.Background())
	victimDone := make(chan struct{})
	go func() { defer close(victimDone); _ = victim.Run(vctx) }()
	t.Cleanup(func() { stopVictim(); <-victimDone })

	st, err := b.client.Workflow(ctx, b.queue, wf)
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the victim never started b")
	}
	b.waitStatus(t, st.ID+".b", status.InProgress)
	require.NoError(t, victimRDB.Close())

	var healed atomic.Bool
	b.startWorker(t, pipeline.WorkerConfig{Name: "rescuer", VisibilityTimeout: vt, RecoveryInterval: 100 * time.Millisecond},
		map[string]pipeline.HandlerFunc{
			"ok": echo,
			"hold": func(context.Context, *pipeline.Job) ([]byte, error) {
				if !healed.Load() {
					return nil, pipeline.SkipRetry(errors.New("the rescuer must not run b before the replay"))
				}
				return []byte(`"b"`), nil
			},
		})
	failed := b.waitWorkflow(t, st.ID, pipeline.WorkflowFailed)
	require.Equal(t, 1, failed.Failed)
	require.Equal(t, 2, failed.Canceled, "c and d")
	require.Equal(t, 2, failed.Completed, "a and the Finally fin")
	bj, err := b.client.Get(ctx, b.queue, st.ID+".b")
	require.NoError(t, err)
	require.Equal(t, status.Failed, bj.Status)
	require.Contains(t, bj.LastError, "victim", "dead by recovery of the lost attempt")
	cj, err := b.client.Get(ctx, b.queue, st.ID+".c")
	require.NoError(t, err)
	require.Equal(t, status.Canceled, cj.Status)
	require.Contains(t, cj.LastError, "dependency b failed")

	healed.Store(true)
	require.NoError(t, b.insp.Replay(ctx, b.queue, st.ID+".b"))
	done := b.waitWorkflow(t, st.ID, pipeline.WorkflowCompleted)
	require.Equal(t, 5, done.Completed)
	require.False(t, done.FinishedAt.IsZero())
}

// Client.Cancel of a waiting task and of a running one cancels the tasks after it, for good;
// a Finally task after them still runs, with the canceled counted.
func TestWorkflowCancelCascades(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		target string // the task canceled
		gate   status.Status
	}{
		{"waiting", "b", status.Waiting},
		{"running", "a", status.InProgress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := t.Context()
			release := make(chan struct{})
			var once sync.Once
			var mu sync.Mutex
			var ran []string
			var finDeps *pipeline.Dependencies
			b.startWorker(t, pipeline.WorkerConfig{Concurrency: 4}, map[string]pipeline.HandlerFunc{
				"hold": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
					select {
					case <-release:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
					return nil, nil
				},
				"ok": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
					mu.Lock()
					ran = append(ran, taskOf(j))
					mu.Unlock()
					if taskOf(j) == "fin" {
						d, err := j.Dependencies(ctx)
						if err != nil {
							return nil, err
						}
						mu.Lock()
						finDeps = d
						mu.Unlock()
					}
					return nil, nil
				},
			})
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			wf := pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
				{Name: "a", Task: pipeline.Task{Type: "hold"}},
				{Name: "side", Task: pipeline.Task{Type: "ok"}},
				{Name: "b", Task: pipeline.Task{Type: "ok"}, After: []string{"a"}},
				{Name: "c", Task: pipeline.Task{Type: "ok"}, After: []string{"b", "side"}},
				{Name: "fin", Task: pipeline.Task{Type: "ok"}, After: []string{"c", "side"}, Finally: true},
			}}
			st, err := b.client.Workflow(ctx, b.queue, wf)
			require.NoError(t, err)
			b.waitStatus(t, st.ID+".a", status.InProgress)
			b.waitStatus(t, st.ID+"."+tc.target, tc.gate)
			require.NoError(t, b.client.Cancel(ctx, b.queue, st.ID+"."+tc.target))
			once.Do(func() { close(release) })

			end := b.waitWorkflow(t, st.ID, pipeline.WorkflowCanceled)
			b.waitStatus(t, st.ID+".fin", status.Completed)
			byName := map[string]pipeline.WorkflowTaskState{}
			for _, task := range end.Tasks {
				byName[task.Name] = task
			}
			canceled := []string{"b", "c"}
			if tc.target == "a" {
				canceled = []string{"a", "b", "c"}
			}
			for _, n := range canceled {
				require.Equal(t, status.Canceled, byName[n].Status, n)
			}
			require.Equal(t, len(canceled), end.Canceled)
			require.Equal(t, status.Completed, byName["side"].Status)
			require.Equal(t, status.Completed, byName["fin"].Status)
			require.False(t, end.FinishedAt.IsZero(), "a canceled workflow is finished")
			cj, err := b.client.Get(ctx, b.queue, st.ID+".c")
			require.NoError(t, err)
			require.Contains(t, cj.LastError, "dependency b was canceled")
			mu.Lock()
			defer mu.Unlock()
			require.NotContains(t, ran, "b")
			require.NotContains(t, ran, "c")
			require.NotNil(t, finDeps)
			require.Equal(t, 1, finDeps.Completed, "side")
			require.Equal(t, 1, finDeps.Canceled, "c")
			// A canceled task of the workflow cannot be replayed (it is not dead): the workflow
			// stays canceled.
			require.Error(t, b.insp.Replay(ctx, b.queue, st.ID+".c"))
		})
	}
}

// A workflow published under a tracer provider is one trace: the one publish span (under the
// caller's) is the parent of every task's process span, whichever script put the task into
// the stream (workflow.lua at once, or cv_wf_end when its last dependency completed), across
// a producer and a worker with providers of their own. A task's process span links to the
// span of the attempt that completed each dependency (the second, for B, whose first failed),
// a Finally task's too, and a join's to its first 32 dependencies (the cap cv_wf_release
// keeps).
func TestWorkflowOneTrace(t *testing.T) {
	t.Parallel()
	producer, consumer := newRecorder(t), newRecorder(t)
	b := setup(t, setupOpts{client: pipeline.ClientConfig{TracerProvider: producer.tp}})
	var bRuns atomic.Int32
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 4, TracerProvider: consumer.tp},
		map[string]pipeline.HandlerFunc{
			"step": echo,
			"retry": func(context.Context, *pipeline.Job) ([]byte, error) {
				if bRuns.Add(1) == 1 {
					return nil, errors.New("first attempt fails")
				}
				return nil, nil
			},
		})
	ctx, root := producer.tp.Tracer("test").Start(t.Context(), "request")
	step := pipeline.Task{Type: "step"}
	wf := pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
		{Name: "A", Task: step},
		{Name: "B", Task: pipeline.Task{Type: "retry", Opts: []pipeline.Option{pipeline.WithMaxRetries(2)}}, After: []string{"A"}},
		{Name: "C", Task: step, After: []string{"A"}},
		{Name: "D", Task: step, After: []string{"B", "C"}},
		{Name: "E", Task: step, After: []string{"D"}, Finally: true},
	}}
	var wide []string
	for i := range 40 {
		n := "w" + strconv.Itoa(i)
		wide = append(wide, n)
		wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: n, Task: step, After: []string{"A"}})
	}
	wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: "join", Task: step, After: wide})
	st, err := b.client.Workflow(ctx, b.queue, wf)
	require.NoError(t, err)
	root.End()
	b.waitWorkflow(t, st.ID, pipeline.WorkflowCompleted)

	pubs := producer.spans(t, "publish "+b.queue, 1)
	require.Len(t, pubs, 1, "one publish span for the workflow")
	pub := pubs[0]
	require.Equal(t, root.SpanContext().SpanID(), pub.Parent.SpanID())
	procs := consumer.spans(t, "process "+b.queue, len(wf.Tasks)+1) // B twice
	last := map[string]tracetest.SpanStub{}                         // the last attempt's span, by task
	for _, p := range procs {
		id := attr(p, "messaging.message.id").AsString()
		require.Equal(t, pub.SpanContext.TraceID(), p.SpanContext.TraceID(), "%s in the workflow's trace", id)
		require.Equal(t, pub.SpanContext.SpanID(), p.Parent.SpanID(), "%s a child of the publish span", id)
		n := id[strings.LastIndexByte(id, '.')+1:]
		if prev, ok := last[n]; !ok || attr(p, "conveyor.job.attempt").AsInt64() > attr(prev, "conveyor.job.attempt").AsInt64() {
			last[n] = p
		}
	}
	require.Len(t, last, len(wf.Tasks), "every task ran")
	require.EqualValues(t, 2, attr(last["B"], "conveyor.job.attempt").AsInt64())
	links := func(n string) []trace.SpanID {
		var out []trace.SpanID
		for _, l := range last[n].Links {
			require.Equal(t, pub.SpanContext.TraceID(), l.SpanContext.TraceID())
			out = append(out, l.SpanContext.SpanID())
		}
		return out
	}
	span := func(n string) trace.SpanID { return last[n].SpanContext.SpanID() }
	require.Empty(t, links("A"))
	require.Equal(t, []trace.SpanID{span("A")}, links("B"))
	require.ElementsMatch(t, []trace.SpanID{span("B"), span("C")}, links("D"), "B's link is its completing attempt's")
	require.Equal(t, []trace.SpanID{span("D")}, links("E"), "a Finally task links too")
	want := make([]trace.SpanID, 32)
	for i := range want {
		want[i] = span(wide[i])
	}
	require.ElementsMatch(t, want, links("join"), "the join links to its first 32 dependencies")

	// The spans' times do not show the order: a process span covers the done transition, in
	// which the task's dependents are released, so a dependent's span may start before its
	// dependency's ends. The records do (Redis's clock, started_at after finished_at).
	done, err := b.client.GetWorkflow(t.Context(), b.queue, st.ID)
	require.NoError(t, err)
	requireRanAfterDeps(t, done)
}

// requireRanAfterDeps checks that every task of st started no sooner than each of its
// dependencies finished, as the records say.
func requireRanAfterDeps(t *testing.T, st *pipeline.WorkflowState) {
	t.Helper()
	byName := map[string]pipeline.WorkflowTaskState{}
	for _, task := range st.Tasks {
		byName[task.Name] = task
	}
	for _, task := range st.Tasks {
		for _, dep := range task.After {
			require.False(t, task.StartedAt.IsZero(), task.Name)
			require.False(t, task.StartedAt.Before(byName[dep].FinishedAt),
				"%s started %v, before %s finished %v", task.Name, task.StartedAt, dep, byName[dep].FinishedAt)
		}
	}
}

// Client.Wait on the tasks a cascade cancels returns with them canceled, whether a dead task
// (finish.lua) or a caller's cancel (cancel.lua) started the cascade. (The wait wakes on the
// first task's own event as well, so this does not show that the cascade's events are sent.)
func TestWorkflowWaitOnCascade(t *testing.T) {
	t.Parallel()
	for _, trigger := range []string{"dead", "cancel"} {
		t.Run(trigger, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := t.Context()
			release := make(chan struct{})
			b.startWorker(t, pipeline.WorkerConfig{Concurrency: 2}, map[string]pipeline.HandlerFunc{
				"gate": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
					select {
					case <-release:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
					return nil, pipeline.SkipRetry(errors.New("gate failed"))
				},
				"ok": echo,
			})
			wf := pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
				{Name: "a", Task: pipeline.Task{Type: "gate"}},
				{Name: "b", Task: pipeline.Task{Type: "ok"}, After: []string{"a"}},
				{Name: "c", Task: pipeline.Task{Type: "ok"}, After: []string{"b"}},
			}}
			st, err := b.client.Workflow(ctx, b.queue, wf)
			require.NoError(t, err)
			b.waitStatus(t, st.ID+".a", status.InProgress)
			type waited struct {
				j   *pipeline.Job
				err error
			}
			got := make(chan waited, 2)
			var started sync.WaitGroup
			for _, n := range []string{"b", "c"} {
				started.Add(1)
				go func() {
					wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
					defer cancel()
					started.Done()
					j, err := b.client.Wait(wctx, b.queue, st.ID+"."+n)
					got <- waited{j, err}
				}()
			}
			started.Wait()
			// The waits subscribe before their first read; a read finds b and c waiting.
			require.Eventually(t, func() bool {
				n, err := b.rdb.Exists(ctx, b.q.Watching()).Result()
				return err == nil && n == 1
			}, 10*time.Second, 5*time.Millisecond)
			if trigger == "cancel" {
				require.NoError(t, b.client.Cancel(ctx, b.queue, st.ID+".a"))
			}
			close(release)
			for range 2 {
				w := <-got
				require.NoError(t, w.err)
				require.Equal(t, status.Canceled, w.j.Status, w.j.ID)
			}
		})
	}
}

// Purging a workflow's dead task ends the workflow: it counts the task purged, stamps the
// end, and gives the workflow and the tasks the death canceled a retention. The workflow had
// a task die: it failed, whether the dead task is still there or purged.
func TestWorkflowPurgedDeadTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 2}, map[string]pipeline.HandlerFunc{
		"ok": echo,
		"bad": func(context.Context, *pipeline.Job) ([]byte, error) {
			return nil, pipeline.SkipRetry(errors.New("bad"))
		},
	})
	wf := pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
		{Name: "a", Task: pipeline.Task{Type: "ok"}},
		{Name: "b", Task: pipeline.Task{Type: "bad"}, After: []string{"a"}},
		{Name: "c", Task: pipeline.Task{Type: "ok"}, After: []string{"b"}},
	}}
	st, err := b.client.Workflow(ctx, b.queue, wf)
	require.NoError(t, err)
	b.waitWorkflow(t, st.ID, pipeline.WorkflowFailed)
	require.Equal(t, time.Duration(-1), b.rdb.PTTL(ctx, b.q.Job(st.ID+".c")).Val(), "kept for a replay")
	n, err := b.insp.Purge(ctx, b.queue, st.ID+".b")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	end, err := b.client.GetWorkflow(ctx, b.queue, st.ID)
	require.NoError(t, err)
	require.Equal(t, 1, end.Purged)
	require.Zero(t, end.Failed)
	require.Equal(t, 1, end.Canceled)
	require.False(t, end.FinishedAt.IsZero(), "finished once the dead task is purged")
	require.Positive(t, b.rdb.PTTL(ctx, b.q.Workflow(st.ID)).Val(), "the workflow's retention")
	require.Positive(t, b.rdb.PTTL(ctx, b.q.Job(st.ID+".c")).Val(), "the canceled task's retention")
	require.Equal(t, pipeline.WorkflowFailed, end.Status, "a task died: purging it does not make the workflow canceled")
}

// Two dependencies of a task die; one is purged, the other replayed. The task they canceled
// must stay canceled: one of its dependencies will never complete. (Restored, it would wait
// for the purged task for ever, on a hash the purge gave a retention, and the workflow would
// never end.) The workflow ends once the replayed task completes.
func TestWorkflowReplayAfterPurgedSibling(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	var healed atomic.Bool
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 2}, map[string]pipeline.HandlerFunc{
		"ok": echo,
		"bad": func(context.Context, *pipeline.Job) ([]byte, error) {
			if healed.Load() {
				return nil, nil
			}
			return nil, pipeline.SkipRetry(errors.New("bad"))
		},
	})
	wf := pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
		{Name: "b", Task: pipeline.Task{Type: "bad"}},
		{Name: "c", Task: pipeline.Task{Type: "bad"}},
		{Name: "d", Task: pipeline.Task{Type: "ok"}, After: []string{"b", "c"}},
	}}
	st, err := b.client.Workflow(ctx, b.queue, wf)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s, err := b.client.GetWorkflow(ctx, b.queue, st.ID)
		return err == nil && s.Failed == 2
	}, 30*time.Second, 5*time.Millisecond)
	n, err := b.insp.Purge(ctx, b.queue, st.ID+".c")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	healed.Store(true)
	require.NoError(t, b.insp.Replay(ctx, b.queue, st.ID+".b"))
	b.waitStatus(t, st.ID+".b", status.Completed)

	d, err := b.client.Get(ctx, b.queue, st.ID+".d")
	require.NoError(t, err)
	require.Equal(t, status.Canceled, d.Status, "d waits for c, purged: it cannot run")
	end, err := b.client.GetWorkflow(ctx, b.queue, st.ID)
	require.NoError(t, err)
	require.Equal(t, pipeline.WorkflowFailed, end.Status)
	require.False(t, end.FinishedAt.IsZero(), "every task is final: the workflow ended")
	require.Equal(t, 1, end.Completed)
	require.Equal(t, 1, end.Purged)
	require.Equal(t, 1, end.Canceled)
}

// A dependency that completes after a canceled dependent's record expired writes nothing for
// it: the decrement of the dependent's count must not make a hash of that one field, which
// would have no TTL and outlive everything (a leak a key per such task).
func TestWorkflowNoHashForExpiredDependent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{client: pipeline.ClientConfig{Retention: 300 * time.Millisecond, MinRetention: 300 * time.Millisecond}})
	ctx := t.Context()
	release := make(chan struct{})
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 2}, map[string]pipeline.HandlerFunc{
		"hold": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return nil, nil
		},
		"ok": echo,
	})
	wf := pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
		{Name: "a", Task: pipeline.Task{Type: "hold"}},
		{Name: "b", Task: pipeline.Task{Type: "ok"}, After: []string{"a"}},
		{Name: "c", Task: pipeline.Task{Type: "ok"}, After: []string{"a", "b"}},
	}}
	st, err := b.client.Workflow(ctx, b.queue, wf)
	require.NoError(t, err)
	b.waitStatus(t, st.ID+".a", status.InProgress)
	require.NoError(t, b.client.Cancel(ctx, b.queue, st.ID+".b"))
	// b and c (canceled with b) expire with the retention while a still runs.
	for _, n := range []string{"b", "c"} {
		require.Eventually(t, func() bool { return b.rdb.Exists(ctx, b.q.Job(st.ID+"."+n)).Val() == 0 },
			10*time.Second, 10*time.Millisecond, "%s expired", n)
	}
	close(release)
	b.waitStatus(t, st.ID+".a", status.Completed)
	for _, n := range []string{"b", "c"} {
		k := b.q.Job(st.ID + "." + n)
		if b.rdb.Exists(ctx, k).Val() == 1 {
			require.NotEqual(t, time.Duration(-1), b.rdb.PTTL(ctx, k).Val(),
				"%s's hash, made again with no TTL: %v", n, b.rdb.HGetAll(ctx, k).Val())
		}
	}
}
