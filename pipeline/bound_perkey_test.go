package pipeline_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// perKeyBounded makes the bundle's queue with partitions and sets its per-key bound, and its
// queue bound and policy when max > 0.
func perKeyBounded(t *testing.T, b *testBundle, partitions, perKey, max int, policy string) {
	t.Helper()
	_, err := b.insp.CreateQueue(t.Context(), b.queue, pipeline.QueueOptions{Partitions: partitions})
	require.NoError(t, err)
	patch := pipeline.QueuePatch{MaxWaitingPerKey: &perKey}
	if max > 0 {
		patch.MaxWaiting, patch.FullPolicy = &max, &policy
	}
	st, err := b.insp.UpdateQueue(t.Context(), b.queue, patch)
	require.NoError(t, err)
	require.Equal(t, perKey, st.MaxWaitingPerKey)
}

// keyCount is key's count in q's count of unfinished jobs per limit key; 0 when it has none.
func keyCount(t *testing.T, rdb redis.UniversalClient, q keys.Queue, key string) int {
	t.Helper()
	n, err := rdb.HGet(t.Context(), q.KeyWaiting(), key).Int()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	require.NoError(t, err)
	return n
}

// At its per-key bound a queue refuses a job of that limit key, queued or scheduled alike,
// whatever its full policy, and says the key; other keys' jobs and jobs without a key pass.
func TestBoundedPerKeyRejects(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		// drop-oldest applies to max_waiting only: the per-key bound refuses all the same, and
		// drops nothing.
		perKeyBounded(t, b, 1, 2, 100, pipeline.FullDropOldest)
		_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithLimitKey("a"))
		require.NoError(t, err)
		_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithLimitKey("a"), pipeline.WithDelay(time.Hour))
		require.NoError(t, err)

		for _, opts := range [][]pipeline.Option{nil, {pipeline.WithDelay(time.Minute)}, {pipeline.WithID("chosen")}} {
			j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, append(opts, pipeline.WithLimitKey("a"))...)
			require.ErrorIs(t, err, pipeline.ErrQueueFull)
			require.Nil(t, j)
			var qf *pipeline.QueueFullError
			require.ErrorAs(t, err, &qf)
			require.Equal(t, "a", qf.Key)
			require.Equal(t, 2, qf.MaxWaiting)
			require.EqualValues(t, 2, qf.Waiting)
			require.Contains(t, qf.Error(), `limit key "a"`)
		}
		_, err = b.client.Get(ctx, b.queue, "chosen")
		require.ErrorIs(t, err, pipeline.ErrNotFound)
		for range 2 {
			_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithLimitKey("b"))
			require.NoError(t, err)
		}
		for range 5 {
			_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"})
			require.NoError(t, err)
		}
		require.Equal(t, 2, keyCount(t, rdb, b.q, "a"))
		require.Equal(t, 2, keyCount(t, rdb, b.q, "b"))
		fields, err := rdb.HLen(ctx, b.q.KeyWaiting()).Result()
		require.NoError(t, err)
		require.EqualValues(t, 2, fields, "jobs without a key are not counted per key")
		st := b.stats(t)
		require.EqualValues(t, 3, st.RejectedFull)
		require.EqualValues(t, 0, st.DroppedFull)
		require.EqualValues(t, 9, st.Enqueued)

		zero := 0
		_, err = b.insp.UpdateQueue(ctx, b.queue, pipeline.QueuePatch{MaxWaitingPerKey: &zero})
		require.NoError(t, err)
		_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithLimitKey("a"))
		require.NoError(t, err, "the bound removed")
		require.Equal(t, 2, keyCount(t, rdb, b.q, "a"), "a publish without the bound counts nothing")
	})
}

// A batch is admitted per job: each key's jobs up to its bound are written, the others refused
// with their own QueueFullError naming the key.
func TestBoundedPerKeyBatchAdmittedInPart(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		perKeyBounded(t, b, 1, 2, 0, "")
		keysOf := []string{"a", "a", "b", "a", "", "b", "b", ""}
		tasks := make([]pipeline.Task, len(keysOf))
		for i, k := range keysOf {
			tasks[i] = pipeline.Task{Type: "t", Payload: []byte(fmt.Sprint(i))}
			if k != "" {
				tasks[i].Opts = []pipeline.Option{pipeline.WithLimitKey(k)}
			}
		}
		jobs, err := b.client.EnqueueBatch(ctx, b.queue, tasks)
		require.ErrorIs(t, err, pipeline.ErrQueueFull)
		refused := map[int]string{}
		for _, qf := range pipeline.QueueFullErrors(err) {
			refused[qf.Task] = qf.Key
			require.Equal(t, 2, qf.MaxWaiting)
		}
		require.Equal(t, map[int]string{3: "a", 6: "b"}, refused)
		for i, j := range jobs {
			if _, ok := refused[i]; ok {
				require.Equal(t, status.Status(""), j.Status, "task %d", i)
				_, err := b.client.Get(ctx, b.queue, j.ID)
				require.ErrorIs(t, err, pipeline.ErrNotFound, "task %d", i)
				continue
			}
			require.Equal(t, status.Queued, j.Status, "task %d", i)
		}
		require.EqualValues(t, 2, b.stats(t).RejectedFull)
	})
}

