package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

func TestEnqueueRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	small, err := pipeline.NewClient(b.rdb, pipeline.ClientConfig{MaxPayloadBytes: 10})
	require.NoError(t, err)
	ok := pipeline.Task{Type: "echo", Payload: []byte("{}")}
	cases := []struct {
		name   string
		client *pipeline.Client
		queue  string
		task   pipeline.Task
		opts   []pipeline.Option
		want   error
	}{
		{"empty type", b.client, b.queue, pipeline.Task{}, nil, pipeline.ErrInvalid},
		{"type with space", b.client, b.queue, pipeline.Task{Type: "a b"}, nil, pipeline.ErrInvalid},
		{"bad queue", b.client, "a{b}", ok, nil, pipeline.ErrInvalid},
		{"empty queue", b.client, "", ok, nil, pipeline.ErrInvalid},
		{"bad id", b.client, b.queue, ok, []pipeline.Option{pipeline.WithID("has space")}, pipeline.ErrInvalid},
		{"negative delay", b.client, b.queue, ok, []pipeline.Option{pipeline.WithDelay(-time.Second)}, pipeline.ErrInvalid},
		{"delay and run-at", b.client, b.queue, ok, []pipeline.Option{pipeline.WithDelay(time.Second), pipeline.WithRunAt(time.Now())}, pipeline.ErrInvalid},
		{"negative retries", b.client, b.queue, ok, []pipeline.Option{pipeline.WithMaxRetries(-1)}, pipeline.ErrInvalid},
		{"too many retries", b.client, b.queue, ok, []pipeline.Option{pipeline.WithMaxRetries(pipeline.MaxMaxRetries + 1)}, pipeline.ErrInvalid},
		{"negative timeout", b.client, b.queue, ok, []pipeline.Option{pipeline.WithTimeout(-1)}, pipeline.ErrInvalid},
		{"unique without ttl", b.client, b.queue, ok, []pipeline.Option{pipeline.WithUnique("k", 0)}, pipeline.ErrInvalid},
		{"unique empty key", b.client, b.queue, ok, []pipeline.Option{pipeline.WithUnique("", time.Second)}, pipeline.ErrInvalid},
		{"negative retention", b.client, b.queue, ok, []pipeline.Option{pipeline.WithRetention(-time.Second)}, pipeline.ErrInvalid},
		{"run-at after year 9999", b.client, b.queue, ok, []pipeline.Option{pipeline.WithRunAt(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))}, pipeline.ErrInvalid},
		{"reserved metadata", b.client, b.queue, pipeline.Task{Type: "echo", Metadata: map[string]string{"_x": "1"}}, nil, pipeline.ErrInvalid},
		{"payload too large", small, b.queue, pipeline.Task{Type: "echo", Payload: []byte("12345678901")}, nil, pipeline.ErrPayloadTooLarge},
		{"metadata counts toward the limit", small, b.queue, pipeline.Task{Type: "echo", Payload: []byte("1"), Metadata: map[string]string{"k": "123456789"}}, nil, pipeline.ErrPayloadTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.client.Enqueue(t.Context(), tc.queue, tc.task, tc.opts...)
			require.ErrorIs(t, err, tc.want)
		})
	}
	// A batch with one bad task writes nothing at all.
	_, err = b.client.EnqueueBatch(t.Context(), b.queue, []pipeline.Task{ok, ok, {Type: ""}})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	require.Empty(t, b.queueKeys(t), "refused input must write nothing")
}

func TestEnqueueQueuedAndGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	before := time.Now().Add(-time.Millisecond)
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo", Payload: []byte(`{"n":1}`), Metadata: map[string]string{"trace": "abc"}},
		pipeline.WithMaxRetries(3), pipeline.WithTimeout(time.Minute))
	require.NoError(t, err)
	require.Equal(t, status.Queued, j.Status)
	require.Len(t, j.ID, 26, "generated ids are ULIDs")
	require.NotEmpty(t, j.Entry)

	got, err := b.client.Get(ctx, b.queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, j.ID, got.ID)
	require.Equal(t, b.queue, got.Queue)
	require.Equal(t, "echo", got.Type)
	require.Equal(t, status.Queued, got.Status)
	require.Equal(t, `{"n":1}`, string(got.Payload), "payload is read from the stream entry")
	require.Equal(t, map[string]string{"trace": "abc"}, got.Metadata)
	require.Equal(t, 0, got.Attempt)
	require.Equal(t, 3, got.MaxRetries)
	require.Equal(t, time.Minute, got.Timeout)
	require.Equal(t, j.Entry, got.Entry)
	require.True(t, got.CreatedAt.After(before))
	require.Equal(t, got.CreatedAt, got.RunAt)
	require.Equal(t, got.CreatedAt, got.EnqueuedAt)
	require.True(t, got.StartedAt.IsZero())

	// The payload is stored once: in the entry while queued, not in the hash.
	fields, err := b.rdb.HKeys(ctx, b.q.Job(j.ID)).Result()
	require.NoError(t, err)
	require.NotContains(t, fields, keys.FieldPayload)
	enc, err := b.rdb.ObjectEncoding(ctx, b.q.Job(j.ID)).Result()
	require.NoError(t, err)
	require.Equal(t, "listpack", enc, "a queued job's hash must stay compact")

	xlen, err := b.rdb.XLen(ctx, b.q.Stream()).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, xlen)
	require.EqualValues(t, 1, b.stats(t).Enqueued)
	require.EqualValues(t, 1, b.stats(t).Queued)

	_, err = b.client.Get(ctx, b.queue, "nope")
	require.ErrorIs(t, err, pipeline.ErrNotFound)
	insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	queues, err := insp.Queues(ctx)
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(queues, func(s *pipeline.QueueStats) bool { return s.Queue == b.queue }))
}

func TestEnqueueDelayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo", Payload: []byte("p")}, pipeline.WithDelay(time.Hour))
	require.NoError(t, err)
	require.Equal(t, status.Scheduled, j.Status)
	score, err := b.rdb.ZScore(ctx, b.q.Scheduled(), j.ID).Result()
	require.NoError(t, err)
	require.EqualValues(t, j.RunAt.UnixMilli(), score)
	require.InDelta(t, time.Hour.Seconds(), j.RunAt.Sub(j.CreatedAt).Seconds(), 0.01)
	got, err := b.client.Get(ctx, b.queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, status.Scheduled, got.Status)
	require.Equal(t, "p", string(got.Payload))
	require.Empty(t, got.Entry)
	require.EqualValues(t, 1, b.stats(t).Scheduled)

	// Due times past the year 2262 (where UnixNano overflows) wait as asked: a delay of
	// 2,500,000h used to run at once.
	far, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo"}, pipeline.WithDelay(2_500_000*time.Hour))
	require.NoError(t, err)
	require.Equal(t, status.Scheduled, far.Status)
	require.InDelta(t, (2_500_000 * time.Hour).Seconds(), far.RunAt.Sub(far.CreatedAt).Seconds(), 0.01)
	require.Greater(t, far.RunAt.Year(), 2262)
	farAt := time.Date(9999, 12, 31, 23, 59, 59, 999_000_001, time.UTC)
	last, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo"}, pipeline.WithRunAt(farAt.Add(-time.Millisecond)))
	require.NoError(t, err)
	require.Equal(t, status.Scheduled, last.Status)
	score, err = b.rdb.ZScore(ctx, b.q.Scheduled(), last.ID).Result()
	require.NoError(t, err)
	require.EqualValues(t, farAt.UnixMilli(), score, "rounded up to the next millisecond, never early")
	got, err = b.client.Get(ctx, b.queue, far.ID)
	require.NoError(t, err)
	require.Equal(t, far.RunAt.UnixMilli(), got.RunAt.UnixMilli())

	// A run-at in the past runs at once.
	past, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo"}, pipeline.WithRunAt(time.Now().Add(-time.Hour)))
	require.NoError(t, err)
	require.Equal(t, status.Queued, past.Status)
}

