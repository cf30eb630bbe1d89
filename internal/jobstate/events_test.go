package jobstate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/jobtest"
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
	now := time.Now().UnixMilli()
	for _, id := range ids[:4] { // waited on (the poison record is announced all the same)
		_, found, err := jobstate.GetWatched(ctx, f.rdb, f.q, id)
		require.NoError(t, err)
		require.True(t, found)
	}

	// Nothing is published without events: the next message is the call's below.
	f.cfg.Events = events.None
	require.Equal(t, []script.Code{applied}, f.run(jobstate.Start(&f.q, ids[5], entries[5], 1, now)))

	f.cfg.Events = events.Sharded
	codes := f.run(
		jobstate.Start(&f.q, ids[0], entries[0], 1, now),
		jobstate.Done(&f.q, ids[0], entries[0], 1, now, now+1, "r"),
		jobstate.Retry(&f.q, ids[1], entries[1], 1, now, now+1, "e", now+60_000),
		jobstate.Retry(&f.q, ids[2], entries[2], 1, now, now+1, "e", now+60_000),
		jobstate.Dead(&f.q, ids[3], entries[3], 1, now, now+1, "e"),
		jobstate.Poison(&f.q, ids[4], entries[4], now, "unreadable"),
		jobstate.Done(&f.q, ids[0], entries[0], 1, now, now+1, "again"),
	)
	require.Equal(t, []script.Code{applied, applied, applied, died, applied, applied, refused}, codes)
	require.Equal(t, []events.Event{
		{ID: ids[0], Status: "completed", Attempt: 1},
		{ID: ids[1], Status: "scheduled", Attempt: 1},
		{ID: ids[2], Status: "failed", Attempt: 1},
		{ID: ids[3], Status: "failed", Attempt: 1},
		{ID: ids[4], Status: "failed", Attempt: 0},
	}, next(), "one message for the call; the start and the refused transition say nothing")

	code, _, err := jobstate.Cancel(ctx, f.rdb, f.q, ids[5], now, time.Hour.Milliseconds(), time.Minute.Milliseconds(), events.Plain)
	require.NoError(t, err)
	require.Equal(t, script.OK, code)
	code, _, err = jobstate.Cancel(ctx, f.rdb, f.q, ids[1], now, time.Hour.Milliseconds(), time.Minute.Milliseconds(), events.Sharded)
	require.NoError(t, err)
	require.Equal(t, script.OK, code)
	require.Equal(t, []events.Event{{ID: ids[1], Status: "canceled", Attempt: 1}}, next(),
		"a plain PUBLISH does not reach a sharded subscriber: the first cancel's message is not this one")
}

// finish.lua announces the outcome of a job a waiter marked (jobstate.GetWatched) and says
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
	_, found, err := jobstate.GetWatched(ctx, f.rdb, f.q, ids[1])
	require.NoError(t, err)
	require.True(t, found)
	_, found, err = jobstate.GetWatched(ctx, f.rdb, f.q, "nosuchjob")
	require.NoError(t, err)
	require.False(t, found)
	n, err := f.rdb.Exists(ctx, f.q.Job("nosuchjob")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "marking an unknown job must not make a hash")

	now := time.Now().UnixMilli()
	require.Equal(t, []script.Code{applied}, f.run(jobstate.Done(&f.q, ids[0], entries[0], 1, now, now+1, "r")))
	require.Equal(t, []script.Code{applied}, f.run(jobstate.Done(&f.q, ids[1], entries[1], 1, now, now+1, "r")))
	require.Equal(t, []events.Event{{ID: ids[1], Status: "completed", Attempt: 1}}, next(),
		"the unmarked job's outcome is not announced")
}
