package pipeline_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// start is a job that started: its queue, and the channel that lets it finish.
type start struct {
	queue string
	done  chan struct{}
}

// enqueueN publishes n jobs of type typ to queue in batches.
func enqueueN(t *testing.T, client *pipeline.Client, queue, typ string, n int) {
	t.Helper()
	for n > 0 {
		tasks := make([]pipeline.Task, min(n, 1000))
		for k := range tasks {
			tasks[k] = pipeline.Task{Type: typ}
		}
		_, err := client.EnqueueBatch(t.Context(), queue, tasks)
		require.NoError(t, err)
		n -= len(tasks)
	}
}

// With QueueWeights 6:3:1 and every queue flooded, the jobs started split 6:3:1 within 3% of
// each share over 10,000 (counted while every queue still has jobs); the critical queue has
// two partitions, which share its weight. The handlers hold every slot and are let go half at
// a time, so the queues compete for slots. The slots free one at a time, as each handler's
// outcome is written, while the readers run: free slots wait for a queue owed them whose
// reader is away reading (see stream.Config.Priority). Without that, every queue waiting took
// a slot in turn, whatever its weight: on a fast machine the low queue ran through its whole
// backlog, half of the jobs started.
func TestWorkerQueueWeights(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.UniqueName(t)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	_, err = insp.CreateQueue(t.Context(), "critical", pipeline.QueueOptions{Partitions: 2})
	require.NoError(t, err)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	weights := map[string]int{"critical": 6, "default": 3, "low": 1}
	backlog := map[string]int{"critical": 7500, "default": 4000, "low": 1500}
	for q, n := range backlog {
		enqueueN(t, client, q, "hold", n)
	}
	starts := make(chan start, 100)
	stopped := make(chan struct{})
	var stopOnce sync.Once
	const concurrency = 20
	startWorkerOn(t, rdb, pipeline.WorkerConfig{Prefix: prefix, Queues: []string{"critical", "default", "low"},
		QueueWeights: weights, Concurrency: concurrency, ShutdownTimeout: 5 * time.Second},
		map[string]pipeline.HandlerFunc{"hold": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			s := start{queue: j.Queue, done: make(chan struct{})}
			select {
			case starts <- s:
			case <-stopped:
				return nil, nil
			}
			select {
			case <-s.done:
			case <-stopped:
			}
			return nil, nil
		}})
	// After startWorkerOn's cleanup, so run before it: a failed test lets the handlers go
	// before the worker's shutdown waits for them.
	t.Cleanup(func() { stopOnce.Do(func() { close(stopped) }) })

	const total = 10_000
	got := map[string]int{}
	var held []start
	for n := 0; n < total; n++ {
		select {
		case s := <-starts:
			got[s.queue]++
			require.Less(t, got[s.queue], backlog[s.queue], "queue %s ran dry: raise its backlog (%v)", s.queue, got)
			if held = append(held, s); len(held) == concurrency {
				for _, h := range held[:concurrency/2] {
					close(h.done)
				}
				held = append(held[:0], held[concurrency/2:]...)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%d jobs of %d started: %v", n, total, got)
		}
	}
	stopOnce.Do(func() { close(stopped) })
	t.Logf("shares of %d: %v", total, got)
	for q, w := range weights {
		want := float64(total) * float64(w) / 10
		assert.InDelta(t, want, float64(got[q]), want*0.03, "queue %s (weight %d)", q, w)
	}
}

// With StrictPriority no job of the low queue starts while the high queue has jobs to read.
func TestWorkerStrictPriority(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.UniqueName(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	reads := newQueueReads(prefix, "high", "low")
	started := make(chan string, 4000)
	startWorkerOn(t, hookedClient(t, rdb, reads), pipeline.WorkerConfig{Prefix: prefix, Queues: []string{"high", "low"},
		QueueWeights: map[string]int{"high": 2}, StrictPriority: true, Concurrency: 10},
		map[string]pipeline.HandlerFunc{"run": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
			started <- j.Queue
			return nil, nil
		}})
	enqueueN(t, client, "high", "run", 2000)
	require.Equal(t, "high", <-started)
	// The low queue's reader may have had a read waiting (its queue was empty) when the high
	// work came: once that read ended it reads no more while high has work.
	require.Eventually(t, func() bool { _, idle := reads.reads("low"); return idle }, 10*time.Second, time.Millisecond)
	enqueueN(t, client, "low", "run", 200)
	highs, lows := 1, 0
	highStream := keys.New(prefix, "high").Stream()
	for highs+lows < 2200 {
		select {
		case q := <-started:
			if q == "high" {
				highs++
				continue
			}
			if lows == 0 {
				g, err := rdb.XInfoGroups(t.Context(), highStream).Result()
				require.NoError(t, err)
				require.Zero(t, g[0].Lag, "a low job started while high jobs were unread (%d high started)", highs)
			}
			lows++
		case <-time.After(15 * time.Second):
			t.Fatalf("%d high and %d low jobs started", highs, lows)
		}
	}
}

// A weight for a queue the worker does not read, or under 1, is refused.
func TestWorkerQueueWeightsRefused(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	for _, w := range []map[string]int{{"other": 2}, {"a": 0}} {
		_, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"a"}, QueueWeights: w})
		require.ErrorIs(t, err, pipeline.ErrInvalid)
	}
}
