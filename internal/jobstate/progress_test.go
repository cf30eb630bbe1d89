package jobstate_test

import (
	"strings"
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

// progress.lua writes a report only for the live job's entry and attempt, and announces it;
// a report for another entry or attempt, for a finished job or for no job changes nothing and
// announces nothing. Replay drops the report (its attempts count from 1 again).
func TestProgressFence(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	ctx := t.Context()
	next := jobtest.Listen(t, f.rdb, f.q.Events())
	j, err := f.c.Enqueue(ctx, f.queue, pipeline.Task{Type: "t", Payload: []byte("p")})
	require.NoError(t, err)
	entry := f.read(1)[0]
	write := func(entry string, attempt, pct int, msg string) jobstate.Row {
		t.Helper()
		row, err := jobstate.NewStore(f.rdb, "").WriteProgress(ctx, f.q, jobstate.ProgressParams{ID: j.ID, Entry: entry,
			Attempt: attempt, Percent: pct, Message: msg, Events: events.Sharded})
		require.NoError(t, err)
		return row
	}
	stored := func() string { return f.rdb.HGet(ctx, f.q.Job(j.ID), keys.FieldProgress).Val() }

	for _, tc := range []struct {
		name    string
		entry   string
		attempt int
		want    script.Code
	}{
		{"another entry", "1-1", 1, script.Refused},
		{"its own", entry, 1, script.OK},
	} {
		row := write(tc.entry, tc.attempt, 42, "half way")
		require.Equal(t, tc.want, row.Code, tc.name)
		if tc.want == script.Refused {
			require.Equal(t, "queued", row.Data, tc.name)
			require.Empty(t, stored(), tc.name)
		}
	}
	p, ok := jobstate.ParseProgress(stored())
	require.True(t, ok, stored())
	require.Equal(t, jobstate.ProgressReport{Attempt: 1, Entry: entry, At: p.At, Percent: 42, Message: "half way"}, p)
	require.WithinDuration(t, time.Now(), p.At, time.Minute)
	require.Equal(t, []events.Event{{ID: j.ID, Status: events.Progress, Attempt: 1}}, next(),
		"only the written report is announced")

	// Failed for good: refused, then replayed: the report goes.
	require.Equal(t, []script.Code{applied}, f.run(jobstate.Dead(&f.q, jobstate.DeadParams{Ran: ran(j.ID, entry, time.Now()), Reason: "x"})))
	row := write(entry, 1, 50, "late")
	require.Equal(t, script.Refused, row.Code)
	require.Equal(t, "failed", row.Data)
	require.Contains(t, stored(), "half way", "a finished job keeps its last report")
	_, err = jobstate.NewStore(f.rdb, "").Replay(ctx, f.q, j.ID, time.Now())
	require.NoError(t, err)
	require.Empty(t, stored(), "replay drops it")

	row, err = jobstate.NewStore(f.rdb, "").WriteProgress(ctx, f.q, jobstate.ProgressParams{ID: "nope", Entry: entry, Attempt: 1})
	require.NoError(t, err)
	require.Equal(t, script.NotFound, row.Code)
}

// Shown: a report belongs to the job as it is when it is of the job's attempt and, while the
// job is live, of its entry.
func TestProgressShown(t *testing.T) {
	t.Parallel()
	p := jobstate.ProgressReport{Attempt: 2, Entry: "5-0", Percent: 10}
	for _, tc := range []struct {
		status  string
		attempt int
		entry   string
		want    bool
	}{
		{"in_progress", 2, "5-0", true},
		{"queued", 2, "5-0", true},
		{"queued", 2, "6-0", false}, // put back on shutdown: a new run of attempt 2
		{"in_progress", 3, "7-0", false},
		{"in_progress", 1, "5-0", true}, // before the start mark writes attempt 2
		{"scheduled", 2, "", true},      // waiting for its retry: attempt 2's last report
		{"completed", 2, "", true},
		{"failed", 2, "", true},
		{"canceled", 2, "", true},
		{"completed", 3, "", false},
	} {
		require.Equal(t, tc.want, p.Shown(tc.status, tc.attempt, tc.entry), "%+v", tc)
	}
}

func TestParseProgress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    string
		want *jobstate.ProgressReport
	}{
		{"1 5-0 1700000000000 40 copying files", &jobstate.ProgressReport{Attempt: 1, Entry: "5-0", At: time.UnixMilli(1700000000000), Percent: 40, Message: "copying files"}},
		{"1 5-0 1700000000000 100", &jobstate.ProgressReport{Attempt: 1, Entry: "5-0", At: time.UnixMilli(1700000000000), Percent: 100}},
		{"1 5-0 1700000000000 100 ", &jobstate.ProgressReport{Attempt: 1, Entry: "5-0", At: time.UnixMilli(1700000000000), Percent: 100}},
		{"", nil},
		{"1 5-0 1700000000000", nil},
		{"1 5-0 1700000000000 101 x", nil},
		{"1 5-0 1700000000000 -1 x", nil},
		{"x 5-0 1700000000000 1 x", nil},
		{"1 5-0 0 1 x", nil},
		{"1  1700000000000 1 x", nil},
	} {
		got, ok := jobstate.ParseProgress(tc.v)
		if tc.want == nil {
			require.False(t, ok, tc.v)
			continue
		}
		require.True(t, ok, tc.v)
		require.Equal(t, *tc.want, got, tc.v)
	}
}

// The field comes from Redis: ParseProgress never panics, and what it accepts is in range.
func FuzzParseProgress(f *testing.F) {
	for _, s := range []string{"1 5-0 1700000000000 40 copying", "1 5-0 1 100", "", "1 a 2 3 4 5 6", "-1 a 1 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		p, ok := jobstate.ParseProgress(v)
		if !ok {
			return
		}
		if p.Percent < 0 || p.Percent > 100 || p.Attempt < 0 || p.Entry == "" || strings.Contains(p.Entry, " ") {
			t.Fatalf("accepted %q as %+v", v, p)
		}
	})
}

// CutMessage keeps a message within MaxProgressMessage bytes, valid UTF-8, on one line.
func TestCutMessage(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", jobstate.MaxProgressMessage) // 2 bytes a rune
	got := jobstate.CutMessage(long)
	require.LessOrEqual(t, len(got), jobstate.MaxProgressMessage)
	require.Equal(t, strings.Repeat("é", jobstate.MaxProgressMessage/2), got)
	require.Equal(t, "a b c d", jobstate.CutMessage("a\r\nb\nc\rd"))
}
