package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

func TestWorkerCompletesJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const n = 300
	tasks := make([]pipeline.Task, n)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "echo", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)), Metadata: map[string]string{"i": fmt.Sprint(i)}}
	}
	jobs, err := b.client.EnqueueBatch(ctx, b.queue, tasks)
	require.NoError(t, err)

	var seenMeta atomic.Int64
	w, _ := b.startWorker(t, pipeline.WorkerConfig{Concurrency: 20}, map[string]pipeline.HandlerFunc{
		"echo": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			if j.Metadata["i"] != "" && j.Attempt == 1 && j.Status == status.InProgress {
				seenMeta.Add(1)
			}
			return j.Payload, nil
		},
	})
	require.Eventually(t, func() bool { return b.stats(t).Completed == n }, 15*time.Second, 10*time.Millisecond)
	require.EqualValues(t, n, seenMeta.Load(), "handlers see metadata, attempt 1 and in_progress")

	for _, j := range []*pipeline.Job{jobs[0], jobs[n/2], jobs[n-1]} {
		got, err := b.client.Get(ctx, b.queue, j.ID)
		require.NoError(t, err)
		require.Equal(t, status.Completed, got.Status)
		require.Equal(t, string(j.Payload), string(got.Result))
		require.Equal(t, string(j.Payload), string(got.Payload), "the payload is kept with the finished job")
		require.Equal(t, j.Metadata, got.Metadata)
		require.Equal(t, 1, got.Attempt)
		require.Equal(t, w.Name(), got.Worker)
		require.False(t, got.StartedAt.IsZero())
		require.False(t, got.CompletedAt.Before(got.StartedAt))
		require.Empty(t, got.LastError)
		ttl, err := b.rdb.PTTL(ctx, b.q.Job(j.ID)).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 23*time.Hour, "finished jobs expire after the default retention")
	}
	// The stream holds only unfinished work, and nothing is left pending.
	xlen, err := b.rdb.XLen(ctx, b.q.Stream()).Result()
	require.NoError(t, err)
	require.Zero(t, xlen)
	s := b.stats(t)
	require.Zero(t, s.InProgress)
	require.Zero(t, s.Queued)
	require.Zero(t, s.Refused)
}

func TestRetryThenSucceed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{
		"flaky": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			if j.Attempt <= 2 {
				return nil, fmt.Errorf("attempt %d fails", j.Attempt)
			}
			return []byte("ok"), nil
		},
	})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "flaky", Payload: []byte("x")})
	require.NoError(t, err)
	got := b.waitStatus(t, j.ID, status.Completed)
	require.Equal(t, 3, got.Attempt)
	require.Equal(t, "attempt 2 fails", got.LastError, "last_error is kept after success")
	require.Equal(t, "ok", string(got.Result))
	require.Equal(t, "x", string(got.Payload), "payload survives the trips through the scheduled set")
	s := b.stats(t)
	require.EqualValues(t, 2, s.Retried)
	require.EqualValues(t, 1, s.Completed)
	require.Zero(t, s.Dead)
}

func TestRetriesExhaustedGoesDeadWithGrowingDelays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var starts []time.Time
	b.startWorker(t, pipeline.WorkerConfig{Backoff: pipeline.Backoff{Base: 100 * time.Millisecond, Max: 10 * time.Second}},
		map[string]pipeline.HandlerFunc{
			"fail": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				return nil, errors.New("always fails")
			},
		})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "fail", Payload: []byte("p")}, pipeline.WithMaxRetries(2))
	require.NoError(t, err)
	got := b.waitStatus(t, j.ID, status.Failed)
	require.Equal(t, 3, got.Attempt)
	require.Equal(t, "always fails", got.LastError)
	require.Equal(t, "p", string(got.Payload))
	_, err = b.rdb.ZScore(t.Context(), b.q.Dead(), j.ID).Result()
	require.NoError(t, err, "the job is in the dead set")
	ttl, _ := b.rdb.PTTL(t.Context(), b.q.Job(j.ID)).Result()
	require.Equal(t, time.Duration(-1), ttl, "dead jobs are kept until replayed or purged")

	mu.Lock()
	require.Len(t, starts, 3)
	first, second := starts[1].Sub(starts[0]), starts[2].Sub(starts[1])
	mu.Unlock()
	// Lower bounds only: a loaded machine stretches either wait (comparing the two failed under
	// load), never shortens it below the backoff's floor (base*2^(n-1) less 25% jitter).
	require.GreaterOrEqual(t, first, 75*time.Millisecond, "first retry waits about the base")
	require.GreaterOrEqual(t, second, 150*time.Millisecond, "the second retry waits about twice the base: delays grow")
	s := b.stats(t)
	require.EqualValues(t, 1, s.Dead)
	require.EqualValues(t, 1, s.Failed)
	require.EqualValues(t, 2, s.Retried)

	// Replay gives the job a fresh set of attempts.
	insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	require.NoError(t, insp.Replay(t.Context(), b.queue, j.ID))
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(starts) >= 4 }, 10*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, insp.Replay(t.Context(), b.queue, "unknown"), pipeline.ErrNotFound)
	require.ErrorIs(t, insp.Replay(t.Context(), b.queue, j.ID), pipeline.ErrNotDead, "it is queued again now")
}

