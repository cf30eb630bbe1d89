package pipeline_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// ran records what a handler ran: the payloads of each job id, in order.
type ran struct {
	mu   sync.Mutex
	runs map[string][]string
	done chan string
}

func newRan() *ran { return &ran{runs: map[string][]string{}, done: make(chan string, 10000)} }

func (r *ran) handler(_ context.Context, j *pipeline.Job) ([]byte, error) {
	r.mu.Lock()
	r.runs[j.ID] = append(r.runs[j.ID], string(j.Payload))
	r.mu.Unlock()
	r.done <- j.ID
	return j.Payload, nil
}

func (r *ran) of(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.runs[id]...)
}

// waitRan waits until job id has run.
func (r *ran) waitRan(t *testing.T, id string) {
	t.Helper()
	require.Eventually(t, func() bool { return len(r.of(id)) > 0 }, 30*time.Second, 2*time.Millisecond, "job %s never ran", id)
}

// neverEarly checks, by the stored times (Redis's clock), that a promoted job entered the
// stream no earlier than it was due, and was due no later than its window allows.
func neverEarly(t *testing.T, j *pipeline.Job) {
	t.Helper()
	require.NotNil(t, j.Debounce)
	require.False(t, j.EnqueuedAt.Before(j.RunAt), "job %s promoted at %d, due %d", j.ID, j.EnqueuedAt.UnixMilli(), j.RunAt.UnixMilli())
	require.False(t, j.RunAt.After(j.Debounce.Until), "due %d after the window's end %d", j.RunAt.UnixMilli(), j.Debounce.Until.UnixMilli())
}