func TestEnqueueSameIDTwiceMakesOneJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	first, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo", Payload: []byte("first")}, pipeline.WithID("order:42"))
	require.NoError(t, err)
	second, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo", Payload: []byte("first")}, pipeline.WithID("order:42"))
	require.NoError(t, err)
	require.Equal(t, "order:42", second.ID)
	require.True(t, second.Duplicate, "the second call returns the first job")
	require.Equal(t, "first", string(second.Payload))
	require.Equal(t, first.Entry, second.Entry)
	require.EqualValues(t, 1, b.stats(t).Enqueued)
	xlen, _ := b.rdb.XLen(ctx, b.q.Stream()).Result()
	require.EqualValues(t, 1, xlen)
}

func TestEnqueueUnique(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	first, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo"}, pipeline.WithUnique("user:7", time.Hour))
	require.NoError(t, err)
	dup, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo"}, pipeline.WithUnique("user:7", time.Hour))
	require.NoError(t, err)
	require.Equal(t, first.ID, dup.ID)
	require.EqualValues(t, 1, b.stats(t).Enqueued)

	// The key is freed when the job ends, so the same key makes a new job afterwards.
	b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{"echo": echo})
	b.waitStatus(t, first.ID, status.Completed)
	again, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo"}, pipeline.WithUnique("user:7", time.Hour))
	require.NoError(t, err)
	require.NotEqual(t, first.ID, again.ID)
}

func TestEnqueueBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tasks := make([]pipeline.Task, 250) // three script calls
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "echo", Payload: []byte(fmt.Sprint(i))}
	}
	tasks[7].Opts = []pipeline.Option{pipeline.WithDelay(time.Hour)}
	jobs, err := b.client.EnqueueBatch(ctx, b.queue, tasks, pipeline.WithMaxRetries(1))
	require.NoError(t, err)
	require.Len(t, jobs, 250)
	ids := map[string]bool{}
	for i, j := range jobs {
		ids[j.ID] = true
		require.Equal(t, 1, j.MaxRetries)
		if i == 7 {
			require.Equal(t, status.Scheduled, j.Status)
		} else {
			require.Equal(t, status.Queued, j.Status)
		}
	}
	require.Len(t, ids, 250)
	s := b.stats(t)
	require.EqualValues(t, 250, s.Enqueued)
	require.EqualValues(t, 249, s.Queued)
	require.EqualValues(t, 1, s.Scheduled)

	// Repeating the batch with the same ids is idempotent.
	for i := range tasks {
		tasks[i].Opts = []pipeline.Option{pipeline.WithID(jobs[i].ID)}
	}
	again, err := b.client.EnqueueBatch(ctx, b.queue, tasks)
	require.NoError(t, err)
	for i := range again {
		require.Equal(t, jobs[i].ID, again[i].ID)
	}
	require.EqualValues(t, 250, b.stats(t).Enqueued)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	sched, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo", Payload: []byte("s")}, pipeline.WithDelay(time.Hour))
	require.NoError(t, err)
	queued, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo", Payload: []byte("q")})
	require.NoError(t, err)

	require.NoError(t, b.client.Cancel(ctx, b.queue, sched.ID))
	require.NoError(t, b.client.Cancel(ctx, b.queue, queued.ID))
	for _, id := range []string{sched.ID, queued.ID} {
		j, err := b.client.Get(ctx, b.queue, id)
		require.NoError(t, err)
		require.Equal(t, status.Canceled, j.Status)
		require.NotEmpty(t, j.Payload, "a canceled job keeps its payload")
		require.False(t, j.CompletedAt.IsZero())
		ttl, err := b.rdb.PTTL(ctx, b.q.Job(id)).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, time.Hour, "canceled records expire after the retention time")
	}
	s := b.stats(t)
	require.EqualValues(t, 0, s.Scheduled)
	require.EqualValues(t, 0, s.Queued)
	require.EqualValues(t, 2, s.Canceled)

	require.ErrorIs(t, b.client.Cancel(ctx, b.queue, sched.ID), pipeline.ErrNotCancelable)
	require.ErrorIs(t, b.client.Cancel(ctx, b.queue, "missing"), pipeline.ErrNotFound)
}

