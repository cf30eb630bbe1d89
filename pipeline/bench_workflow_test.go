package pipeline_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// Workflow benchmarks (docs/BENCHMARKS.md, "Issue 21: workflows"). Rerun with
//
//	go test -run=NONE -bench=Workflow -benchtime=20x ./pipeline/

// scriptUsec is the server's time in commands so far (INFO commandstats, all commands): the
// difference over a run is what the op cost Redis.
func scriptUsec(b *testing.B, rdb *redis.Client) int64 { return commandUsec(b, rdb, "") }

// commandUsec is the server's time so far in command cmd ("evalsha": the scripts, during
// which Redis serves no other client), or in all commands for "".
func commandUsec(b *testing.B, rdb *redis.Client, cmd string) int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec int64
	for line := range strings.SplitSeq(info, "\r\n") {
		if cmd != "" && !strings.HasPrefix(line, "cmdstat_"+cmd+":") {
			continue
		}
		if _, v, ok := strings.Cut(line, ",usec="); ok {
			v, _, _ = strings.Cut(v, ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			usec += n
		}
	}
	return usec
}

// BenchmarkWorkflowPublish publishes one fan-out/fan-in workflow of n tasks an op (a root,
// n-2 tasks after it, a join after those), with 100-byte payloads. redis-us/op is the
// server's time for the op: script-us/op in the publish script (workflow.lua, one call that
// blocks the server), the rest in reading the workflow back; client-us/op the rest of the op.
func BenchmarkWorkflowPublish(b *testing.B) {
	for _, n := range []int{10, 1000, 5000} {
		b.Run("tasks="+strconv.Itoa(n), func(b *testing.B) {
			rdb := redistest.Client(b)
			c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
			require.NoError(b, err)
			q := redistest.UniqueName(b)
			ctx := context.Background()
			wf := fanWorkflow("", n-2)
			for i := range wf.Tasks {
				wf.Tasks[i].Payload = payload100
			}
			u0, s0 := scriptUsec(b, rdb), commandUsec(b, rdb, "evalsha")
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				wf.ID = "wf" + strconv.Itoa(i)
				if _, err := c.Workflow(ctx, q, wf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			redisUS := float64(scriptUsec(b, rdb)-u0) / float64(b.N)
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tasks/s")
			b.ReportMetric(redisUS, "redis-us/op")
			b.ReportMetric(float64(commandUsec(b, rdb, "evalsha")-s0)/float64(b.N), "script-us/op")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)-redisUS, "client-us/op")
			// Leave the shared server as found: the tasks are never run.
			if err := rdb.Del(ctx, keysOf(b, rdb, q)...).Err(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

func keysOf(b *testing.B, rdb *redis.Client, q string) []string {
	ks, err := rdb.Keys(context.Background(), "*{"+q+"}*").Result()
	if err != nil {
		b.Fatal(err)
	}
	return ks
}

// runWorkflows times one worker running b.N workflows made by mk, published one at a time
// (each once the one before completed), and reports tasks/s.
func runWorkflows(b *testing.B, concurrency int, mk func(i int) pipeline.Workflow) {
	rdb := redistest.Client(b)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(b, err)
	q := redistest.UniqueName(b)
	ctx := context.Background()
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{q}, Concurrency: concurrency})
	require.NoError(b, err)
	noop := func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil }
	for _, typ := range []string{"root", "fan", "join", "noop"} {
		w.Handle(typ, noop)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = w.Run(wctx) }()
	<-w.Ready()
	tasks := 0
	u0 := scriptUsec(b, rdb)
	b.ResetTimer()
	for i := range b.N {
		wf := mk(i)
		tasks += len(wf.Tasks)
		st, err := c.Workflow(ctx, q, wf)
		if err != nil {
			b.Fatal(err)
		}
		for st.Status != pipeline.WorkflowCompleted {
			time.Sleep(time.Millisecond)
			if st, err = c.GetWorkflow(ctx, q, wf.ID); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(tasks)/b.Elapsed().Seconds(), "tasks/s")
	b.ReportMetric(float64(scriptUsec(b, rdb)-u0)/float64(tasks), "redis-us/task")
}

// BenchmarkWorkflowChainThroughput runs chains of 100 no-op tasks: each step waits for the
// one before, so this is the latency of a step (finish, release, read, run), not a drain rate.
func BenchmarkWorkflowChainThroughput(b *testing.B) {
	tasks := make([]pipeline.Task, 100)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "noop", Payload: payload100}
	}
	runWorkflows(b, 10, func(i int) pipeline.Workflow {
		wf := pipeline.Chain(tasks...)
		wf.ID = "chain" + strconv.Itoa(i)
		return wf
	})
}

// BenchmarkWorkflowFanInThroughput runs fan-out/fan-in workflows of 1,000 no-op tasks and a
// join (the join's release is one decrement a completed task, in finish.lua).
func BenchmarkWorkflowFanInThroughput(b *testing.B) {
	runWorkflows(b, 200, func(i int) pipeline.Workflow {
		return fanWorkflow(fmt.Sprintf("fan%d", i), 1000)
	})
}