// TestDebounce runs the debounce scenarios on a standalone server and on the 3-master cluster.
func TestDebounce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
	}{{"standalone", redistest.Client(t)}, {"cluster", redistest.StartCluster(t).Client(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.rdb
			client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
			require.NoError(t, err)
			t.Run("KeepsTheLastLimitKey", func(t *testing.T) {
				// A debounced job is counted by per-key limits under the limit key of the
				// window's last publish (written by debounce.lua, not the enqueue scripts).
				t.Parallel()
				ctx := t.Context()
				q := redistest.UniqueName(t)
				qk := keys.New(keys.DefaultPrefix, q)
				var id string
				for n, lk := range []string{"tenant-1", "tenant-2", ""} {
					opts := []pipeline.Option{pipeline.WithDebounce("k", time.Hour, 2*time.Hour)}
					if lk != "" {
						opts = append(opts, pipeline.WithLimitKey(lk))
					}
					j, err := client.Enqueue(ctx, q, pipeline.Task{Type: "d"}, opts...)
					require.NoError(t, err)
					if n == 0 {
						id = j.ID
					}
					require.Equal(t, id, j.ID)
					got, err := rdb.HGet(ctx, qk.Job(id), keys.FieldLimitKey).Result()
					if lk == "" {
						require.ErrorIs(t, err, redis.Nil, "the last publish had no limit key")
						continue
					}
					require.NoError(t, err)
					require.Equal(t, lk, got)
				}
			})
			t.Run("TenPublishesRunOnceWithTheLast", func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				q := redistest.UniqueName(t)
				// No worker yet, so no scheduler: however slow the publishes, the job is not
				// promoted between them and all ten are one window.
				var id string
				prevDue := time.Time{}
				for n := range 10 {
					j, err := client.Enqueue(ctx, q, pipeline.Task{Type: "d", Payload: []byte("p" + strconv.Itoa(n))},
						pipeline.WithDebounce("user:1", 30*time.Millisecond, time.Hour))
					require.NoError(t, err)
					require.Equal(t, n > 0, j.Debounced, "publish %d", n)
					require.Equal(t, status.Scheduled, j.Status)
					require.Equal(t, n+1, j.Debounce.Publishes)
					require.Equal(t, "user:1", j.Debounce.Key)
					if n == 0 {
						id = j.ID
					}
					require.Equal(t, id, j.ID)
					require.False(t, j.RunAt.Before(prevDue), "the due time moved earlier")
					require.False(t, j.RunAt.Before(j.Debounce.First.Add(30*time.Millisecond)))
					prevDue = j.RunAt
				}
				got, err := client.Get(ctx, q, id)
				require.NoError(t, err)
				require.Equal(t, "p9", string(got.Payload))
				require.Equal(t, prevDue, got.RunAt)
				require.Equal(t, 10, got.Debounce.Publishes)

				r := newRan()
				_, _ = startWorkerOn(t, rdb, pipeline.WorkerConfig{Queues: []string{q}}, map[string]pipeline.HandlerFunc{"d": r.handler})
				r.waitRan(t, id)
				require.Equal(t, []string{"p9"}, r.of(id))
				done := waitJob(t, client, q, id, status.Completed)
				neverEarly(t, done)
				st, err := client.Stats(ctx, q)
				require.NoError(t, err)
				require.EqualValues(t, 1, st.Enqueued)
				require.EqualValues(t, 9, st.Debounced)
				require.EqualValues(t, 1, st.Completed)
			})
			t.Run("MaxWaitCapsASteadyStream", func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				q := redistest.UniqueName(t)
				r := newRan()
				_, _ = startWorkerOn(t, rdb, pipeline.WorkerConfig{Queues: []string{q}}, map[string]pipeline.HandlerFunc{"d": r.handler})
				// A quiet far longer than the stream's gaps (a publish every 5 ms): only the max
				// wait ends the window.
				const quiet, maxWait = 4 * time.Second, 5 * time.Second
				var first *pipeline.Job
				last := ""
				var second *pipeline.Job
				for n := 0; n < 100000 && second == nil; n++ {
					p := "p" + strconv.Itoa(n)
					j, err := client.Enqueue(ctx, q, pipeline.Task{Type: "d", Payload: []byte(p)},
						pipeline.WithDebounce("k", quiet, maxWait))
					require.NoError(t, err)
					switch {
					case first == nil:
						first = j
						last = p
					case j.ID == first.ID:
						require.True(t, j.Debounced)
						require.False(t, j.RunAt.After(first.Debounce.Until), "capped by the max wait")
						last = p
					default:
						require.False(t, j.Debounced)
						second = j
					}
					time.Sleep(5 * time.Millisecond) // a steady stream, not an assertion
				}
				require.NotNil(t, second, "the first window never closed")
				r.waitRan(t, first.ID)
				require.Equal(t, []string{last}, r.of(first.ID), "it ran the last payload published before it ran")
				done := waitJob(t, client, q, first.ID, status.Completed)
				neverEarly(t, done)
				require.False(t, done.EnqueuedAt.Before(done.Debounce.First.Add(maxWait)))
				require.Equal(t, done.Debounce.Until, done.RunAt)
				require.NoError(t, client.Cancel(ctx, q, second.ID)) // no need to wait for its window
			})
			t.Run("AfterPromotionANewWindow", func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				q := redistest.UniqueName(t)
				r := newRan()
				_, _ = startWorkerOn(t, rdb, pipeline.WorkerConfig{Queues: []string{q}}, map[string]pipeline.HandlerFunc{"d": r.handler})
				opt := pipeline.WithDebounce("k", time.Millisecond, time.Millisecond)
				a, err := client.Enqueue(ctx, q, pipeline.Task{Type: "d", Payload: []byte("a")}, opt)
				require.NoError(t, err)
				r.waitRan(t, a.ID)
				waitJob(t, client, q, a.ID, status.Completed)
				n, err := rdb.Exists(ctx, keys.New(keys.DefaultPrefix, q).Debounce("k")).Result()
				require.NoError(t, err)
				require.Zero(t, n, "the promotion deletes the debounce key")
				b, err := client.Enqueue(ctx, q, pipeline.Task{Type: "d", Payload: []byte("b")}, opt)
				require.NoError(t, err)
				require.NotEqual(t, a.ID, b.ID)
				require.False(t, b.Debounced)
				r.waitRan(t, b.ID)
				require.Equal(t, []string{"a"}, r.of(a.ID))
				require.Equal(t, []string{"b"}, r.of(b.ID))
				neverEarly(t, waitJob(t, client, q, b.ID, status.Completed))
			})
			t.Run("CancelEndsTheWindow", func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				q := redistest.UniqueName(t)
				opt := pipeline.WithDebounce("k", time.Hour, time.Hour)
				a, err := client.Enqueue(ctx, q, pipeline.Task{Type: "d", Payload: []byte("a")}, opt)
				require.NoError(t, err)
				require.NoError(t, client.Cancel(ctx, q, a.ID))
				b, err := client.Enqueue(ctx, q, pipeline.Task{Type: "d", Payload: []byte("b")}, opt)
				require.NoError(t, err)
				require.NotEqual(t, a.ID, b.ID)
				require.False(t, b.Debounced)
				c, err := client.Enqueue(ctx, q, pipeline.Task{Type: "d", Payload: []byte("c")}, opt)
				require.NoError(t, err)
				require.Equal(t, b.ID, c.ID)
				require.True(t, c.Debounced)
				got, err := client.Get(ctx, q, a.ID)
				require.NoError(t, err)
				require.Equal(t, status.Canceled, got.Status)
				require.Equal(t, "a", string(got.Payload), "the canceled job kept its payload")
			})
			t.Run("Batch", func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				q := redistest.UniqueName(t)
				opt := pipeline.WithDebounce("k", time.Hour, time.Hour)
				jobs, err := client.EnqueueBatch(ctx, q, []pipeline.Task{
					{Type: "d", Payload: []byte("1"), Opts: []pipeline.Option{opt}},
					{Type: "plain", Payload: []byte("x")},
					{Type: "d", Payload: []byte("2"), Opts: []pipeline.Option{opt}},
					{Type: "d", Payload: []byte("3"), Opts: []pipeline.Option{pipeline.WithDebounce("other", time.Hour, time.Hour)}},
					{Type: "d", Payload: []byte("4"), Opts: []pipeline.Option{opt}},
				})
				require.NoError(t, err)
				require.Len(t, jobs, 5)
				require.False(t, jobs[0].Debounced)
				require.Equal(t, status.Queued, jobs[1].Status)
				require.Equal(t, jobs[0].ID, jobs[2].ID)
				require.True(t, jobs[2].Debounced)
				require.NotEqual(t, jobs[0].ID, jobs[3].ID)
				require.False(t, jobs[3].Debounced)
				require.Equal(t, jobs[0].ID, jobs[4].ID)
				require.Equal(t, 3, jobs[4].Debounce.Publishes)
				got, err := client.Get(ctx, q, jobs[0].ID)
				require.NoError(t, err)
				require.Equal(t, "4", string(got.Payload), "a batch's later task of a key wins")
				st, err := client.Stats(ctx, q)
				require.NoError(t, err)
				require.EqualValues(t, 3, st.Enqueued)
				require.EqualValues(t, 2, st.Debounced)
			})
			t.Run("ConcurrentPublishers", func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				q := redistest.UniqueName(t)
				r := newRan()
				_, _ = startWorkerOn(t, rdb, pipeline.WorkerConfig{Queues: []string{q}}, map[string]pipeline.HandlerFunc{"d": r.handler})
				const publishers, each = 6, 40
				var mu sync.Mutex
				byID := map[string]map[string]bool{} // job id -> payloads that returned it
				var wg sync.WaitGroup
				errs := make(chan error, publishers)
				for g := range publishers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for n := range each {
							p := fmt.Sprintf("g%d-%d", g, n)
							j, err := client.Enqueue(ctx, q, pipeline.Task{Type: "d", Payload: []byte(p)},
								pipeline.WithDebounce("k", 2*time.Millisecond, 10*time.Millisecond))
							if err != nil {
								errs <- err
								return
							}
							mu.Lock()
							if byID[j.ID] == nil {
								byID[j.ID] = map[string]bool{}
							}
							byID[j.ID][p] = true
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					require.NoError(t, err)
				}
				total := 0
				for id, ps := range byID {
					total += len(ps)
					r.waitRan(t, id)
					runs := r.of(id)
					require.Len(t, runs, 1, "job %s ran %d times", id, len(runs))
					require.True(t, ps[runs[0]], "job %s ran %q, which no publish of its window sent", id, runs[0])
					neverEarly(t, waitJob(t, client, q, id, status.Completed))
				}
				require.Equal(t, publishers*each, total)
				st, err := client.Stats(ctx, q)
				require.NoError(t, err)
				require.EqualValues(t, len(byID), st.Enqueued, "one job per window")
				require.EqualValues(t, publishers*each-len(byID), st.Debounced)
				r.mu.Lock()
				require.Len(t, r.runs, len(byID), "no job ran that no publish was told of")
				r.mu.Unlock()
			})
			t.Run("Partitioned", func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				x := newPartitioned(t, rdb, redistest.UniqueName(t), 4)
				var id string
				for n := range 5 {
					j, err := x.client.Enqueue(ctx, x.queue, pipeline.Task{Type: "d", Payload: []byte{byte('a' + n)}},
						pipeline.WithDebounce("tenant-42", time.Hour, time.Hour))
					require.NoError(t, err)
					if n == 0 {
						id = j.ID
					}
					require.Equal(t, id, j.ID)
				}
				part := x.parts()[keys.PartitionOf("tenant-42", 4)]
				n, err := rdb.Exists(ctx, part.Debounce("tenant-42"), part.Job(id)).Result()
				require.NoError(t, err)
				require.EqualValues(t, 2, n, "the key and the job share the key's partition")
				got, err := x.client.Get(ctx, x.queue, id)
				require.NoError(t, err)
				require.Equal(t, "e", string(got.Payload))
			})
		})
	}
}

func TestDebounceOptionsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := pipeline.WithDebounce("k", time.Second, time.Minute)
	for name, opts := range map[string][]pipeline.Option{
		"zero quiet":         {pipeline.WithDebounce("k", 0, time.Minute)},
		"negative quiet":     {pipeline.WithDebounce("k", -time.Second, time.Minute)},
		"max wait < quiet":   {pipeline.WithDebounce("k", time.Minute, time.Second)},
		"max wait too long":  {pipeline.WithDebounce("k", time.Second, pipeline.MaxDebounceWait+1)},
		"empty key":          {pipeline.WithDebounce("", time.Second, time.Minute)},
		"long key":           {pipeline.WithDebounce(string(make([]byte, 129)), time.Second, time.Minute)},
		"control in key":     {pipeline.WithDebounce("a\nb", time.Second, time.Minute)},
		"not UTF-8 key":      {pipeline.WithDebounce("a\xffb", time.Second, time.Minute)},
		"with unique":        {ok, pipeline.WithUnique("u", time.Minute)},
		"with id":            {ok, pipeline.WithID("job-1")},
		"with delay":         {ok, pipeline.WithDelay(time.Second)},
		"with run at":        {ok, pipeline.WithRunAt(time.Now().Add(time.Hour))},
		"with zero delay":    {pipeline.WithDelay(0), ok},
		"with past run at":   {ok, pipeline.WithRunAt(time.Now().Add(-time.Hour))},
		"with unique before": {pipeline.WithUnique("u", time.Minute), ok},
	} {
		_, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "d"}, opts...)
		require.ErrorIs(t, err, pipeline.ErrInvalid, name)
	}
	require.Empty(t, b.queueKeys(t), "nothing written")
}