// Publishers on several clients, in many goroutines, never take a key past its bound: the
// check is one step with the write and the count.
func TestBoundedPerKeyConcurrentPublishersExact(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		const max = 25
		perKeyBounded(t, b, 1, max, 0, "")
		var mu sync.Mutex
		admitted, refused, other := 0, 0, 0
		var wg sync.WaitGroup
		for g := range 8 {
			cl, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range 10 {
					hot := pipeline.Task{Type: "t", Opts: []pipeline.Option{pipeline.WithLimitKey("hot")}}
					tasks := []pipeline.Task{hot, {Type: "t", Opts: []pipeline.Option{pipeline.WithLimitKey(fmt.Sprint("cold", g))}}}
					if (g+k)%2 == 0 {
						tasks = append(tasks, hot, hot)
					}
					var jobs []*pipeline.Job
					var err error
					if k%3 == 0 {
						var j *pipeline.Job
						j, err = cl.Enqueue(ctx, b.queue, hot)
						jobs = []*pipeline.Job{j}
						if j == nil {
							jobs = []*pipeline.Job{{}}
						}
					} else {
						jobs, err = cl.EnqueueBatch(ctx, b.queue, tasks)
					}
					if err != nil && !errors.Is(err, pipeline.ErrQueueFull) {
						t.Error(err)
						return
					}
					for _, qf := range pipeline.QueueFullErrors(err) {
						if qf.Key != "hot" {
							t.Errorf("refused for key %q", qf.Key)
						}
					}
					mu.Lock()
					for i, j := range jobs {
						switch {
						case j.Status == "":
							refused++
						case i != 1: // task 1 of a batch is the cold key's
							admitted++
						default:
							other++
						}
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		require.Equal(t, max, admitted)
		require.Positive(t, refused)
		require.Equal(t, max, keyCount(t, rdb, b.q, "hot"))
		st := b.stats(t)
		require.EqualValues(t, refused, st.RejectedFull)
		require.EqualValues(t, max+other, st.Queued)
	})
}

// A partitioned queue bounds each partition to ceil(max_waiting_per_key/partitions) of a
// key's jobs: no partition counts more, and a refusal names that share.
func TestBoundedPerKeyPartitioned(t *testing.T) {
	t.Parallel()
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		b := setup(t, setupOpts{rdb: rdb})
		ctx := t.Context()
		perKeyBounded(t, b, 3, 4, 0, "")
		admitted := 0
		for range 30 {
			_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithLimitKey("a"))
			if err == nil {
				admitted++
				continue
			}
			var qf *pipeline.QueueFullError
			require.ErrorAs(t, err, &qf)
			require.Equal(t, 2, qf.MaxWaiting)
			require.Equal(t, "a", qf.Key)
		}
		total := 0
		for p := range 3 {
			n := keyCount(t, rdb, keys.New(keys.DefaultPrefix, keys.PartitionName(b.queue, p, 3)), "a")
			require.LessOrEqual(t, n, 2, "partition %d", p)
			total += n
		}
		require.Equal(t, admitted, total)
		require.Equal(t, 6, admitted, "30 jobs spread by id fill every partition's share")
	})
}

// keyedJob is a counted job of the per-key table: its entry once a worker read it.
type keyedJob struct {
	*pipeline.Job
	entry string
}

// read reads j's entry as a worker would, and marks its attempt started.
func (k *keyedJob) read(t *testing.T, b *testBundle, start bool) {
	t.Helper()
	ctx := t.Context()
	if err := b.rdb.XGroupCreateMkStream(ctx, b.q.Stream(), keys.Group, "0").Err(); err != nil && !rediserr.IsGroupExists(err) {
		require.NoError(t, err)
	}
	res, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w1",
		Streams: []string{b.q.Stream(), ">"}, Count: 1, Block: -1}).Result()
	require.NoError(t, err)
	require.Equal(t, k.Entry, res[0].Messages[0].ID)
	k.entry = k.Entry
	if start {
		finish(t, b, time.Hour, jobstate.Start(&b.q, jobstate.StartParams{ID: k.ID, Entry: k.entry, Attempt: 1, At: time.Now()}), script.OK)
	}
}

