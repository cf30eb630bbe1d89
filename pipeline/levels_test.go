package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
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

// levelBackends are the servers the priority level tests run on: standalone and a 3-master
// cluster (the level streams and the set of levels are computed in the scripts, in the queue's
// hash tag).
var levelBackends = []struct {
	name string
	rdb  func(t *testing.T) redis.UniversalClient
}{
	{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
}

// TestPriorityLevels is issue 18's test of priority within a queue: 5,000 low jobs (level 4),
// then 50 high ones (level 1): every high job starts before the low backlog's next read batch.
// The low handlers hold the worker's slots (a gate) while the high jobs are published, so that
// no low read is under way then; after the gate opens, at most one low read (ReadBatch
// entries) may start between the first and the last high job: the read of a reader that took
// its slots before the high reader's came back full.
func TestPriorityLevels(t *testing.T) {
	t.Parallel()
	for _, tc := range levelBackends {
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

// TestPriorityLevelLifecycle follows jobs of levels above 1 through every transition that
// moves an entry: each one stays in its level's stream (keys.Queue.LevelStream) and keeps its
// level, on standalone and on a cluster (the level streams and the set of levels are computed
// in the scripts, in the queue's hash tag).
func TestPriorityLevelLifecycle(t *testing.T) {
	t.Parallel()
	for _, tc := range levelBackends {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.rdb(t)
			xlen := func(t *testing.T, b *testBundle, p int) int64 {
				n, err := rdb.XLen(t.Context(), b.q.LevelStream(p)).Result()
				require.NoError(t, err)
				return n
			}

			t.Run("StatsAndListCountEveryLevel", func(t *testing.T) {
				t.Parallel()
				b := setup(t, setupOpts{rdb: rdb})
				ctx := t.Context()
				want := map[string]int{}
				for _, p := range []int{4, 1, 2, 2, 1, 3, 4} {
					j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithPriority(p))
					require.NoError(t, err)
					require.Equal(t, p, j.Priority)
					want[j.ID] = p
				}
				for p, n := range map[int]int64{1: 2, 2: 2, 3: 1, 4: 2} {
					assert.Equal(t, n, xlen(t, b, p), "level %d", p)
				}
				assert.EqualValues(t, 7, b.stats(t).Queued)
				// Paged two at a time: every job once, in level order.
				var got []*pipeline.Job
				cursor := ""
				for range 10 {
					page, err := b.insp.List(ctx, b.queue, status.Queued, pipeline.Page{Cursor: cursor, Limit: 2})
					require.NoError(t, err)
					got = append(got, page.Jobs...)
					if cursor = page.Next; cursor == "" {
						break
					}
				}
				require.Len(t, got, 7)
				for k, j := range got {
					assert.Equal(t, want[j.ID], j.Priority, "job %s", j.ID)
					if k > 0 {
						assert.LessOrEqual(t, got[k-1].Priority, j.Priority, "listed in level order")
					}
				}
				j, err := b.client.Get(ctx, b.queue, got[6].ID)
				require.NoError(t, err)
				assert.Equal(t, 4, j.Priority)
			})

			t.Run("NewLevelWhileRunning", func(t *testing.T) {
				// A running worker starts reading a level's stream once a job of the level is
				// published (the levels watcher, every LevelsRefresh).
				t.Parallel()
				b := setup(t, setupOpts{rdb: rdb})
				ctx := t.Context()
				b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"t": echo})
				first, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
				require.NoError(t, err)
				b.waitStatus(t, first.ID, status.Completed)
				for _, p := range []int{2, 4} {
					j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithPriority(p))
					require.NoError(t, err)
					assert.Equal(t, p, b.waitStatus(t, j.ID, status.Completed).Priority)
				}
			})

			t.Run("CancelQueued", func(t *testing.T) {
				t.Parallel()
				b := setup(t, setupOpts{rdb: rdb})
				ctx := t.Context()
				j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t", Payload: []byte("keep")}, pipeline.WithPriority(3))
				require.NoError(t, err)
				require.EqualValues(t, 1, xlen(t, b, 3))
				require.NoError(t, b.client.Cancel(ctx, b.queue, j.ID))
				assert.EqualValues(t, 0, xlen(t, b, 3), "the entry left its level's stream")
				got, err := b.client.Get(ctx, b.queue, j.ID)
				require.NoError(t, err)
				assert.Equal(t, status.Canceled, got.Status)
				assert.Equal(t, "keep", string(got.Payload))
				assert.EqualValues(t, 0, b.stats(t).Queued)
			})

			t.Run("RetryAndReplayKeepTheLevel", func(t *testing.T) {
				t.Parallel()
				b := setup(t, setupOpts{rdb: rdb})
				ctx := t.Context()
				var mu sync.Mutex
				var seen []int // the level of each attempt, as the handler saw it
				_, stop := b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{
					"fail": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
						mu.Lock()
						seen = append(seen, j.Priority)
						mu.Unlock()
						return nil, errors.New("no")
					},
				})
				j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "fail"}, pipeline.WithPriority(2),
					pipeline.WithMaxRetries(1))
				require.NoError(t, err)
				dead := b.waitStatus(t, j.ID, status.Failed)
				assert.Equal(t, 2, dead.Priority)
				assert.Equal(t, 2, dead.Attempt)
				mu.Lock()
				assert.Equal(t, []int{2, 2}, seen, "the retry ran from the level's stream")
				mu.Unlock()
				require.NoError(t, stop())
				require.NoError(t, b.insp.Replay(ctx, b.queue, j.ID))
				assert.EqualValues(t, 1, xlen(t, b, 2), "replayed into its level's stream")
				assert.EqualValues(t, 0, xlen(t, b, 1))
			})

			t.Run("ReleaseAtShutdown", func(t *testing.T) {
				t.Parallel()
				b := setup(t, setupOpts{rdb: rdb})
				ctx := t.Context()
				started := make(chan struct{}, 1)
				_, stop := b.startWorker(t, pipeline.WorkerConfig{ShutdownTimeout: 50 * time.Millisecond},
					map[string]pipeline.HandlerFunc{
						"hold": func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
							started <- struct{}{}
							<-ctx.Done()
							return nil, ctx.Err()
						},
					})
				j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "hold"}, pipeline.WithPriority(4))
				require.NoError(t, err)
				select {
				case <-started:
				case <-time.After(20 * time.Second):
					t.Fatal("the level-4 job never started")
				}
				require.NoError(t, stop())
				got := b.waitStatus(t, j.ID, status.Queued)
				assert.Equal(t, 4, got.Priority)
				assert.EqualValues(t, 1, xlen(t, b, 4), "put back into its level's stream")
				st := b.stats(t)
				assert.EqualValues(t, 1, st.Queued)
				assert.EqualValues(t, 0, st.InProgress)
				assert.EqualValues(t, 1, st.Released)
			})

			t.Run("RecoveryOfALostWorker", func(t *testing.T) {
				t.Parallel()
				b := setup(t, setupOpts{rdb: rdb})
				ctx := t.Context()
				j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithPriority(3))
				require.NoError(t, err)
				// A worker that read the entry and died: its entry stays pending, idle.
				s := b.q.LevelStream(3)
				require.NoError(t, rdb.XGroupCreateMkStream(ctx, s, keys.Group, "0").Err())
				res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "ghost",
					Streams: []string{s, ">"}, Count: 1, Block: -1}).Result()
				require.NoError(t, err)
				require.Len(t, res[0].Messages, 1)
				var attempts []int
				var mu sync.Mutex
				b.startWorker(t, pipeline.WorkerConfig{VisibilityTimeout: 600 * time.Millisecond,
					RecoveryInterval: 50 * time.Millisecond}, map[string]pipeline.HandlerFunc{
					"t": func(_ context.Context, j *pipeline.Job) ([]byte, error) {
						mu.Lock()
						attempts = append(attempts, j.Attempt)
						mu.Unlock()
						return nil, nil
					},
				})
				done := b.waitStatus(t, j.ID, status.Completed)
				assert.Equal(t, 3, done.Priority)
				assert.Contains(t, done.LastError, "ghost")
				mu.Lock()
				assert.Equal(t, []int{2}, attempts, "the lost attempt counts")
				mu.Unlock()
				assert.EqualValues(t, 1, b.stats(t).Recovered)
			})
		})
	}
}

