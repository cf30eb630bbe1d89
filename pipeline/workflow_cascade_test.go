package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/faultproxy"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// wideWorkflow is a root, width tasks after it, and a Finally task after all of those:
// 2*width dependencies.
func wideWorkflow(id string, width int) pipeline.Workflow {
	wf := pipeline.Workflow{ID: id, Tasks: []pipeline.WorkflowTask{{Name: "root", Task: pipeline.Task{Type: "t"}}}}
	mid := make([]string, width)
	for i := range width {
		mid[i] = fmt.Sprintf("m%d", i)
		wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: mid[i], Task: pipeline.Task{Type: "t"}, After: []string{"root"}})
	}
	wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: "fin", Task: pipeline.Task{Type: "t"}, After: mid, Finally: true})
	return wf
}

// canceledTasks counts the tasks of st whose status is canceled.
func canceledTasks(st *pipeline.WorkflowState) int {
	n := 0
	for _, t := range st.Tasks {
		if t.Status == status.Canceled {
			n++
		}
	}
	return n
}

// Canceling the root of a wide workflow cancels its dependents in calls that each follow at
// most jobstate.CascadeStep of them (issue 30: canceling the root of 5,000 tasks and 2.06M
// dependencies held Redis for 134 s in one call, and the API answered 503 although the cancel
// was applied). The cancel's own call follows one step; Cancel goes on with the rest before it
// returns, successfully, each call a step; the Finally task then runs, once.
func TestWorkflowCancelCascadesInSteps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const width = 1000
	st, err := b.client.Workflow(ctx, b.queue, wideWorkflow("wide", width))
	require.NoError(t, err)

	cmds := redistest.CountCommands(b.rdb)
	require.NoError(t, b.client.Cancel(ctx, b.queue, "wide.root"))
	calls := int(cmds.Scripts())
	// The cancel, then at least width/CascadeStep calls more: the cascade was not one call.
	require.GreaterOrEqual(t, calls, 1+width/jobstate.CascadeStep, "script calls")

	end, err := b.client.GetWorkflow(ctx, b.queue, st.ID)
	require.NoError(t, err)
	require.Equal(t, 1+width, canceledTasks(end), "the root and every task after it")
	require.Equal(t, 1+width, end.Canceled)
	require.Equal(t, status.Queued, end.Tasks[len(end.Tasks)-1].Status, "the Finally task, released once")
	left, err := b.rdb.LLen(ctx, b.q.WorkflowCascade()).Result()
	require.NoError(t, err)
	require.Zero(t, left, "nothing left to follow")
}

// Each call of a cascade follows at most jobstate.CascadeStep edges: the cancel's own call,
// then each FollowCascade call, cancel at most that many tasks, and what is left waits on the
// queue's work list in between.
func TestWorkflowCascadeStepIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const width = 1000
	_, err := b.client.Workflow(ctx, b.queue, wideWorkflow("wide", width))
	require.NoError(t, err)
	now := time.Now()
	row, err := jobstate.NewStore(b.rdb, "").Cancel(ctx, b.q, jobstate.CancelParams{ID: "wide.root", Now: now, Retention: time.Hour, MinRetention: time.Minute})
	require.NoError(t, err)
	require.Equal(t, script.OK, row.Code)
	st, err := b.client.GetWorkflow(ctx, b.queue, "wide")
	require.NoError(t, err)
	first := canceledTasks(st) - 1 // less the root
	require.Positive(t, first)
	require.LessOrEqual(t, first, jobstate.CascadeStep, "tasks the cancel's own call canceled")
	require.NotEqual(t, "0", row.Data, "the cancel says a cascade is left")

	total, steps := first, 0
	for {
		r, err := jobstate.NewStore(b.rdb, "").FollowCascade(ctx, b.q, jobstate.CascadeParams{Now: now})
		require.NoError(t, err)
		require.LessOrEqual(t, r.Canceled, jobstate.CascadeStep)
		total += r.Canceled
		steps++
		if r.Left == 0 {
			break
		}
		// The cascade has 2*width edges (the root's, then each canceled task's to fin).
		require.Less(t, steps, 2*width/jobstate.CascadeStep+2, "every step follows a full budget of edges")
	}
	require.Equal(t, width, total, "each task canceled once")
	require.GreaterOrEqual(t, steps, width/jobstate.CascadeStep)
	st, err = b.client.GetWorkflow(ctx, b.queue, "wide")
	require.NoError(t, err)
	require.Equal(t, 1+width, st.Canceled)
	require.Equal(t, 1+width, canceledTasks(st))
}