func TestFailureKinds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		handler    pipeline.HandlerFunc
		opts       []pipeline.Option
		wantStatus status.Status
		wantErr    string
		attempts   int
	}{
		{
			name: "skip retry fails at once",
			handler: func(context.Context, *pipeline.Job) ([]byte, error) {
				return nil, pipeline.SkipRetry(errors.New("bad payload"))
			},
			wantStatus: status.Failed, wantErr: "bad payload", attempts: 1,
		},
		{
			name:       "panic is a failed attempt",
			handler:    func(context.Context, *pipeline.Job) ([]byte, error) { panic("kaboom") },
			opts:       []pipeline.Option{pipeline.WithMaxRetries(1)},
			wantStatus: status.Failed, wantErr: "panic: kaboom", attempts: 2,
		},
		{
			name: "timeout cancels the context",
			handler: func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			opts:       []pipeline.Option{pipeline.WithTimeout(50 * time.Millisecond), pipeline.WithMaxRetries(1)},
			wantStatus: status.Failed, wantErr: "timed out after 50ms", attempts: 2,
		},
		{
			name: "a handler ignoring its timeout is abandoned",
			handler: func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
				time.Sleep(2 * time.Second)
				return []byte("too late"), nil
			},
			opts:       []pipeline.Option{pipeline.WithTimeout(50 * time.Millisecond), pipeline.WithMaxRetries(0)},
			wantStatus: status.Failed, wantErr: "did not return", attempts: 1,
		},
		{
			name:       "result over the limit fails",
			handler:    func(context.Context, *pipeline.Job) ([]byte, error) { return make([]byte, 2048), nil },
			wantStatus: status.Failed, wantErr: "exceeds the limit", attempts: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.startWorker(t, pipeline.WorkerConfig{MaxResultBytes: 1024}, map[string]pipeline.HandlerFunc{"job": tc.handler, "ok": echo})
			j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "job"}, tc.opts...)
			require.NoError(t, err)
			got := b.waitStatus(t, j.ID, tc.wantStatus)
			require.Contains(t, got.LastError, tc.wantErr)
			require.Equal(t, tc.attempts, got.Attempt)
			// The worker goes on working after the failure.
			ok, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "ok"})
			require.NoError(t, err)
			b.waitStatus(t, ok.ID, status.Completed)
		})
	}
}

// A job whose type a worker has no handler for is a failed attempt, retried with backoff like
// any, so that during a rolling deploy an old worker does not kill jobs meant for new ones: it
// goes to the dead set only after its retries. Before, it died on its first attempt.
func TestNoHandlerRetriesThenGoesDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w, _ := b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"echo": echo})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "unknown.type", Payload: []byte("keep me")},
		pipeline.WithMaxRetries(2))
	require.NoError(t, err)
	got := b.waitStatus(t, j.ID, status.Failed)
	require.Equal(t, 3, got.Attempt, "it used its retries first")
	require.Contains(t, got.LastError, `no handler for type "unknown.type"`)
	require.Contains(t, got.LastError, w.Name())
	require.Equal(t, "keep me", string(got.Payload))
	s := b.stats(t)
	require.EqualValues(t, 2, s.Retried)
	require.EqualValues(t, 1, s.Dead)
}

// A job a worker cannot handle runs once a worker that can takes its retry.
func TestNoHandlerRetryReachesANewWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, stopOld := b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"echo": echo})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "new.type"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.stats(t).Retried >= 1 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, stopOld())
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"new.type": echo})
	got := b.waitStatus(t, j.ID, status.Completed)
	require.GreaterOrEqual(t, got.Attempt, 2)
}

