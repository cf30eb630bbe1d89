package jobstate_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/pipeline"
)

// indexed returns the ids of an index of finished jobs, oldest first.
func (f *testBundle) indexed(key string) []string {
	f.t.Helper()
	ids, err := f.rdb.ZRange(f.t.Context(), key, 0, -1).Result()
	require.NoError(f.t, err)
	return ids
}

// complete publishes n jobs and completes them, job k finished at at(k), in one finish.lua call.
func (f *testBundle) complete(n int, at func(k int) time.Time) []string {
	f.t.Helper()
	tasks := make([]pipeline.Task, n)
	for k := range tasks {
		tasks[k] = pipeline.Task{Type: "t", Payload: []byte("p" + strconv.Itoa(k))}
	}
	jobs, err := f.c.EnqueueBatch(f.t.Context(), f.queue, tasks)
	require.NoError(f.t, err)
	entries := f.read(n)
	ts := make([]jobstate.Transition, n)
	ids := make([]string, n)
	for k, j := range jobs {
		ids[k] = j.ID
		fin := at(k)
		ts[k] = jobstate.Done(&f.q, jobstate.DoneParams{Ran: jobstate.Ran{ID: j.ID, Entry: entries[k], Attempt: 1,
			Started: fin.Add(-time.Millisecond), Finished: fin}})
	}
	for _, c := range f.run(ts...) {
		require.Equal(f.t, applied, c)
	}
	return ids
}

// finish.lua indexes every completed job, scored by its finish, and trims the index to the
// cap, the oldest first, by at most 100 more entries than a call adds.
func TestCompletedIndexCap(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	f.cfg.IndexCap = 5
	now := time.Now()
	ids := f.complete(8, func(k int) time.Time { return now.Add(time.Duration(k) * time.Millisecond) })
	require.Equal(t, ids[3:], f.indexed(f.q.Completed()), "the newest 5 are kept")
	s, err := f.rdb.ZScore(t.Context(), f.q.Completed(), ids[7]).Result()
	require.NoError(t, err)
	require.EqualValues(t, now.Add(7*time.Millisecond).UnixMilli(), s, "scored by the finish")

	// A lowered cap is reached over calls, each removing at most 100 more than it adds.
	f.cfg.IndexCap = 200
	more := f.complete(300, func(k int) time.Time { return now.Add(time.Second + time.Duration(k)*time.Millisecond) })
	require.Len(t, f.indexed(f.q.Completed()), 200)
	require.Equal(t, more[100:], f.indexed(f.q.Completed()))
	f.cfg.IndexCap = 10
	f.complete(1, func(int) time.Time { return now.Add(time.Minute) })
	require.Len(t, f.indexed(f.q.Completed()), 100, "200 + 1 - (1 + 100)")
	f.complete(1, func(int) time.Time { return now.Add(time.Minute) })
	require.Len(t, f.indexed(f.q.Completed()), 10)

	// No cap (a negative IndexCap) indexes nothing.
	f.cfg.IndexCap = -1
	none := f.complete(1, func(int) time.Time { return now.Add(time.Hour) })
	_, err = f.rdb.ZScore(t.Context(), f.q.Completed(), none[0]).Result()
	require.ErrorIs(t, err, redis.Nil)
}

// The index is trimmed to the retention: entries that finished longer ago than the retention
// before the batch's latest finish go (their records expired).
func TestCompletedIndexRetention(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	now := time.Now()
	old := f.complete(3, func(k int) time.Time { return now.Add(-2*time.Hour + time.Duration(k)*time.Millisecond) })
	require.Equal(t, old, f.indexed(f.q.Completed()), "each call trims by its own latest finish")
	fresh := f.complete(2, func(k int) time.Time { return now.Add(time.Duration(k) * time.Millisecond) })
	require.Equal(t, fresh, f.indexed(f.q.Completed()), "the jobs finished over an hour before are gone")

	// A job kept only as a tombstone (no retention) is not indexed: it has nothing to show.
	g := setup(t, 0)
	g.complete(2, func(int) time.Time { return now })
	require.Empty(t, g.indexed(g.q.Completed()))
}

// cancel.lua indexes each canceled job and trims the index as finish.lua does.
func TestCanceledIndex(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	ctx := t.Context()
	now := time.Now()
	var ids []string
	for k := range 4 {
		j, err := f.c.Enqueue(ctx, f.queue, pipeline.Task{Type: "t"}, pipeline.WithDelay(time.Hour))
		require.NoError(t, err)
		row, err := jobstate.Cancel(ctx, f.rdb, f.q, jobstate.CancelParams{ID: j.ID, Now: now.Add(time.Duration(k) * time.Millisecond),
			Retention: time.Hour, MinRetention: time.Minute, IndexCap: 3})
		require.NoError(t, err)
		require.Equal(t, script.OK, row.Code)
		ids = append(ids, j.ID)
	}
	require.Equal(t, ids[1:], f.indexed(f.q.Canceled()))
	page, err := jobstate.CanceledPage(ctx, f.rdb, f.q, nil, 10)
	require.NoError(t, err)
	require.Equal(t, []string{ids[3], ids[2], ids[1]}, []string{page[0].Member, page[1].Member, page[2].Member},
		"newest first")
	require.Equal(t, keys.New(keys.DefaultPrefix, f.queue).Canceled(), f.q.Canceled())
}