// A cascade left unfinished by a process that died between its calls (only the cancel's own
// call ran) is finished by the queue's recoverer, in a worker started later: every task
// canceled once, the Finally task run once with the counts of them all.
func TestWorkflowCascadeFinishedByRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const width = 600
	_, err := b.client.Workflow(ctx, b.queue, wideWorkflow("wide", width))
	require.NoError(t, err)
	row, err := jobstate.NewStore(b.rdb, "").Cancel(ctx, b.q, jobstate.CancelParams{ID: "wide.root", Now: time.Now(), Retention: time.Hour, MinRetention: time.Minute})
	require.NoError(t, err)
	require.Equal(t, script.OK, row.Code)
	require.NotEqual(t, "0", row.Data)

	ran := make(chan *pipeline.Dependencies, 2)
	b.startWorker(t, pipeline.WorkerConfig{RecoveryInterval: 50 * time.Millisecond}, map[string]pipeline.HandlerFunc{
		"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) { return nil, sendDependencies(ctx, j, ran) },
	})
	end := b.waitWorkflow(t, "wide", pipeline.WorkflowCanceled)
	require.Equal(t, 1+width, end.Canceled)
	require.Equal(t, width, ranOnce(t, ran).Canceled, "the Finally task saw every cancel")
}

// sendDependencies sends what j's dependencies did (Job.Dependencies) to ch.
func sendDependencies(ctx context.Context, j *pipeline.Job, ch chan<- *pipeline.Dependencies) error {
	d, err := j.Dependencies(ctx)
	if err != nil {
		return err
	}
	ch <- d
	return nil
}

// ranOnce receives the dependencies a Finally task sent (sendDependencies) and fails the test
// if it sent them twice by now.
func ranOnce(t *testing.T, ch <-chan *pipeline.Dependencies) *pipeline.Dependencies {
	t.Helper()
	d := <-ch
	select {
	case d := <-ch:
		t.Fatalf("the Finally task ran twice: %+v", d)
	default:
	}
	return d
}

// A dead task replayed while its cascade is still partly on the queue's work list (no
// recoverer ran, no other task ended) finds it followed first: every task the death canceled
// is restored and the workflow completes; the Finally task, which the followed cascade
// released, runs once, as after any death.
func TestWorkflowReplayWhileCascadeLeft(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const width = 600
	var healed atomic.Bool
	fins := make(chan *pipeline.Dependencies, 2)
	b.startWorker(t, pipeline.WorkerConfig{Concurrency: 8, DisableRecovery: true}, map[string]pipeline.HandlerFunc{
		"t": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			switch taskOf(j) {
			case "root":
				if !healed.Load() {
					return nil, pipeline.SkipRetry(errors.New("disk full"))
				}
			case "fin":
				return nil, sendDependencies(ctx, j, fins)
			}
			return nil, nil
		},
	})
	_, err := b.client.Workflow(ctx, b.queue, wideWorkflow("wide", width))
	require.NoError(t, err)
	b.waitStatus(t, "wide.root", status.Failed)
	left, err := b.rdb.LLen(ctx, b.q.WorkflowCascade()).Result()
	require.NoError(t, err)
	require.Positive(t, left, "the death's cascade is partly left")

	healed.Store(true)
	require.NoError(t, b.insp.Replay(ctx, b.queue, "wide.root"))
	end := b.waitWorkflow(t, "wide", pipeline.WorkflowCompleted)
	require.Equal(t, width+2, end.Completed)
	require.Equal(t, width, ranOnce(t, fins).Canceled, "the Finally task ran after the death, with every cancel")
}

// A cancel that was applied answers success even when the calls that follow its cascade fail
// (issue 30: the API answered 503 for a cancel Redis had applied, because the one call that
// followed the whole cascade outlasted the client's read timeout). Here every reply to a
// cascade call is lost: Cancel still returns nil, the root is canceled, and what is left of the
// cascade waits on the queue's work list for the recoverer, which a later FollowCascade (the
// recoverer's call) finishes.
func TestWorkflowCancelAppliedIsSuccessWhenCascadeCallsFail(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	prdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = prdb.Close() })
	b := setup(t, setupOpts{rdb: prdb})
	ctx := t.Context()
	const width = 600
	_, err := b.client.Workflow(ctx, b.queue, wideWorkflow("wide", width))
	require.NoError(t, err)

	proxy.DropOnly(faultproxy.RequestContains(b.q.WorkflowCascade()))
	proxy.DropRepliesRandomly(1)
	require.NoError(t, b.client.Cancel(ctx, b.queue, "wide.root"), "the cancel was applied")
	require.Positive(t, proxy.Dropped(), "a cascade call's reply was lost")
	proxy.DropRepliesRandomly(0)

	root, err := b.client.Get(ctx, b.queue, "wide.root")
	require.NoError(t, err)
	require.Equal(t, status.Canceled, root.Status)
	for {
		r, err := jobstate.NewStore(srv.Client(t), "").FollowCascade(ctx, b.q, jobstate.CascadeParams{Now: time.Now()})
		require.NoError(t, err)
		if r.Left == 0 {
			break
		}
	}
	st, err := b.client.GetWorkflow(ctx, b.queue, "wide")
	require.NoError(t, err)
	require.Equal(t, 1+width, st.Canceled, "every task canceled once")
	require.Equal(t, 1+width, canceledTasks(st))
}
