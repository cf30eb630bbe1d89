package pipeline_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// A page of big jobs is cut by bytes, not only by count: it ends with the job whose payload
// and result pass Page.MaxBytes, its cursor continues right after that job, and only the
// page's own records are read (300 dead jobs of 1 MB once made one page of 300 MB).
func TestInspectorListByteBudget(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	big := bytes.Repeat([]byte("x"), 200_000)
	for _, st := range []status.Status{status.Failed, status.Queued, status.Scheduled} {
		want := map[string]bool{}
		for range 5 {
			j := jobtest.Seed(t, rdb, b.queue, st, jobtest.Opts{Task: pipeline.Task{Type: "big", Payload: big}})
			want[j.ID] = true
		}
		cmds := redistest.CountCommands(rdb)
		// 200 KB a job under a 500 KB budget: the third job passes it and ends the page.
		page, err := b.insp.List(ctx, b.queue, st, pipeline.Page{Limit: 1000, MaxBytes: 500_000})
		require.NoError(t, err)
		require.Len(t, page.Jobs, 3, "%s", st)
		require.NotEmpty(t, page.Next, "%s: more jobs follow", st)
		if st != status.Queued {
			require.Equal(t, int64(3), cmds.Named("hgetall"), "%s: only the page's records are read", st)
		}
		next, err := b.insp.List(ctx, b.queue, st, pipeline.Page{Limit: 1000, MaxBytes: 500_000, Cursor: page.Next})
		require.NoError(t, err)
		require.Len(t, next.Jobs, 2, "%s", st)
		require.Empty(t, next.Next, "%s", st)
		seen := map[string]bool{}
		for _, j := range append(page.Jobs, next.Jobs...) {
			require.False(t, seen[j.ID], "%s: %s listed twice", st, j.ID)
			seen[j.ID] = true
			require.Equal(t, big, j.Payload)
		}
		require.Equal(t, want, seen, st)

		// One job over the whole budget still makes a page of its own: a listing always moves on.
		one, err := b.insp.List(ctx, b.queue, st, pipeline.Page{Limit: 1000, MaxBytes: 1})
		require.NoError(t, err)
		require.Len(t, one.Jobs, 1, "%s", st)
		require.NotEmpty(t, one.Next)
	}
	_, err := b.insp.List(ctx, b.queue, status.Failed, pipeline.Page{MaxBytes: -1})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}

// The dry run of PurgeAll that the HTTP API answers with ids reads ids only: the dead set's,
// through the purge script, and no job record (it once loaded every record: 27 -> 619 MB).
func TestPurgeAllDryRunIDsReadsNoRecord(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	var dead []string
	for range 5 {
		dead = append(dead, jobtest.Seed(t, rdb, b.queue, status.Failed, jobtest.Opts{}).ID)
	}
	cmds := redistest.CountCommands(rdb).Record()
	got, err := b.insp.PurgeAllDryRunIDs(ctx, b.queue, 0)
	require.NoError(t, err)
	require.ElementsMatch(t, dead, got)
	require.Zero(t, cmds.Named("hgetall"))
	// The partition count, the purge script's dry run (and its EVAL when the server had not
	// cached it), and no get script per job.
	require.LessOrEqual(t, cmds.All(), int64(3), "%v", cmds.Take())
	jobs, err := b.insp.PurgeAllDryRun(ctx, b.queue, 0)
	require.NoError(t, err)
	require.Equal(t, got, ids(jobs), "the same ids, in the same order, as the dry run of records")

	none, err := b.insp.PurgeAllDryRunIDs(ctx, b.queue, time.Hour)
	require.NoError(t, err)
	require.Empty(t, none)
	_, err = b.insp.PurgeAllDryRunIDs(ctx, b.queue, -time.Second)
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}