func TestUnreadableEntriesGoDeadAndConsumptionGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"echo": echo})
	garbage := []map[string]any{
		{"foo": "bar"},
		{keys.EntryUUID: "no-job-field-here", "payload": "x2"},
		{keys.EntryUUID: "bad attempt", "payload": "x3", keys.EntryJob: "zero 0 0 echo"},
		{keys.EntryUUID: "x1", "payload": "x4", "metadata": "\xc1\xff garbage", keys.EntryJob: "1 0 0 echo"},
		{keys.EntryUUID: "\x00\xff", "payload": "\xff\xfe"},
	}
	for _, v := range garbage {
		require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.q.Stream(), Values: v}).Err())
	}
	require.Eventually(t, func() bool { return b.stats(t).Dead == int64(len(garbage)) }, 10*time.Second, 10*time.Millisecond)
	insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	page, err := insp.List(ctx, b.queue, status.Failed, pipeline.Page{Limit: 10})
	require.NoError(t, err)
	dead := page.Jobs
	require.Len(t, dead, len(garbage))
	payloads := map[string]bool{}
	for _, d := range dead {
		require.Equal(t, status.Failed, d.Status)
		require.Contains(t, d.LastError, "unreadable stream entry")
		require.Empty(t, d.Type, "%s: an unreadable entry's record has no type to run", d.ID)
		require.Empty(t, d.Metadata, "%s: unreadable metadata is not kept", d.ID)
		payloads[string(d.Payload)] = true
	}
	require.Equal(t, map[string]bool{"": true, "x2": true, "x3": true, "x4": true, "\xff\xfe": true}, payloads,
		"each record keeps its entry's own payload")
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo"})
	require.NoError(t, err)
	b.waitStatus(t, j.ID, status.Completed)
	xlen, _ := b.rdb.XLen(ctx, b.q.Stream()).Result()
	require.Zero(t, xlen, "unreadable entries are acknowledged and deleted")
	require.EqualValues(t, len(garbage), b.stats(t).Poison)

	// A dead record of an unreadable entry has nothing to run; replay says so.
	require.ErrorIs(t, insp.Replay(ctx, b.queue, dead[0].ID), pipeline.ErrInvalid)
	n, err := insp.PurgeAll(ctx, b.queue, time.Hour)
	require.NoError(t, err)
	require.Zero(t, n, "they died just now")
	n, err = insp.PurgeAll(ctx, b.queue, 0)
	require.NoError(t, err)
	require.Equal(t, len(garbage), n)
	require.Zero(t, b.stats(t).Dead)
}

func TestInProgressWhileRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	w, _ := b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{
		"block": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		},
	})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "block"})
	require.NoError(t, err)
	got := b.waitStatus(t, j.ID, status.InProgress)
	require.Equal(t, w.Name(), got.Worker)
	require.Equal(t, 1, got.Attempt)
	require.False(t, got.StartedAt.IsZero())
	require.EqualValues(t, 1, b.stats(t).InProgress)
	close(release)
	b.waitStatus(t, j.ID, status.Completed)
}

// With RetainNone a finished job leaves only a tombstone, and only for MinRetention: long
// enough for a publish sent again after a lost reply to find it (TestEnqueueResentAfterFinish).
func TestRetentionZeroKeepsOnlyATombstone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, pipeline.WorkerConfig{Retention: pipeline.RetainNone, MinRetention: 300 * time.Millisecond},
		map[string]pipeline.HandlerFunc{"echo": echo})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "echo", Payload: []byte("big")})
	require.NoError(t, err)
	kept, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "echo"}, pipeline.WithRetention(time.Minute))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.stats(t).Completed == 2 }, 10*time.Second, 10*time.Millisecond)
	fields, err := b.rdb.HGetAll(t.Context(), b.q.Job(j.ID)).Result()
	require.NoError(t, err)
	if len(fields) > 0 { // unless the tombstone expired already
		require.Equal(t, []string{keys.FieldCompletedAt, keys.FieldStatus}, slices.Sorted(maps.Keys(fields)))
		require.Equal(t, string(status.Completed), fields[keys.FieldStatus])
		ttl, err := b.rdb.PTTL(t.Context(), b.q.Job(j.ID)).Result()
		require.NoError(t, err)
		require.Positive(t, ttl)
		require.LessOrEqual(t, ttl, 300*time.Millisecond)
	}
	require.Eventually(t, func() bool {
		_, err := b.client.Get(t.Context(), b.queue, j.ID)
		return errors.Is(err, pipeline.ErrNotFound)
	}, 5*time.Second, 20*time.Millisecond)
	got, err := b.client.Get(t.Context(), b.queue, kept.ID)
	require.NoError(t, err, "a per-job retention overrides the worker's")
	ttl, _ := b.rdb.PTTL(t.Context(), b.q.Job(kept.ID)).Result()
	require.LessOrEqual(t, ttl, time.Minute)
	require.Equal(t, status.Completed, got.Status)
}

func TestCancelRunningJobCancelsHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{})
	cause := make(chan error, 1)
	b.startWorker(t, pipeline.WorkerConfig{VisibilityTimeout: 600 * time.Millisecond}, map[string]pipeline.HandlerFunc{
		"block": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil, ctx.Err()
		},
	})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "block"})
	require.NoError(t, err)
	<-started
	require.NoError(t, b.client.Cancel(t.Context(), b.queue, j.ID))
	select {
	case err := <-cause:
		require.ErrorIs(t, err, pipeline.ErrJobCanceled, "by the cancel's event (cancel_test.go has the lease's fallback)")
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
	got, err := b.client.Get(t.Context(), b.queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, status.Canceled, got.Status, "the handler's late return changes nothing")
}

func TestGracefulShutdownPutsJobsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	started := make(chan string, 10)
	_, stop := b.startWorker(t, pipeline.WorkerConfig{ShutdownTimeout: 200 * time.Millisecond, Concurrency: 5},
		map[string]pipeline.HandlerFunc{
			"long": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
				started <- j.ID
				<-ctx.Done()
				return nil, ctx.Err()
			},
		})
	var ids []string
	for range 5 {
		j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "long"})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	for range 5 {
		<-started
	}
	require.NoError(t, stop())
	s := b.stats(t)
	require.EqualValues(t, 5, s.Released)
	require.EqualValues(t, 5, s.Queued, "put back at once, not left pending for recovery")
	require.Zero(t, s.InProgress)
	for _, id := range ids {
		j, err := b.client.Get(ctx, b.queue, id)
		require.NoError(t, err)
		require.Equal(t, status.Queued, j.Status)
		require.Equal(t, 0, j.Attempt, "an attempt interrupted by shutdown does not count")
	}
	// Another worker finishes them.
	b2 := *b
	b2.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"long": echo})
	for _, id := range ids {
		got := b2.waitStatus(t, id, status.Completed)
		require.Equal(t, 1, got.Attempt)
	}
}

func TestWorkerRefusesBadConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name string
		cfg  pipeline.WorkerConfig
	}{
		{"bad queue", pipeline.WorkerConfig{Queues: []string{"a b"}}},
		{"tiny visibility timeout", pipeline.WorkerConfig{VisibilityTimeout: time.Millisecond}},
		{"negative concurrency", pipeline.WorkerConfig{Concurrency: -1}},
		{"bad worker name", pipeline.WorkerConfig{Name: "a b"}},
		{"negative read batch", pipeline.WorkerConfig{ReadBatch: -1}},
		{"huge read batch", pipeline.WorkerConfig{ReadBatch: 100000}},
		{"negative max result", pipeline.WorkerConfig{MaxResultBytes: -1}},
		{"negative retention", pipeline.WorkerConfig{Retention: -time.Hour}},
		{"negative shutdown timeout", pipeline.WorkerConfig{ShutdownTimeout: -time.Second}},
		{"negative recovery interval", pipeline.WorkerConfig{RecoveryInterval: -time.Second}},
		{"sub-millisecond recovery interval", pipeline.WorkerConfig{RecoveryInterval: 500 * time.Microsecond}},
		{"negative flush interval", pipeline.WorkerConfig{FlushInterval: -time.Millisecond}},
		{"negative min retention", pipeline.WorkerConfig{MinRetention: -time.Second}},
		{"negative backoff", pipeline.WorkerConfig{Backoff: pipeline.Backoff{Base: -time.Second}}},
	}
	for _, tc := range cases {
		w, err := pipeline.NewWorker(b.rdb, tc.cfg)
		require.ErrorIs(t, err, pipeline.ErrInvalid, tc.name)
		require.Nil(t, w)
	}
	w, err := pipeline.NewWorker(b.rdb, pipeline.WorkerConfig{Queues: []string{b.queue}})
	require.NoError(t, err)
	require.ErrorContains(t, w.Run(t.Context()), "no handlers")
	require.Panics(t, func() { w.Handle("", echo) })
	w.Handle("echo", echo)
	require.Panics(t, func() { w.Handle("echo", echo) })
}

