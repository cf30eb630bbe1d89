package pipeline

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
)

// near reports whether got is within the histogram's error (9%, plus rounding) of want.
func near(t *testing.T, want, got time.Duration, what string) {
	t.Helper()
	require.InDelta(t, float64(want), float64(got), 0.095*float64(want), "%s: want about %s, got %s", what, want, got)
}

// done is a completed transition of queue q on an entry made at entered, begun at began and
// run for took.
func done(q *keys.Queue, entered, began time.Time, took time.Duration) transition {
	t := jobstate.Done(q, jobstate.DoneParams{Ran: jobstate.Ran{ID: "j", Entry: strconv.FormatInt(entered.UnixMilli(), 10) + "-0",
		Attempt: 1, Started: began, Finished: began.Add(took)}})
	t.Began = began
	return t
}

// Two workers' outcomes of one queue merge in Redis: the counts add up, and the percentiles
// are those of all the attempts, which neither worker's alone has.
func TestHistoryMergedAcrossWorkers(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	queue := redistest.UniqueName(t)
	q := keys.New(keys.DefaultPrefix, queue)
	insp, err := NewInspector(rdb, InspectorConfig{})
	require.NoError(t, err)
	// A bucket that is whole by now, so History reads it.
	at := time.Unix(engine.BucketStart(time.Now(), HistoryStepFine), 0).Add(-2 * HistoryStepFine)
	began := at.Add(-time.Second)
	one := engine.NewHistory(jobstate.NewStore(rdb, keys.DefaultPrefix), time.Hour, zerolog.Nop())
	two := engine.NewHistory(jobstate.NewStore(rdb, keys.DefaultPrefix), time.Hour, zerolog.Nop())
	var ts1, ts2 []transition
	for range 99 { // worker one: fast jobs that waited 10 ms
		ts1 = append(ts1, done(&q, began.Add(-10*time.Millisecond), began, 10*time.Millisecond))
	}
	for range 97 { // worker two: slower ones that waited a second, and a slow tail
		ts2 = append(ts2, done(&q, began.Add(-time.Second), began, 100*time.Millisecond))
	}
	for range 4 {
		ts2 = append(ts2, done(&q, began.Add(-time.Second), began, 5*time.Second))
	}
	entry := strconv.FormatInt(began.Add(-time.Second).UnixMilli(), 10) + "-0"
	retry := jobstate.Retry(&q, jobstate.RetryParams{Ran: jobstate.Ran{ID: "r", Entry: entry, Started: began, Finished: began.Add(100 * time.Millisecond)}})
	died := jobstate.Retry(&q, jobstate.RetryParams{Ran: jobstate.Ran{ID: "d", Entry: entry, Started: began, Finished: began.Add(100 * time.Millisecond)}})
	retry.Began, died.Began = began, began
	refused := done(&q, began, began, time.Hour)
	start := jobstate.Start(&q, jobstate.StartParams{ID: "s", Entry: "1-0", At: began})
	ok := func(n int) []script.Code { return make([]script.Code, n) }
	one.Written(ts1, ok(len(ts1)), at)
	two.Written(ts2, ok(len(ts2)), at)
	two.Written([]transition{retry, died, refused, start}, []script.Code{script.OK, script.Died, script.Refused, script.OK}, at)
	one.Flush()
	two.Flush()

	h, err := insp.History(context.Background(), queue, HistoryStepFine, at.Add(-time.Minute))
	require.NoError(t, err)
	require.Equal(t, int64(200), h.Total.Completed)
	require.Equal(t, int64(1), h.Total.Retried, "a retry Redis applied")
	require.Equal(t, int64(1), h.Total.Failed, "a retry that became dead")
	var p HistoryPoint
	for _, pt := range h.Points {
		if pt.At.Equal(time.Unix(engine.BucketStart(at, HistoryStepFine), 0)) {
			p = pt
		}
	}
	require.Equal(t, int64(200), p.Completed, "the bucket of the writes: %+v", h.Points)
	require.Equal(t, int64(202), p.Exec.Count, "completed, retried and dead attempts")
	near(t, 100*time.Millisecond, p.Exec.P50, "exec p50")
	near(t, 5*time.Second, p.Exec.P99, "exec p99")
	near(t, time.Second, p.Wait.P50, "wait p50")
	require.Equal(t, h.Total.Exec, p.Exec, "one bucket: the window's latencies are the bucket's")

	// The coarse resolution has the same outcomes.
	c, err := insp.History(context.Background(), queue, HistoryStepCoarse, at.Add(-time.Hour))
	require.NoError(t, err)
	if engine.BucketStart(at, HistoryStepCoarse) < engine.BucketStart(time.Now(), HistoryStepCoarse) {
		require.Equal(t, int64(200), c.Total.Completed)
		near(t, 5*time.Second, c.Total.Exec.P99, "coarse exec p99")
	}

	_, err = insp.History(context.Background(), queue, time.Second, at)
	require.ErrorIs(t, err, ErrInvalid)
}