// TestPriorityLevelsIdleQueue is issue 30's starvation: a queue with jobs of levels 1 to 4, at
// concurrency 1 (and 3), otherwise idle, runs a job of any level published to it, on a
// standalone server and on a cluster (where a level's read checks the lower levels' streams in
// one script call, in the queue's hash tag). Before the fix an idle level-1 reader waiting for
// the one slot counted as wanting it, levels 1 and 2 took it in turn and the level-4 jobs
// waited minutes. The figure is in docs/RELIABILITY.md ("Priority levels of an idle queue").
func TestPriorityLevelsIdleQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range levelBackends {
		for _, concurrency := range []int{1, 3} {
			if tc.name == "cluster" && concurrency != 1 {
				continue
			}
			t.Run(fmt.Sprintf("%s/Concurrency%d", tc.name, concurrency), func(t *testing.T) {
				t.Parallel()
				b := setup(t, setupOpts{rdb: tc.rdb(t)})
				ctx := t.Context()
				enqueue := func(level int) string {
					j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithPriority(level))
					require.NoError(t, err)
					return j.ID
				}
				completed := func(id string) bool {
					j, err := b.client.Get(ctx, b.queue, id)
					return err == nil && j.Status == status.Completed
				}
				// Every level is in use before the worker starts, so that it reads all four.
				var warm []string
				for level := 1; level <= 4; level++ {
					warm = append(warm, enqueue(level))
				}
				b.startWorker(t, pipeline.WorkerConfig{Concurrency: concurrency}, map[string]pipeline.HandlerFunc{"t": echo})
				for _, id := range warm {
					require.Eventually(t, func() bool { return completed(id) }, 60*time.Second, 5*time.Millisecond)
				}
				for _, level := range []int{4, 3, 2} {
					id := enqueue(level)
					require.Eventually(t, func() bool { return completed(id) }, 60*time.Second, 5*time.Millisecond,
						"the level-%d job of an idle queue did not run", level)
				}
			})
		}
	}
}

