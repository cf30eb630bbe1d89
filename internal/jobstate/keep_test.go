package jobstate_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/delayed"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
	"github.com/conveyorq/conveyor/stream"
)

// A job's own retention shorter than the shortest retention is raised to it, on both paths of
// finish.lua (payload sent back, or read from the entry): a publish resent after a lost reply
// must find the job. (Dropping finish.lua's `if ret < min_ret` broke no test before this one.)
func TestFinishMinRetentionHoldsTheRecord(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour) // MinRetention: 1 minute
	ctx := t.Context()
	// A slice, not a map: the entries are read in publish order and matched to the ids by
	// position, so the publish order must be fixed (a map's order failed CI half the time).
	tasks := []struct {
		id   string
		task pipeline.Task
	}{
		{"sent-back", pipeline.Task{Type: "t", Payload: []byte("p")}},
		{"from-entry", pipeline.Task{Type: "t", Payload: []byte("p"), Metadata: map[string]string{"k": "v"}}},
	}
	for _, tc := range tasks {
		_, err := f.c.Enqueue(ctx, f.queue, tc.task, pipeline.WithID(tc.id), pipeline.WithRetention(time.Millisecond))
		require.NoError(t, err)
	}
	entries := f.read(2)
	now := time.Now()
	require.Equal(t, []script.Code{applied, applied}, f.run(
		jobstate.Done(&f.q, jobstate.DoneParams{Ran: ran("sent-back", entries[0], now), Result: "r"}).WithPayload("p"),
		jobstate.Done(&f.q, jobstate.DoneParams{Ran: ran("from-entry", entries[1], now), Result: "r"})))
	for _, tc := range tasks {
		id, task := tc.id, tc.task
		ttl, err := f.rdb.PTTL(ctx, f.q.Job(id)).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 50*time.Second, "%s: kept for the shortest retention, not its own 1ms", id)
		again, err := f.c.Enqueue(ctx, f.queue, task, pipeline.WithID(id), pipeline.WithRetention(time.Millisecond))
		require.NoError(t, err)
		require.True(t, again.Duplicate, "%s: the resent publish finds the job", id)
		require.Equal(t, status.Completed, again.Status)
	}
	require.Zero(t, f.rdb.XLen(ctx, f.q.Stream()).Val(), "nothing was enqueued twice")
}

// A retry is scored at its due time, not at the time the attempt finished: promotion, by
// Redis's clock, moves nothing before then. (Scoring it at the finish time broke no test: only
// the wake message hid it, and a restarted scheduler would have retried at once.)
func TestFinishRetryIsScoredAtItsDueTime(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	ctx := t.Context()
	job, err := f.c.Enqueue(ctx, f.queue, pipeline.Task{Type: "t", Payload: []byte("p")})
	require.NoError(t, err)
	entry := f.read(1)[0]
	now := time.Now()
	due := now.Add(time.Hour)
	require.Equal(t, []script.Code{applied}, f.run(jobstate.Retry(&f.q, jobstate.RetryParams{Ran: ran(job.ID, entry, now),
		Reason: "boom", RetryAt: due})))
	score, err := f.rdb.ZScore(ctx, f.q.Scheduled(), job.ID).Result()
	require.NoError(t, err)
	require.EqualValues(t, due.UnixMilli(), score)
	j := f.get(job.ID)
	require.Equal(t, status.Scheduled, j.Status)
	require.Equal(t, due.UnixMilli(), j.RunAt.UnixMilli())

	s, err := delayed.New(f.rdb, delayed.Config{Queues: []string{f.queue}})
	require.NoError(t, err)
	moved, next, _, err := s.Promote(ctx, f.queue)
	require.NoError(t, err)
	require.Zero(t, moved, "a retry due in an hour is not promoted now")
	require.Equal(t, due.UnixMilli(), next.UnixMilli())
	require.Equal(t, status.Scheduled, f.get(job.ID).Status)
}

