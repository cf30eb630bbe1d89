package pipeline_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// RunNow moves a delayed job and a retry into the stream (a retry keeps its attempt count and
// its last error), and refuses every other status.
func TestInspectorRunNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	delayed := jobtest.Seed(t, b.rdb, b.queue, status.Scheduled, jobtest.Opts{})
	retry := jobtest.Seed(t, b.rdb, b.queue, jobtest.Retry, jobtest.Opts{Reason: "boom"})
	require.Equal(t, "retry", retry.ScheduledFor)

	for _, id := range []string{delayed.ID, retry.ID} {
		require.NoError(t, b.insp.RunNow(ctx, b.queue, id))
		j, err := b.insp.Get(ctx, b.queue, id)
		require.NoError(t, err)
		require.Equal(t, status.Queued, j.Status)
		require.Equal(t, []byte("payload"), j.Payload, "the payload moved into the entry")
	}
	j, err := b.insp.Get(ctx, b.queue, retry.ID)
	require.NoError(t, err)
	require.Equal(t, 1, j.Attempt, "a retry moved now is still its second attempt to come")
	require.Equal(t, "boom", j.LastError)
	st := stats(t, b)
	require.Equal(t, int64(0), st.Scheduled)
	require.Equal(t, int64(2), st.Queued)

	err = b.insp.RunNow(ctx, b.queue, delayed.ID)
	require.ErrorIs(t, err, pipeline.ErrNotScheduled, "run now twice: the second finds it queued")
	require.ErrorContains(t, err, "(it is queued)")
	dead := jobtest.Seed(t, b.rdb, b.queue, status.Failed, jobtest.Opts{})
	require.ErrorIs(t, b.insp.RunNow(ctx, b.queue, dead.ID), pipeline.ErrNotScheduled)
	require.ErrorIs(t, b.insp.RunNow(ctx, b.queue, "01JUNKNOWN0000000000000000"), pipeline.ErrNotFound)
	require.ErrorIs(t, b.insp.RunNow(ctx, b.queue, "bad id!"), pipeline.ErrInvalid)
}

// Delete removes a scheduled or a queued job with its record and its stream entry, and refuses
// a running, dead or finished one.
func TestInspectorDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	scheduled := jobtest.Seed(t, b.rdb, b.queue, status.Scheduled, jobtest.Opts{})
	queued := jobtest.Seed(t, b.rdb, b.queue, status.Queued, jobtest.Opts{
		Options: []pipeline.Option{pipeline.WithUnique("k", time.Hour)}})
	require.Equal(t, int64(1), b.rdb.XLen(ctx, b.q.Stream()).Val())

	for _, id := range []string{scheduled.ID, queued.ID} {
		require.NoError(t, b.insp.Delete(ctx, b.queue, id))
		_, err := b.insp.Get(ctx, b.queue, id)
		require.ErrorIs(t, err, pipeline.ErrNotFound, "no record is left")
		require.Equal(t, int64(0), b.rdb.Exists(ctx, b.q.Job(id)).Val())
	}
	require.Equal(t, int64(0), b.rdb.XLen(ctx, b.q.Stream()).Val(), "the queued job's entry went too")
	st := stats(t, b)
	require.Equal(t, int64(0), st.Scheduled+st.Queued)
	require.Equal(t, int64(2), st.Canceled, "a deleted job counts as canceled")
	again, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "t"}, pipeline.WithUnique("k", time.Hour))
	require.NoError(t, err, "the unique key was freed")
	require.NotEqual(t, queued.ID, again.ID)

	running := jobtest.Seed(t, b.rdb, b.queue, status.InProgress, jobtest.Opts{})
	dead := jobtest.Seed(t, b.rdb, b.queue, status.Failed, jobtest.Opts{})
	done := jobtest.Seed(t, b.rdb, b.queue, status.Completed, jobtest.Opts{})
	for _, s := range []jobtest.Seeded{running, dead, done} {
		err := b.insp.Delete(ctx, b.queue, s.ID)
		require.ErrorIs(t, err, pipeline.ErrNotDeletable)
		require.ErrorContains(t, err, "(it is "+s.Status.Word()+")", "a dead job is said dead")
		j, err := b.insp.Get(ctx, b.queue, s.ID)
		require.NoError(t, err)
		require.Equal(t, s.Status, j.Status, "a refused delete changes nothing")
	}
	require.ErrorIs(t, b.insp.Delete(ctx, b.queue, scheduled.ID), pipeline.ErrNotFound)
}

// A scheduled job that waits for a concurrency slot of a limit is refused by RunNow: only a
// freed slot moves it (it is in no scheduled set to move it from).
func TestInspectorRunNowLimited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	ids := publishN(t, b.client, b.queue, 1) // the queue exists
	setLimit(t, b.rdb, b.queue, pipeline.Limit{Concurrency: 1})
	g := newGate()
	ids = append(ids, publishN(t, b.client, b.queue, 1)...)
	startWorkerOn(t, b.rdb, pipeline.WorkerConfig{Queues: []string{b.queue}, Concurrency: 10},
		map[string]pipeline.HandlerFunc{"t": g.handler(func(*pipeline.Job) string { return "" })})
	running := g.next(t)
	waitLimited(t, b.rdb, b.queue, 1)
	waiting := ids[0]
	if waiting == running {
		waiting = ids[1]
	}
	j, err := b.insp.Get(ctx, b.queue, waiting)
	require.NoError(t, err)
	require.Equal(t, status.Scheduled, j.Status)
	err = b.insp.RunNow(ctx, b.queue, waiting)
	require.ErrorIs(t, err, pipeline.ErrNotScheduled)
	require.ErrorContains(t, err, "concurrency slot")
	g.release <- struct{}{}
	require.Equal(t, waiting, g.next(t), "the freed slot moves it")
	g.release <- struct{}{}
}