// TestPriorityLevelsAfterResume is the newcomer's case of issue 30 through a worker: jobs of
// levels 1 and 4 published while their queue is paused; at resume no level-4 job starts while
// level-1 jobs are still unread. Each level-4 job notes, as it starts, the level-1 entries the
// group has not been delivered yet; the first jobs to start hold both slots until two have
// started, so that a level-4 job that took a slot early would find level-1 jobs unread. (The
// subscriber's own test, stream's TestLevelsLowestFirstAfterResume, is the one that failed
// before the fix; this one keeps the pause watcher's resume in level order.)
func TestPriorityLevelsAfterResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	enqueue := func(typ string, level int) string {
		j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: typ}, pipeline.WithPriority(level))
		require.NoError(t, err)
		return j.ID
	}
	var mu sync.Mutex
	var lags []int64 // level 1's undelivered entries as each level-4 job started
	started := make(chan struct{}, 100)
	gate := make(chan struct{})
	hold := func(ctx context.Context) {
		started <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	var ids []string
	for _, level := range []int{1, 4} {
		ids = append(ids, enqueue("t", level))
	}
	w, _ := b.startWorker(t, pipeline.WorkerConfig{Concurrency: 2, PauseCheckInterval: 50 * time.Millisecond},
		map[string]pipeline.HandlerFunc{
			"t": echo,
			"one": func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
				hold(ctx)
				return nil, nil
			},
			"four": func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
				// Not the group's lag, which Redis cannot tell once entries were deleted.
				g, err := b.rdb.XInfoGroups(ctx, b.q.Stream()).Result()
				if !assert.NoError(t, err) {
					return nil, err
				}
				unread, err := b.rdb.XRange(ctx, b.q.Stream(), "("+g[0].LastDeliveredID, "+").Result()
				if !assert.NoError(t, err) {
					return nil, err
				}
				mu.Lock()
				lags = append(lags, int64(len(unread)))
				mu.Unlock()
				hold(ctx)
				return nil, nil
			},
		})
	for _, id := range ids {
		b.waitStatus(t, id, status.Completed)
	}
	require.NoError(t, b.insp.Pause(ctx, b.queue))
	require.Eventually(t, func() bool { return pipeline.PausedTopics(w)[b.queue] }, 10*time.Second, time.Millisecond)
	ids = ids[:0]
	for range 3 {
		ids = append(ids, enqueue("four", 4))
	}
	for range 10 {
		ids = append(ids, enqueue("one", 1))
	}
	require.NoError(t, b.insp.Resume(ctx, b.queue))
	for range 2 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("no job started after the resume")
		}
	}
	close(gate)
	for _, id := range ids {
		b.waitStatus(t, id, status.Completed)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int64{0, 0, 0}, lags, "a level-4 job started while level-1 jobs were unread")
}
