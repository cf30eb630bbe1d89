package pipeline_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// starts records the order in which a worker's handlers start jobs.
type starts struct {
	mu    sync.Mutex
	order []string // the type of each job started, in order
	high  int      // the "high" jobs started
}

func (s *starts) add(typ string) {
	s.mu.Lock()
	s.order = append(s.order, typ)
	if typ == "high" {
		s.high++
	}
	s.mu.Unlock()
}

func (s *starts) snapshot() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.order...), s.high
}

// TestPriorityLevels is issue 18's test of priority within a queue: 5,000 low jobs (level 4),
// then 50 high ones (level 1): every high job starts before the low backlog's next read batch.
// The low handlers hold the worker's slots (a gate) while the high jobs are published, so that
// no low read is under way then; after the gate opens, at most one low read (ReadBatch
// entries) may start between the first and the last high job: the read of a reader that took
// its slots before the high reader's came back full.
func TestPriorityLevels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.rdb(t)
			b := setup(t, setupOpts{rdb: rdb})
			ctx := t.Context()
			const lows, highs, concurrency, batch = 5000, 50, 8, 10
			tasks := make([]pipeline.Task, 100)
			for k := range tasks {
				tasks[k] = pipeline.Task{Type: "low"}
			}
			for range lows / len(tasks) {
				_, err := b.client.EnqueueBatch(ctx, b.queue, tasks, pipeline.WithPriority(4))
				require.NoError(t, err)
			}
			var rec starts
			gate := make(chan struct{})
			running := make(chan struct{}, lows)
			_, _ = b.startWorker(t, pipeline.WorkerConfig{Concurrency: concurrency, ReadBatch: batch},
				map[string]pipeline.HandlerFunc{
					"low": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
						assert.Equal(t, 4, j.Priority)
						rec.add("low")
						running <- struct{}{}
						select {
						case <-gate:
						case <-ctx.Done():
						}
						return nil, nil
					},
					"high": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
						assert.Equal(t, 1, j.Priority)
						rec.add("high")
						return nil, nil
					},
				})
			// Every slot but the one the idle level-1 reader may hold is taken by a low job.
			for range concurrency - 1 {
				select {
				case <-running:
				case <-time.After(30 * time.Second):
					t.Fatal("the low jobs did not start")
				}
			}
			before, _ := rec.snapshot()
			mark := len(before)
			for range highs {
				_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "high"}, pipeline.WithPriority(1))
				require.NoError(t, err)
			}
			close(gate)
			require.Eventually(t, func() bool {
				_, n := rec.snapshot()
				return n == highs
			}, 30*time.Second, 5*time.Millisecond, "the high jobs did not all start")
			order, _ := rec.snapshot()
			last := 0
			for k, typ := range order {
				if typ == "high" {
					last = k
				}
			}
			lowBetween := 0
			for _, typ := range order[mark:last] {
				if typ == "low" {
					lowBetween++
				}
			}
			t.Logf("low jobs started between the high publish and the last high start: %d", lowBetween)
			// One batch, and the low job that may have taken the last slot while the level-1
			// reader was between two idle reads.
			assert.LessOrEqual(t, lowBetween, batch+1,
				"low jobs started between the high publish and the last high job's start: more than one read batch")
		})
	}
}

// TestWithPriorityRefusesOutOfRange: levels are 1 to 4; anything else is ErrInvalid and
// nothing is written.
func TestWithPriorityRefusesOutOfRange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, p := range []int{0, -1, 5, 100} {
		_, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "t"}, pipeline.WithPriority(p))
		require.ErrorIs(t, err, pipeline.ErrInvalid)
		assert.ErrorContains(t, err, "priority")
	}
	assert.Empty(t, b.queueKeys(t))
}