func TestWorkerWaitsForRedis(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	w, err := pipeline.NewWorker(redisAt("127.0.0.1:1"), pipeline.WorkerConfig{Logger: testLogger(t)})
	require.NoError(t, err)
	w.Handle("echo", echo)
	start := time.Now()
	require.NoError(t, w.Run(ctx), "an unreachable Redis at start is waited for, not a crash")
	require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
}

func TestMiddlewareSeesJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var seen sync.Map
	cfg := pipeline.WorkerConfig{Queues: []string{b.queue}, Logger: testLogger(t)}
	w, err := pipeline.NewWorker(b.rdb, cfg)
	require.NoError(t, err)
	w.Handle("echo", echo)
	w.Use(func(h message.HandlerFunc) message.HandlerFunc {
		return func(m *message.Message) ([]*message.Message, error) {
			seen.Store(m.UUID, m.Metadata.Get(pipeline.MetaType))
			return h(m)
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "echo"})
	require.NoError(t, err)
	b.waitStatus(t, j.ID, status.Completed)
	typ, ok := seen.Load(j.ID)
	require.True(t, ok)
	require.Equal(t, "echo", typ)
	cancel()
	require.NoError(t, <-done)
}

func TestManyQueuesOneWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := b.queue + "-b"
	b.startWorker(t, pipeline.WorkerConfig{Queues: []string{b.queue, other}, Concurrency: 4}, map[string]pipeline.HandlerFunc{"echo": echo})
	var ids [2][]string
	for i, q := range []string{b.queue, other} {
		for range 50 {
			j, err := b.client.Enqueue(t.Context(), q, pipeline.Task{Type: "echo"})
			require.NoError(t, err)
			ids[i] = append(ids[i], j.ID)
		}
	}
	for i, q := range []string{b.queue, other} {
		require.Eventually(t, func() bool {
			s, err := b.client.Stats(t.Context(), q)
			return err == nil && s.Completed == 50
		}, 10*time.Second, 10*time.Millisecond, q)
		got, err := b.client.Get(t.Context(), q, ids[i][0])
		require.NoError(t, err)
		require.Equal(t, q, got.Queue)
	}
}

func TestWorkerFailsFastWhenRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	require.NoError(t, admin.Do(t.Context(), "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "+@all", "-@scripting").Err())
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "noscript", Password: "pw"})
	defer rdb.Close()
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Logger: testLogger(t)})
	require.NoError(t, err)
	w.Handle("echo", echo)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = w.Run(ctx)
	require.ErrorContains(t, err, "NOPERM", "a refusal is reported, not waited out")
	require.NoError(t, ctx.Err(), "it returned at once")
}

// Concurrency is a hard bound on the handlers a worker runs at once, across all its queues:
// the most handlers seen running together is exactly the setting, with three busy queues.
// (A worker running twice its Concurrency used to pass every pipeline test; with several
// queues it did run three times as many.)
func TestConcurrencyBoundsHandlersAcrossQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	queues := []string{b.queue, b.queue + "-b", b.queue + "-c"}
	const conc, perQueue = 4, 40
	var running, most atomic.Int64
	b.startWorker(t, pipeline.WorkerConfig{Queues: queues, Concurrency: conc}, map[string]pipeline.HandlerFunc{
		"t": func(context.Context, *pipeline.Job) ([]byte, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(5 * time.Millisecond) // long enough for every slot to fill
			return nil, nil
		},
	})
	for _, q := range queues {
		_, err := b.client.EnqueueBatch(t.Context(), q, slices.Repeat([]pipeline.Task{{Type: "t"}}, perQueue))
		require.NoError(t, err)
	}
	for _, q := range queues {
		require.Eventually(t, func() bool {
			s, err := b.client.Stats(t.Context(), q)
			return err == nil && s.Completed == perQueue
		}, 20*time.Second, 10*time.Millisecond, q)
	}
	require.EqualValues(t, conc, most.Load(), "the most handlers running at once")
}