func TestJobJSON(t *testing.T) {
	t.Parallel()
	j := &pipeline.Job{
		ID: "x", Queue: "q", Type: "t", Status: status.Completed,
		Payload: []byte(`{"a":1}`), Result: []byte("not json"),
		CreatedAt: time.UnixMilli(1000),
	}
	out, err := json.Marshal(j)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m))
	for _, field := range []string{"id", "queue", "type", "status", "attempt", "max_retries", "payload", "result",
		"last_error", "worker", "created_at", "run_at", "enqueued_at", "started_at", "completed_at"} {
		require.Contains(t, m, field)
	}
	require.Equal(t, map[string]any{"a": float64(1)}, m["payload"])
	require.Equal(t, "not json", m["result"])
	require.EqualValues(t, 1000, m["created_at"])
	require.EqualValues(t, 0, m["started_at"], "times not reached yet are 0")
}

func TestRedisOutageIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	down, err := pipeline.NewClient(redisAt("127.0.0.1:1"), pipeline.ClientConfig{})
	require.NoError(t, err)
	_, err = down.Enqueue(ctx, b.queue, pipeline.Task{Type: "echo"})
	require.Error(t, err)
	require.False(t, errors.Is(err, pipeline.ErrInvalid))
	require.True(t, strings.Contains(err.Error(), "connect") || strings.Contains(err.Error(), "refused"), err.Error())
}

// A replayed job takes its unique key again, so a publish with the key finds it instead of
// making a second job; a replay is refused while another job holds the key. Before, the key
// stayed free after a replay and both jobs ran.
func TestReplayTakesUniqueKeyAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, stop := b.startWorker(t, pipeline.WorkerConfig{}, map[string]pipeline.HandlerFunc{
		"fail": func(context.Context, *pipeline.Job) ([]byte, error) { return nil, pipeline.SkipRetry(errors.New("no")) },
	})
	orig, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "fail"}, pipeline.WithUnique("order-42", time.Hour))
	require.NoError(t, err)
	b.waitStatus(t, orig.ID, status.Failed)
	require.NoError(t, stop()) // nothing runs from here on: the jobs stay where the test puts them

	// Another job takes the key while the first is dead: the replay is refused.
	other, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "hold"}, pipeline.WithUnique("order-42", time.Hour))
	require.NoError(t, err)
	require.NotEqual(t, orig.ID, other.ID)
	insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	err = insp.Replay(ctx, b.queue, orig.ID)
	require.ErrorIs(t, err, pipeline.ErrUniqueHeld)
	require.ErrorContains(t, err, other.ID)
	got, err := b.client.Get(ctx, b.queue, orig.ID)
	require.NoError(t, err)
	require.Equal(t, status.Failed, got.Status, "a refused replay changes nothing")

	// Once the key is free, the replay takes it, with the TTL the job was published with.
	require.NoError(t, b.client.Cancel(ctx, b.queue, other.ID))
	require.NoError(t, insp.Replay(ctx, b.queue, orig.ID))
	holder, err := b.rdb.Get(ctx, b.q.Unique("order-42")).Result()
	require.NoError(t, err)
	require.Equal(t, orig.ID, holder)
	ttl, err := b.rdb.PTTL(ctx, b.q.Unique("order-42")).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 59*time.Minute)
	again, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "fail"}, pipeline.WithUnique("order-42", time.Hour))
	require.NoError(t, err)
	require.Equal(t, orig.ID, again.ID, "the publish finds the replayed job")
}