// ran is k's first attempt, ended now.
func (k *keyedJob) ran() jobstate.Ran {
	now := time.Now()
	return jobstate.Ran{ID: k.ID, Entry: k.entry, Attempt: 1, Started: now, Finished: now}
}

// finish writes transition tr as a worker's completer does (finish.lua), with retention, and
// wants code.
func finish(t *testing.T, b *testBundle, retention time.Duration, tr jobstate.Transition, code script.Code) {
	t.Helper()
	bt := jobstate.NewStore(b.rdb, keys.DefaultPrefix).Batch()
	f := bt.Finish(jobstate.FinishConfig{Worker: "w1", Retention: retention, MinRetention: time.Second}, []jobstate.Transition{tr})
	require.NoError(t, bt.Exec(t.Context()))
	codes, err := f.Result()
	require.NoError(t, err)
	require.Equal(t, code, codes[0])
}

// Every transition that ends a counted job (completed, dead, canceled, deleted) takes it off
// its key's count, once, and the count's hash goes with its last job; every one that does not
// (a retry, a recovery or release putting it back, a run now) leaves the count as it is.
func TestBoundedPerKeyCountFollowsTransitions(t *testing.T) {
	t.Parallel()
	store := func(b *testBundle) *jobstate.Store { return jobstate.NewStore(b.rdb, keys.DefaultPrefix) }
	cases := []struct {
		name string
		ends bool
		opts []pipeline.Option
		// max > 0 sets the queue's bound too, with drop-oldest.
		max int
		run func(t *testing.T, b *testBundle, k *keyedJob)
	}{
		{name: "complete", ends: true, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, true)
			finish(t, b, time.Hour, jobstate.Done(&b.q, jobstate.DoneParams{Ran: k.ran()}), script.OK)
		}},
		{name: "complete, tombstone", ends: true, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, true)
			finish(t, b, 0, jobstate.Done(&b.q, jobstate.DoneParams{Ran: k.ran()}), script.OK)
		}},
		{name: "complete, payload sent", ends: true, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, false)
			finish(t, b, time.Hour, jobstate.Done(&b.q, jobstate.DoneParams{Ran: k.ran()}).WithPayload("p"), script.OK)
		}},
		{name: "dead", ends: true, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, true)
			finish(t, b, time.Hour, jobstate.Dead(&b.q, jobstate.DeadParams{Ran: k.ran(), Reason: "x"}), script.OK)
		}},
		{name: "retry that dies", ends: true, opts: []pipeline.Option{pipeline.WithMaxRetries(0)}, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, true)
			finish(t, b, time.Hour, jobstate.Retry(&b.q, jobstate.RetryParams{Ran: k.ran(), Reason: "x", RetryAt: time.Now().Add(time.Hour)}), script.Died)
		}},
		{name: "snooze that dies", ends: true, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, true)
			finish(t, b, time.Hour, jobstate.Snooze(&b.q, jobstate.SnoozeParams{Ran: k.ran(), RunAt: time.Now().Add(time.Hour), Max: 0}), script.Died)
		}},
		{name: "poison", ends: true, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, false)
			finish(t, b, time.Hour, jobstate.Poison(&b.q, jobstate.PoisonParams{ID: k.ID, Entry: k.entry, At: time.Now(), Reason: "x"}), script.OK)
		}},
		{name: "recovery that dies", ends: true, opts: []pipeline.Option{pipeline.WithMaxRetries(0)}, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, true)
			r, err := store(b).Recover(t.Context(), b.q, jobstate.RecoverParams{Now: time.Now(), Entries: []string{k.entry}})
			require.NoError(t, err)
			require.Equal(t, 1, r.Dead)
		}},
		{name: "cancel queued", ends: true, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			require.NoError(t, b.client.Cancel(t.Context(), b.queue, k.ID))
		}},
		{name: "cancel scheduled", ends: true, opts: []pipeline.Option{pipeline.WithDelay(time.Hour)}, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			require.NoError(t, b.client.Cancel(t.Context(), b.queue, k.ID))
		}},
		{name: "cancel running", ends: true, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, true)
			require.NoError(t, b.client.Cancel(t.Context(), b.queue, k.ID))
		}},
		{name: "delete", ends: true, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			require.NoError(t, b.insp.Delete(t.Context(), b.queue, k.ID))
		}},
		{name: "dropped by drop-oldest", ends: true, max: 1, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			_, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "t"})
			require.NoError(t, err)
			got, err := b.client.Get(t.Context(), b.queue, k.ID)
			require.NoError(t, err)
			require.Equal(t, status.Canceled, got.Status)
		}},
		{name: "start", run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, true)
		}},
		{name: "retry", run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, true)
			finish(t, b, time.Hour, jobstate.Retry(&b.q, jobstate.RetryParams{Ran: k.ran(), Reason: "x", RetryAt: time.Now().Add(time.Hour)}), script.OK)
		}},
		{name: "snooze", run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, true)
			finish(t, b, time.Hour, jobstate.Snooze(&b.q, jobstate.SnoozeParams{Ran: k.ran(), RunAt: time.Now().Add(time.Hour), Max: 5}), script.OK)
		}},
		{name: "recovery after a lost lease", run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, true)
			r, err := store(b).Recover(t.Context(), b.q, jobstate.RecoverParams{Now: time.Now(), Entries: []string{k.entry}})
			require.NoError(t, err)
			require.Equal(t, 1, r.Requeued)
		}},
		{name: "release", run: func(t *testing.T, b *testBundle, k *keyedJob) {
			k.read(t, b, true)
			r, err := store(b).Release(t.Context(), b.q, jobstate.ReleaseParams{Now: time.Now(), Entries: []string{k.entry}})
			require.NoError(t, err)
			require.Equal(t, 1, r.Jobs)
		}},
		{name: "run now", opts: []pipeline.Option{pipeline.WithDelay(time.Hour)}, run: func(t *testing.T, b *testBundle, k *keyedJob) {
			require.NoError(t, b.insp.RunNow(t.Context(), b.queue, k.ID))
		}},
	}
	onStandaloneAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				b := setup(t, setupOpts{rdb: rdb})
				ctx := t.Context()
				perKeyBounded(t, b, 1, 1, tc.max, pipeline.FullDropOldest)
				j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t", Payload: []byte("p")}, append(tc.opts, pipeline.WithLimitKey("k"))...)
				require.NoError(t, err)
				require.Equal(t, 1, keyCount(t, rdb, b.q, "k"))
				tc.run(t, b, &keyedJob{Job: j})

				// The count's hash exists exactly while a counted job lives.
				n, err := rdb.Exists(ctx, b.q.KeyWaiting()).Result()
				require.NoError(t, err)
				require.Equal(t, !tc.ends, n == 1, "the count's hash goes with its last job")
				mark, err := rdb.HGet(ctx, b.q.Job(j.ID), keys.FieldKeyCounted).Result()
				if errors.Is(err, redis.Nil) {
					err, mark = nil, ""
				}
				require.NoError(t, err)
				count := keyCount(t, rdb, b.q, "k")
				_, again := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithLimitKey("k"))
				if tc.ends {
					require.Equal(t, 0, count, "the ended job is off its key's count")
					require.Empty(t, mark, "the ended job keeps no mark")
					require.NoError(t, again, "the key has room again")
					return
				}
				require.Equal(t, 1, count, "the job still counts")
				require.Equal(t, "1", mark)
				require.ErrorIs(t, again, pipeline.ErrQueueFull)
			})
		}
	})
}

