package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// TestWorkflowE2E publishes workflows (through the library: the CLI has no command for it)
// to real worker processes running the built-in handlers, and SIGKILLs the worker while a
// task of the workflow's middle runs.
func TestWorkflowE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills worker processes")
	}
	srv := redistest.Shared(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}
	t.Run("KilledMidWorkflow", func(t *testing.T) { t.Parallel(); testWorkflowKilled(t, c) })
	t.Run("KilledOnLastAttempt", func(t *testing.T) { t.Parallel(); testWorkflowKilledLastAttempt(t, c) })
}

// e2eWorkflow: "start", then three sleeping tasks after it, then "join" after the three and
// "end" after the join. Only the sleeping tasks take opts.
func e2eWorkflow(sleepMS string, opts ...pipeline.Option) pipeline.Workflow {
	sleep := pipeline.Task{Type: "sleep", Payload: []byte(`{"ms":` + sleepMS + `}`), Opts: opts}
	echo := pipeline.Task{Type: "echo", Payload: []byte(`{"ok":true}`)}
	return pipeline.Workflow{Name: "e2e", Tasks: []pipeline.WorkflowTask{
		{Name: "start", Task: echo},
		{Name: "m1", Task: sleep, After: []string{"start"}},
		{Name: "m2", Task: sleep, After: []string{"start"}},
		{Name: "m3", Task: sleep, After: []string{"start"}},
		{Name: "join", Task: echo, After: []string{"m1", "m2", "m3"}},
		{Name: "end", Task: echo, After: []string{"join"}},
	}}
}

// waitMiddleRunning waits until a sleeping task runs on worker and returns its name.
func waitMiddleRunning(t *testing.T, c *cli, q, wfID, worker string) string {
	t.Helper()
	var running string
	waitFor(t, 30*time.Second, 10*time.Millisecond, "a middle task in progress on "+worker, func() bool {
		for _, n := range []string{"m1", "m2", "m3"} {
			if j := c.job(t, q, wfID+"."+n); j.Status == status.InProgress && j.Worker == worker {
				running = n
				return true
			}
		}
		return false
	})
	return running
}

func waitWorkflowStatus(t *testing.T, client *pipeline.Client, q, id string, want pipeline.WorkflowStatus) *pipeline.WorkflowState {
	t.Helper()
	var st *pipeline.WorkflowState
	waitFor(t, 60*time.Second, 50*time.Millisecond, "workflow "+string(want), func() bool {
		var err error
		st, err = client.GetWorkflow(context.Background(), q, id)
		require.NoError(t, err)
		return st.Status == want
	})
	return st
}

// requireOrdered checks, from the records (Redis's clock), that no task started before each
// of its dependencies finished.
func requireOrdered(t *testing.T, st *pipeline.WorkflowState) {
	t.Helper()
	at := map[string]pipeline.WorkflowTaskState{}
	for _, task := range st.Tasks {
		at[task.Name] = task
	}
	for _, task := range st.Tasks {
		for _, dep := range task.After {
			require.False(t, task.StartedAt.Before(at[dep].FinishedAt), "%s started %v, before %s finished %v",
				task.Name, task.StartedAt, dep, at[dep].FinishedAt)
		}
	}
}

// The worker running a middle task is SIGKILLed; a new worker recovers the task (its lost
// attempt counted) and the workflow completes, every task once (or twice for the one lost),
// none before its dependencies.
func testWorkflowKilled(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	client := c.client(t)
	st, err := client.Workflow(t.Context(), q, e2eWorkflow("1500"))
	require.NoError(t, err)
	doomed := c.start(t, workerArgs(q, "wf-doomed", "--concurrency", "1")...)
	killed := waitMiddleRunning(t, c, q, st.ID, "wf-doomed")
	doomed.kill(t)
	c.start(t, workerArgs(q, "wf-rescuer", "--concurrency", "4")...)

	done := waitWorkflowStatus(t, client, q, st.ID, pipeline.WorkflowCompleted)
	require.Equal(t, 6, done.Completed)
	for _, task := range done.Tasks {
		require.Equal(t, status.Completed, task.Status, task.Name)
		switch {
		case task.Name == killed:
			require.Equal(t, 2, task.Attempt, "the killed attempt counts")
			require.Contains(t, task.LastError, "wf-doomed")
		case task.Attempt == 2:
			// Read by the doomed worker before the kill (not run: concurrency 1) and recovered.
			require.Contains(t, task.LastError, "wf-doomed", task.Name)
		default:
			require.Equal(t, 1, task.Attempt, "%s ran once", task.Name)
		}
	}
	requireOrdered(t, done)
	require.False(t, done.FinishedAt.IsZero())
}

// The worker running a middle task on its only attempt is SIGKILLed: recovery sends the task
// to the dead set, which cancels join and end; the other middle tasks complete. A replay of
// the dead task (conveyor dead replay) resumes the workflow to completion.
func testWorkflowKilledLastAttempt(t *testing.T, c *cli) {
	q := redistest.UniqueName(t)
	client := c.client(t)
	st, err := client.Workflow(t.Context(), q, e2eWorkflow("1500", pipeline.WithMaxRetries(0)))
	require.NoError(t, err)
	doomed := c.start(t, workerArgs(q, "wf-last-doomed", "--concurrency", "1")...)
	killed := waitMiddleRunning(t, c, q, st.ID, "wf-last-doomed")
	doomed.kill(t)
	c.start(t, workerArgs(q, "wf-last-rescuer", "--concurrency", "4")...)

	failed := waitWorkflowStatus(t, client, q, st.ID, pipeline.WorkflowFailed)
	want := map[string]status.Status{"start": status.Completed, killed: status.Failed,
		"join": status.Canceled, "end": status.Canceled}
	for _, task := range failed.Tasks {
		if s, ok := want[task.Name]; ok {
			require.Equal(t, s, task.Status, task.Name)
		}
	}
	dead := c.job(t, q, st.ID+"."+killed)
	require.Contains(t, dead.LastError, "wf-last-doomed")
	join := c.job(t, q, st.ID+".join")
	require.True(t, strings.HasPrefix(join.LastError, "dependency "+killed+" failed"), join.LastError)

	c.ok(t, "dead", "replay", "--queue", q, st.ID+"."+killed)
	done := waitWorkflowStatus(t, client, q, st.ID, pipeline.WorkflowCompleted)
	require.Equal(t, 6, done.Completed)
	requireOrdered(t, done)
}