// An unusable ClientConfig is refused by every call, never silently replaced by a default.
func TestClientRefusesBadConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, cfg := range []pipeline.ClientConfig{
		{MaxPayloadBytes: -1},
		{MaxRetries: -2},
		{MaxRetries: pipeline.MaxMaxRetries + 1},
		{Retention: -time.Hour},
		{MinRetention: -time.Second},
		{Prefix: "a{b}"},
	} {
		c, err := pipeline.NewClient(b.rdb, cfg)
		require.ErrorIs(t, err, pipeline.ErrInvalid, "%+v", cfg)
		require.Nil(t, c)
	}
	require.Empty(t, b.queueKeys(t), "nothing was written")
	// The named exceptions are fine.
	c, err := pipeline.NewClient(b.rdb, pipeline.ClientConfig{MaxRetries: pipeline.NoRetries, Retention: pipeline.RetainNone})
	require.NoError(t, err)
	j, err := c.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	require.Zero(t, j.MaxRetries)
}

// A publish of an id that exists says so: the same job comes back marked Duplicate and nothing
// is written; a job of that id with another type or payload refuses the publish with
// ErrConflict, naming what differs, and writes nothing. Before, every re-publish returned the
// first job silently. The same holds in a batch, and through the one-job script.
func TestEnqueueDuplicateAndConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	for _, delay := range []time.Duration{0, time.Hour} { // enqueue1.lua and enqueue.lua
		id := fmt.Sprintf("order-42-%s", delay)
		first, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t", Payload: []byte("p")},
			pipeline.WithID(id), pipeline.WithDelay(delay))
		require.NoError(t, err)
		require.False(t, first.Duplicate)

		again, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t", Payload: []byte("p")},
			pipeline.WithID(id), pipeline.WithDelay(delay))
		require.NoError(t, err)
		require.True(t, again.Duplicate)
		require.Equal(t, first.ID, again.ID)

		for _, tc := range []struct {
			task    pipeline.Task
			differs string
		}{
			{pipeline.Task{Type: "other", Payload: []byte("p")}, "type"},
			{pipeline.Task{Type: "t", Payload: []byte("q")}, "payload"},
			{pipeline.Task{Type: "other", Payload: []byte("q")}, "type and payload"},
		} {
			_, err := b.client.Enqueue(ctx, b.queue, tc.task, pipeline.WithID(id), pipeline.WithDelay(delay))
			require.ErrorIs(t, err, pipeline.ErrConflict)
			require.ErrorContains(t, err, "different "+tc.differs)
			got, err := b.client.Get(ctx, b.queue, id)
			require.NoError(t, err)
			require.Equal(t, "t", got.Type, "nothing was written")
			require.Equal(t, "p", string(got.Payload))
		}
	}
	jobs, err := b.client.EnqueueBatch(ctx, b.queue, []pipeline.Task{
		{Type: "t", Payload: []byte("p"), Opts: []pipeline.Option{pipeline.WithID("order-42-0s")}},
		{Type: "t", Payload: []byte("new"), Opts: []pipeline.Option{pipeline.WithID("fresh")}},
		{Type: "t", Payload: []byte("clash"), Opts: []pipeline.Option{pipeline.WithID("order-42-1h0m0s")}},
	})
	require.ErrorIs(t, err, pipeline.ErrConflict)
	require.ErrorContains(t, err, "task 2")
	require.True(t, jobs[0].Duplicate)
	require.False(t, jobs[1].Duplicate)
	_, err = b.client.Get(ctx, b.queue, "fresh")
	require.NoError(t, err, "the other tasks were written")
	s := b.stats(t)
	require.EqualValues(t, 3, s.Enqueued)
}
