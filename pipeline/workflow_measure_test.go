package pipeline_test

import (
	"flag"
	"fmt"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

var measureCascade = flag.Bool("measure-workflow-cascade", false,
	"TestMeasureWorkflowCascade: log the Redis SLOWLOG of a maximal workflow's publish and cancel")

// TestMeasureWorkflowCascade publishes the deepest workflow the bounds allow (5,000 tasks,
// each after the 2 before it: 9,997 dependencies) and the widest (a root, 4,998 tasks after
// it, a Finally task after those; 9,996 dependencies), cancels the first task of each, and logs every script call Redis's SLOWLOG kept over 1 ms, and the 2.06M-dependency
// workflow of issue 30 refused. Figures, not assertions: docs/RELIABILITY.md, "Issue 30: a
// workflow's dependencies and cascades".
//
//	go test -v -count=1 -run TestMeasureWorkflowCascade ./pipeline/ -args -measure-workflow-cascade
func TestMeasureWorkflowCascade(t *testing.T) {
	if !*measureCascade {
		t.Skip("a measurement: run with -args -measure-workflow-cascade")
	}
	srv := redistest.Start(t, redistest.WithArgs("--slowlog-log-slower-than", "1000", "--slowlog-max-len", "100000"))
	rdb := srv.Client(t)
	ctx := t.Context()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	slow := func(what string) {
		entries, err := rdb.SlowLogGet(ctx, -1).Result()
		require.NoError(t, err)
		var us []int64
		for _, e := range entries {
			if len(e.Args) > 0 && (e.Args[0] == "evalsha" || e.Args[0] == "EVALSHA" || e.Args[0] == "eval") {
				us = append(us, e.Duration.Microseconds())
			}
		}
		sort.Slice(us, func(i, j int) bool { return us[i] > us[j] })
		over10 := 0
		for _, u := range us {
			if u > 10000 {
				over10++
			}
		}
		t.Logf("%s: %d script calls over 1 ms, %d over 10 ms; longest (us): %v", what, len(us), over10, us[:min(len(us), 8)])
		require.NoError(t, rdb.Do(ctx, "SLOWLOG", "RESET").Err())
	}
	require.NoError(t, rdb.Do(ctx, "SLOWLOG", "RESET").Err())

	// Issue 30's body: 5,000 tasks, each after every task before it in its layer.
	var dense pipeline.Workflow
	for i := range 5000 {
		task := pipeline.WorkflowTask{Name: fmt.Sprintf("t%d", i), Task: pipeline.Task{Type: "t"}}
		for j := max(0, i-412); j < i; j++ {
			task.After = append(task.After, fmt.Sprintf("t%d", j))
		}
		dense.Tasks = append(dense.Tasks, task)
	}
	start := time.Now()
	_, err = client.Workflow(ctx, "q", dense)
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	t.Logf("dense workflow refused in %v: %v", time.Since(start), err)
	slow("refused")
	// Its 2M strings gone before the next figures: a collector running beside Redis on a small
	// machine shows in Redis's times.
	dense = pipeline.Workflow{}
	runtime.GC()

	// The most dependencies 5,000 tasks may have, each task after the 2 before it (9,997):
	// canceling the first cancels every other, following every dependency.
	var deep pipeline.Workflow
	for i := range 5000 {
		task := pipeline.WorkflowTask{Name: fmt.Sprintf("t%d", i), Task: pipeline.Task{Type: "t"}}
		for j := max(0, i-2); j < i; j++ {
			task.After = append(task.After, fmt.Sprintf("t%d", j))
		}
		deep.Tasks = append(deep.Tasks, task)
	}
	for range 3 {
		deep.ID = pipeline.NewID()
		start = time.Now()
		_, err = client.Workflow(ctx, "q", deep)
		require.NoError(t, err)
		t.Logf("deep workflow (9,997 dependencies) published in %v", time.Since(start))
		slow("publish deep")
		start = time.Now()
		require.NoError(t, client.Cancel(ctx, "q", deep.ID+".t0"))
		t.Logf("first task canceled, cascade followed, in %v", time.Since(start))
		slow("cancel deep")
		st, err := client.GetWorkflow(ctx, "q", deep.ID)
		require.NoError(t, err)
		require.Equal(t, 5000, st.Canceled)
	}

	for range 3 {
		id := pipeline.NewID()
		start = time.Now()
		_, err = client.Workflow(ctx, "q", wideWorkflow(id, 4998))
		require.NoError(t, err)
		t.Logf("wide workflow published in %v", time.Since(start))
		slow("publish")
		start = time.Now()
		require.NoError(t, client.Cancel(ctx, "q", id+".root"))
		t.Logf("root canceled, cascade followed, in %v", time.Since(start))
		slow("cancel")
		st, err := client.GetWorkflow(ctx, "q", id)
		require.NoError(t, err)
		require.Equal(t, 4999, st.Canceled)
	}
}
