package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

// A written chunk becomes one Attempt per outcome, with the outcome its op means, its type,
// its times and its notes; start marks are no attempts, and a middleware's refusal that
// finish.lua refused (the attempt's own outcome was written before) is not told twice.
func TestAttemptsWritten(t *testing.T) {
	q := keys.New(keys.DefaultPrefix, "emails#2")
	began := time.UnixMilli(1_790_000_000_000)
	at := began.Add(1500 * time.Microsecond)
	tr := func(op jobstate.Op, typ string, note uint8) transition {
		return transition{Queue: &q, Op: op, ID: "j-" + typ, Attempt: 2, Entry: "1789999999990-3", Type: typ, Began: began, Note: note}
	}
	ts := []transition{
		tr(jobstate.OpStart, "", 0),
		tr(jobstate.OpDone, "send", 0),
		tr(jobstate.OpRetry, "send", 0),
		tr(jobstate.OpDead, "send", 0),
		tr(jobstate.OpPoison, "", 0),
		tr(jobstate.OpRetry, "nope", noteNoHandler),
		tr(jobstate.OpDead, "send", noteRefused),
		tr(jobstate.OpRetry, "send", noteRefused), // fenced off below
	}
	codes := []script.Code{script.OK, script.OK, script.Died, script.OK, script.OK, script.Refused, script.OK, script.Refused}
	var got []Attempt
	r := newAttempts(func(as []Attempt) { got = append(got, as...) })
	r.written(ts, codes, at)

	entered := time.UnixMilli(1_789_999_999_990)
	want := []Attempt{
		{Type: "send", Stored: true},
		{Type: "send", Outcome: OutcomeDead, Stored: true}, // a retry finish.lua turned into a death (Died)
		{Type: "send", Outcome: OutcomeDead, Stored: true},
		{Type: "", Outcome: OutcomeDead, Stored: true},
		{Type: "nope", Outcome: OutcomeRetry, NoHandler: true}, // fenced off: not stored
		{Type: "send", Outcome: OutcomeDead, Refused: true, Stored: true},
	}
	for i := range want {
		want[i].Queue, want[i].Began, want[i].Took, want[i].Entered = "emails", began, 1500*time.Microsecond, entered
		want[i].ID, want[i].Number = "j-"+want[i].Type, 2
	}
	require.Equal(t, want, got)

	// Outcomes given up (no codes) are told, refusals too: nothing says they were fenced, and
	// none was stored.
	got = nil
	r.written(ts[6:], nil, at)
	require.Len(t, got, 2)
	for _, a := range got {
		require.False(t, a.Stored)
	}
	got = nil
	r.written(ts[:1], codes[:1], at)
	require.Empty(t, got, "a chunk of start marks alone tells nothing")

	var none *attempts // no hook
	none.written(ts, codes, at)
	none.ended(Attempt{})
	require.Nil(t, newAttempts(nil))
}

// BenchmarkAttemptsWritten is the worker's part of the job series per attempt: making the
// Attempts of a written chunk of 50 outcomes (the hook does nothing here; package metrics'
// BenchmarkJobSeries is the rest).
func BenchmarkAttemptsWritten(b *testing.B) {
	q := keys.New(keys.DefaultPrefix, "bench")
	began := time.Now()
	ts := make([]transition, finishChunk)
	codes := make([]script.Code, finishChunk)
	for i := range ts {
		ts[i] = transition{Queue: &q, Op: jobstate.OpDone, Entry: "1789999999990-3", Type: "noop", Began: began}
	}
	r := newAttempts(func([]Attempt) {})
	at := began.Add(time.Millisecond)
	b.ReportAllocs()
	for b.Loop() {
		r.written(ts, codes, at)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*finishChunk), "ns/attempt")
}
