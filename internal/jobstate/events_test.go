package jobstate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/pipeline"
)

// finish.lua announces every outcome it applies to a watched job (not a start), and every poison
// record, all of a call in one message, in the order applied; a refused transition announces nothing, and with events.None nothing is
// published. cancel.lua announces canceled.
func TestScriptsAnnounceEvents(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	next := jobtest.Listen(t, f.rdb, f.q.Events())
	ctx := t.Context()
	var ids []string
	for _, mr := range []int{3, 3, 0, 3, 3, 3} {
		j, err := f.c.Enqueue(ctx, f.queue, pipeline.Task{Type: "t", Payload: []byte("p")}, pipeline.WithMaxRetries(mr))
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	entries := f.read(len(ids))
	now := time.Now()
	for _, id := range ids[:4] { // waited on (the poison record is announced all the same)
		_, found, err := jobstate.NewStore(f.rdb, "").GetWatched(ctx, f.q, id)
		require.NoError(t, err)
		require.True(t, found)
	}

	// Nothing is published without events: the next message is the call's below.
	f.cfg.Events = events.None
	require.Equal(t, []script.Code{applied}, f.run(jobstate.Start(&f.q, jobstate.StartParams{ID: ids[5], Entry: entries[5], Attempt: 1, At: now})))

	f.cfg.Events = events.Sharded
	codes := f.run(
		jobstate.Start(&f.q, jobstate.StartParams{ID: ids[0], Entry: entries[0], Attempt: 1, At: now}),
		jobstate.Done(&f.q, jobstate.DoneParams{Ran: ran(ids[0], entries[0], now), Result: "r"}),
		jobstate.Retry(&f.q, jobstate.RetryParams{Ran: ran(ids[1], entries[1], now), Reason: "e", RetryAt: now.Add(time.Minute)}),
		jobstate.Retry(&f.q, jobstate.RetryParams{Ran: ran(ids[2], entries[2], now), Reason: "e", RetryAt: now.Add(time.Minute)}),
		jobstate.Dead(&f.q, jobstate.DeadParams{Ran: ran(ids[3], entries[3], now), Reason: "e"}),
		jobstate.Poison(&f.q, jobstate.PoisonParams{ID: ids[4], Entry: entries[4], At: now, Reason: "unreadable"}),
		jobstate.Done(&f.q, jobstate.DoneParams{Ran: ran(ids[0], entries[0], now), Result: "again"}),
	)
	require.Equal(t, []script.Code{applied, applied, applied, died, applied, applied, refused}, codes)
	require.Equal(t, []events.Event{
		{ID: ids[0], Status: "completed", Attempt: 1},
		{ID: ids[1], Status: "scheduled", Attempt: 1},
		{ID: ids[2], Status: "failed", Attempt: 1},
		{ID: ids[3], Status: "failed", Attempt: 1},
		{ID: ids[4], Status: "failed", Attempt: 0},
	}, next(), "one message for the call; the start and the refused transition say nothing")

	row, err := jobstate.NewStore(f.rdb, "").Cancel(ctx, f.q, jobstate.CancelParams{ID: ids[5], Now: now, Retention: time.Hour,
		MinRetention: time.Minute, Events: events.Plain})
	require.NoError(t, err)
	require.Equal(t, script.OK, row.Code)
	row, err = jobstate.NewStore(f.rdb, "").Cancel(ctx, f.q, jobstate.CancelParams{ID: ids[1], Now: now, Retention: time.Hour,
		MinRetention: time.Minute, Events: events.Sharded})
	require.NoError(t, err)
	require.Equal(t, script.OK, row.Code)
	require.Equal(t, []events.Event{{ID: ids[1], Status: "canceled", Attempt: 1}}, next(),
		"a plain PUBLISH does not reach a sharded subscriber: the first cancel's message is not this one")
}

// finish.lua announces the outcome of a job a waiter marked (jobstate.Store.GetWatched) and says
// nothing of any other: the call for the unmarked job publishes nothing, so the next message is
// the marked job's. GetWatched marks only a job that exists.
func TestFinishAnnouncesOnlyWatchedJobs(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	f.cfg.Events = events.Sharded
	next := jobtest.Listen(t, f.rdb, f.q.Events())
	ctx := t.Context()
	var ids []string
	for range 2 {
		j, err := f.c.Enqueue(ctx, f.queue, pipeline.Task{Type: "t", Payload: []byte("p")})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	entries := f.read(len(ids))
	_, found, err := jobstate.NewStore(f.rdb, "").GetWatched(ctx, f.q, ids[1])
	require.NoError(t, err)
	require.True(t, found)
	_, found, err = jobstate.NewStore(f.rdb, "").GetWatched(ctx, f.q, "nosuchjob")
	require.NoError(t, err)
	require.False(t, found)
	n, err := f.rdb.Exists(ctx, f.q.Job("nosuchjob")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "marking an unknown job must not make a hash")

	now := time.Now()
	require.Equal(t, []script.Code{applied}, f.run(jobstate.Done(&f.q, jobstate.DoneParams{Ran: ran(ids[0], entries[0], now), Result: "r"})))
	require.Equal(t, []script.Code{applied}, f.run(jobstate.Done(&f.q, jobstate.DoneParams{Ran: ran(ids[1], entries[1], now), Result: "r"})))
	require.Equal(t, []events.Event{{ID: ids[1], Status: "completed", Attempt: 1}}, next(),
		"the unmarked job's outcome is not announced")
}

// finish.lua asks a job's hash for the watched mark only in a queue whose watching flag a
// marking read (jobstate.Store.GetWatched) set: a mark made by hand in a queue nobody waited on is
// not read, so that outcome is not announced; once a wait marked another job, it is.
func TestFinishReadsMarksOnlyInAWatchedQueue(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	f.cfg.Events = events.Sharded
	next := jobtest.Listen(t, f.rdb, f.q.Events())
	ctx := t.Context()
	var ids []string
	for range 3 {
		j, err := f.c.Enqueue(ctx, f.queue, pipeline.Task{Type: "t", Payload: []byte("p")})
		require.NoError(t, err)
		ids = append(ids, j.ID)
		require.NoError(t, f.rdb.HSet(ctx, f.q.Job(j.ID), keys.FieldWatched, "1").Err())
	}
	entries := f.read(len(ids))
	now := time.Now()
	require.Equal(t, []script.Code{applied}, f.run(jobstate.Done(&f.q, jobstate.DoneParams{Ran: ran(ids[0], entries[0], now), Result: "r"})))
	_, found, err := jobstate.NewStore(f.rdb, "").GetWatched(ctx, f.q, ids[2])
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, []script.Code{applied}, f.run(jobstate.Done(&f.q, jobstate.DoneParams{Ran: ran(ids[1], entries[1], now), Result: "r"})))
	require.Equal(t, []events.Event{{ID: ids[1], Status: "completed", Attempt: 1}}, next(),
		"the first outcome, in a queue nobody waited on yet, is not announced")
}
