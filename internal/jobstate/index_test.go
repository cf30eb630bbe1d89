package jobstate_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/pipeline"
)

// indexed returns the ids of an index of finished jobs, oldest first, and checks the count
// the index keeps beside it (key:n).
func (f *testBundle) indexed(key string) []string {
	f.t.Helper()
	chunks, err := f.rdb.ZRange(f.t.Context(), key, 0, -1).Result()
	require.NoError(f.t, err)
	var ids []string
	for _, c := range chunks {
		ids = append(ids, strings.Fields(c)...)
	}
	if len(chunks) > 0 {
		n, err := f.rdb.Get(f.t.Context(), keys.IndexCount(key)).Int()
		require.NoError(f.t, err)
		require.Equal(f.t, len(ids), n, "the count beside the index")
	}
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

// finish.lua indexes a call's completed jobs as one chunk, scored by the call's latest finish,
// and trims the index to the cap by whole chunks, the oldest first, at most 4 a call and never
// the chunk just added.
func TestCompletedIndexCap(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	f.cfg.IndexCap = 5
	now := time.Now()
	at := func(base time.Duration) func(k int) time.Time {
		return func(k int) time.Time { return now.Add(base + time.Duration(k)*time.Millisecond) }
	}
	first := f.complete(3, at(0))
	second := f.complete(3, at(time.Second))
	require.Equal(t, second, f.indexed(f.q.Completed()), "6 over the cap of 5: the oldest chunk went")
	require.NotEmpty(t, first)
	third := f.complete(2, at(2*time.Second))
	require.Equal(t, append(append([]string{}, second...), third...), f.indexed(f.q.Completed()), "5: at the cap")
	chunks, err := f.rdb.ZRangeWithScores(t.Context(), f.q.Completed(), 0, -1).Result()
	require.NoError(t, err)
	require.EqualValues(t, now.Add(2*time.Second+time.Millisecond).UnixMilli(), chunks[len(chunks)-1].Score, "scored by the call's latest finish")

	// A call bigger than the cap keeps its own chunk.
	big := f.complete(8, at(3*time.Second))
	require.Equal(t, big, f.indexed(f.q.Completed()))

	// A lowered cap is reached over calls, each removing at most 4 chunks.
	f.cfg.IndexCap = 100
	for k := range 10 {
		f.complete(1, at(4*time.Second+time.Duration(k)*time.Millisecond))
	}
	require.Len(t, f.indexed(f.q.Completed()), 18)
	f.cfg.IndexCap = 1
	f.complete(1, at(5*time.Second))
	require.Len(t, f.indexed(f.q.Completed()), 8, "4 chunks a call: the 8 and three 1s went, 18 + 1 - 8 - 3")
	f.complete(1, at(6*time.Second))
	require.Len(t, f.indexed(f.q.Completed()), 5)
	f.complete(1, at(7*time.Second))
	require.Len(t, f.indexed(f.q.Completed()), 2)
	f.complete(1, at(7*time.Second+time.Millisecond))
	require.Len(t, f.indexed(f.q.Completed()), 1, "the cap, the chunk just added")

	// No cap (a negative IndexCap) indexes nothing.
	f.cfg.IndexCap = -1
	none := f.complete(1, at(time.Hour))
	require.NotContains(t, f.indexed(f.q.Completed()), none[0])

	// Pages, newest first, resume after their cursor, also inside a chunk.
	f.cfg.IndexCap = 0
	page1 := f.complete(5, at(8*time.Second))
	page2 := f.complete(5, at(9*time.Second))
	var got []string
	var after *jobstate.SetItem
	for {
		items, err := jobstate.NewStore(f.rdb, "").CompletedPage(t.Context(), f.q, after, 3)
		require.NoError(t, err)
		for _, it := range items {
			got = append(got, it.Member)
		}
		if len(items) < 3 {
			break
		}
		after = &items[len(items)-1]
	}
	want := append(append([]string{}, page1...), page2...)
	slices.Reverse(want)
	require.Equal(t, want, got[:10], "newest first: the last call's last id first")
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
		row, err := jobstate.NewStore(f.rdb, "").Cancel(ctx, f.q, jobstate.CancelParams{ID: j.ID, Now: now.Add(time.Duration(k) * time.Millisecond),
			Retention: time.Hour, MinRetention: time.Minute, IndexCap: 3})
		require.NoError(t, err)
		require.Equal(t, script.OK, row.Code)
		ids = append(ids, j.ID)
	}
	require.Equal(t, ids[1:], f.indexed(f.q.Canceled()))
	page, err := jobstate.NewStore(f.rdb, "").CanceledPage(ctx, f.q, nil, 10)
	require.NoError(t, err)
	require.Equal(t, []string{ids[3], ids[2], ids[1]}, []string{page[0].Member, page[1].Member, page[2].Member},
		"newest first")
	require.Equal(t, keys.New(keys.DefaultPrefix, f.queue).Canceled(), f.q.Canceled())
}
