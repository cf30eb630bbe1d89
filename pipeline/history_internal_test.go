package pipeline

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

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

// The percentiles of a known distribution come out within the histogram's error, and two
// histograms merged answer as one histogram of all their durations would.
func TestHistogramQuantiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fill     func(h *histogram)
		p50, p99 time.Duration
	}{
		{"uniform 1..10000 ms", func(h *histogram) {
			for ms := 1; ms <= 10000; ms++ {
				h.add(time.Duration(ms) * time.Millisecond)
			}
		}, 5 * time.Second, 9900 * time.Millisecond},
		{"one value", func(h *histogram) {
			for range 7 {
				h.add(250 * time.Millisecond)
			}
		}, 250 * time.Millisecond, 250 * time.Millisecond},
		{"a slow tail", func(h *histogram) {
			for range 980 {
				h.add(20 * time.Millisecond)
			}
			for range 20 {
				h.add(3 * time.Second)
			}
		}, 20 * time.Millisecond, 3 * time.Second},
		{"days", func(h *histogram) { h.add(72 * time.Hour) }, 72 * time.Hour, 72 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h histogram
			tc.fill(&h)
			near(t, tc.p50, h.quantile(0.5), "p50")
			near(t, tc.p99, h.quantile(0.99), "p99")
		})
	}
	var empty histogram
	require.Zero(t, empty.quantile(0.5))
	var sub histogram
	sub.add(300 * time.Microsecond)
	require.Equal(t, 500*time.Microsecond, sub.quantile(0.5), "under a millisecond")
	var huge histogram
	huge.add(1000 * time.Hour * 24)
	require.Equal(t, cellValue(histCells-1), huge.quantile(1), "past the last cell")

	// Merged: the even milliseconds in one histogram, the odd ones in another.
	var even, odd, all histogram
	for ms := 1; ms <= 5000; ms++ {
		d := time.Duration(ms) * time.Millisecond
		all.add(d)
		if ms%2 == 0 {
			even.add(d)
		} else {
			odd.add(d)
		}
	}
	even.merge(&odd)
	require.Equal(t, all, even)
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
	at := time.Unix(bucketStart(time.Now(), HistoryStepFine), 0).Add(-2 * HistoryStepFine)
	began := at.Add(-time.Second)
	one := newHistory(jobstate.NewStore(rdb, keys.DefaultPrefix), time.Hour, zerolog.Nop())
	two := newHistory(jobstate.NewStore(rdb, keys.DefaultPrefix), time.Hour, zerolog.Nop())
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
	one.written(ts1, ok(len(ts1)), at)
	two.written(ts2, ok(len(ts2)), at)
	two.written([]transition{retry, died, refused, start}, []script.Code{script.OK, script.Died, script.Refused, script.OK}, at)
	one.flush()
	two.flush()

	h, err := insp.History(context.Background(), queue, HistoryStepFine, at.Add(-time.Minute))
	require.NoError(t, err)
	require.Equal(t, int64(200), h.Total.Completed)
	require.Equal(t, int64(1), h.Total.Retried, "a retry Redis applied")
	require.Equal(t, int64(1), h.Total.Failed, "a retry that became dead")
	var p HistoryPoint
	for _, pt := range h.Points {
		if pt.At.Equal(time.Unix(bucketStart(at, HistoryStepFine), 0)) {
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
	if bucketStart(at, HistoryStepCoarse) < bucketStart(time.Now(), HistoryStepCoarse) {
		require.Equal(t, int64(200), c.Total.Completed)
		near(t, 5*time.Second, c.Total.Exec.P99, "coarse exec p99")
	}

	_, err = insp.History(context.Background(), queue, time.Second, at)
	require.ErrorIs(t, err, ErrInvalid)
}

// Pruning: every bucket's key expires when it leaves its span, and a bucket that has left it
// already is not written, so two hours of outcomes leave an hour of fine buckets and keys
// that all expire within their span.
func TestHistoryBounded(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	queue := redistest.UniqueName(t)
	q := keys.New(keys.DefaultPrefix, queue)
	h := newHistory(jobstate.NewStore(rdb, keys.DefaultPrefix), time.Hour, zerolog.Nop())
	now := time.Now()
	for at := now.Add(-2 * time.Hour); at.Before(now); at = at.Add(HistoryStepFine) {
		h.written([]transition{done(&q, at, at, time.Millisecond)}, []script.Code{script.OK}, at)
	}
	h.flush()
	ctx := context.Background()
	fine, coarse := 0, 0
	iter := rdb.Scan(ctx, 0, q.Base()+"history:*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		ttl, err := rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		// -1: no expiry, which would be a bug; -2: gone since the scan (the oldest bucket
		// expires about now), which is fine.
		require.NotEqual(t, time.Duration(-1), ttl, "%s never expires", k)
		switch {
		case strings.Contains(k, ":5s:"):
			fine++
			require.LessOrEqual(t, ttl, HistorySpanFine+HistoryStepFine, "%s expires in %s", k, ttl)
		case strings.Contains(k, ":1m:"):
			coarse++
			require.LessOrEqual(t, ttl, HistorySpanCoarse+HistoryStepCoarse, "%s expires in %s", k, ttl)
		default:
			t.Fatalf("unexpected history key %s", k)
		}
	}
	require.NoError(t, iter.Err())
	require.LessOrEqual(t, fine, int(HistorySpanFine/HistoryStepFine)+1, "fine buckets")
	require.GreaterOrEqual(t, fine, int(HistorySpanFine/HistoryStepFine)-1, "fine buckets")
	require.LessOrEqual(t, coarse, int(2*time.Hour/HistoryStepCoarse)+1, "coarse buckets: two hours of a day's span")
}