// The dead record of an unreadable entry keeps the entry's type only when its metadata is fit
// to run: a key that is empty or starts with '_' (reserved) makes a record with no type, which
// replay refuses, rather than one that would run with metadata no publish could give it.
// (Dropping lua/dead.lua's reserved-key check in cv_dead_entry broke no test before this one.)
func TestFinishPoisonRecordDropsTypeOfReservedMetadata(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		md   map[string]string
		typ  string
	}{
		{"reserved key", map[string]string{"_x": "1", "k": "v"}, ""},
		{"empty key", map[string]string{"": "1"}, ""},
		{"plain keys", map[string]string{"x": "1"}, "t"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, time.Hour)
			ctx := t.Context()
			md, err := stream.EncodeMetadata(c.md)
			require.NoError(t, err)
			entry, err := f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: f.q.Stream(), Values: []any{
				keys.EntryUUID, "bad-1", keys.EntryPayload, "p", keys.EntryMetadata, md,
				keys.EntryJob, keys.FormatEntryJob(1, 3, 0, "t")}}).Result()
			require.NoError(t, err)
			require.Equal(t, []string{entry}, f.read(1))
			now := time.Now()
			require.Equal(t, []script.Code{applied}, f.run(jobstate.Poison(&f.q, jobstate.PoisonParams{ID: "bad-1", Entry: entry,
				At: now, Reason: "unreadable stream entry " + entry + ": reserved metadata key"})))
			rec := f.get("bad-1")
			require.Equal(t, status.Failed, rec.Status)
			require.Equal(t, c.typ, rec.Type)
			require.Equal(t, "p", string(rec.Payload))

			row, err := jobstate.NewStore(f.rdb, "").Replay(ctx, f.q, "bad-1", now)
			require.NoError(t, err)
			code := row.Code
			if c.typ == "" {
				require.Equal(t, script.NoType, code, "a record with no type cannot be replayed")
				insp, err := pipeline.NewInspector(f.rdb, pipeline.InspectorConfig{})
				require.NoError(t, err)
				require.ErrorIs(t, insp.Replay(ctx, f.queue, "bad-1"), pipeline.ErrInvalid)
			} else {
				require.Equal(t, script.OK, code)
			}
		})
	}
}

// Cancel frees the job's unique key whatever the job's status: a publish with the key is a
// duplicate before the cancel and a new job after it. (Removing cancel.lua's release broke
// only tests that freed the key incidentally.)
func TestCancelFreesTheUniqueKey(t *testing.T) {
	t.Parallel()
	for _, st := range []status.Status{status.Scheduled, status.Queued, status.InProgress} {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			f := setup(t, time.Hour)
			ctx := t.Context()
			var opts []pipeline.Option
			if st == status.Scheduled {
				opts = append(opts, pipeline.WithDelay(time.Hour))
			}
			publish := func() *pipeline.Job {
				j, err := f.c.Enqueue(ctx, f.queue, pipeline.Task{Type: "t"}, append(opts, pipeline.WithUnique("report-7", time.Hour))...)
				require.NoError(t, err)
				return j
			}
			first := publish()
			if st == status.InProgress {
				entry := f.read(1)[0]
				require.Equal(t, []script.Code{applied}, f.run(jobstate.Start(&f.q, jobstate.StartParams{ID: first.ID, Entry: entry, Attempt: 1, At: time.Now()})))
			}
			require.Equal(t, st, f.get(first.ID).Status)
			dup := publish()
			require.True(t, dup.Duplicate, "the key is held")
			require.Equal(t, first.ID, dup.ID)

			require.NoError(t, f.c.Cancel(ctx, f.queue, first.ID))
			require.Zero(t, f.rdb.Exists(ctx, f.q.Unique("report-7")).Val(), "the key is freed")
			second := publish()
			require.False(t, second.Duplicate, "a publish after the cancel takes the key")
			require.NotEqual(t, first.ID, second.ID)
			require.Equal(t, second.ID, f.rdb.Get(ctx, f.q.Unique("report-7")).Val())
		})
	}
}