// The jobs a debounced publish makes and the dead jobs a replay revives are not counted under
// their limit key (no mark): they never take a key's room, and their end takes none back.
func TestBoundedPerKeyNotCounted(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	perKeyBounded(t, b, 1, 1, 0, "")
	_, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithLimitKey("k"),
		pipeline.WithDebounce("d", time.Hour, 2*time.Hour))
	require.NoError(t, err)
	require.Equal(t, 0, keyCount(t, rdb, b.q, "k"), "a debounced job is not counted")

	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithLimitKey("k"))
	require.NoError(t, err)
	k := &keyedJob{Job: j}
	k.read(t, b, true)
	finish(t, b, time.Hour, jobstate.Dead(&b.q, jobstate.DeadParams{Ran: k.ran(), Reason: "x"}), script.OK)
	require.Equal(t, 0, keyCount(t, rdb, b.q, "k"))
	require.NoError(t, b.insp.Replay(ctx, b.queue, j.ID))
	got, err := b.client.Get(ctx, b.queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, status.Queued, got.Status)
	require.Equal(t, 0, keyCount(t, rdb, b.q, "k"), "a replayed job is not counted again")
	n, err := rdb.HExists(ctx, b.q.Job(j.ID), keys.FieldKeyCounted).Result()
	require.NoError(t, err)
	require.False(t, n)
	// So the key has room beside it.
	_, err = b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithLimitKey("k"))
	require.NoError(t, err)
	require.Equal(t, 1, keyCount(t, rdb, b.q, "k"))
}
