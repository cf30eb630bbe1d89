package engine

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

func TestMain(m *testing.M) { redistest.Main(m) }

// done is a completed transition of queue q on an entry made at entered, begun at began and
// run for took.
func done(q *keys.Queue, entered, began time.Time, took time.Duration) jobstate.Transition {
	t := jobstate.Done(q, jobstate.DoneParams{Ran: jobstate.Ran{ID: "j", Entry: strconv.FormatInt(entered.UnixMilli(), 10) + "-0",
		Attempt: 1, Started: began, Finished: began.Add(took)}})
	t.Began = began
	return t
}

// Pruning: every bucket's key expires when it leaves its span, and a bucket that has left it
// already is not written, so two hours of outcomes leave an hour of fine buckets and keys
// that all expire within their span.
func TestHistoryBounded(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	queue := redistest.UniqueName(t)
	q := keys.New(keys.DefaultPrefix, queue)
	h := NewHistory(jobstate.NewStore(rdb, keys.DefaultPrefix), time.Hour, zerolog.Nop())
	now := time.Now()
	for at := now.Add(-2 * time.Hour); at.Before(now); at = at.Add(HistoryStepFine) {
		h.Written([]jobstate.Transition{done(&q, at, at, time.Millisecond)}, []script.Code{script.OK}, at)
	}
	h.Flush()
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

// A bucket read back is the bucket written: its counts and every histogram cell. Fields that
// are not the bucket's, or not counts, count nothing.
func TestReadBucketReadsWhatAddHistoryWrites(t *testing.T) {
	t.Parallel()
	var a Bucket
	a.Completed, a.Failed, a.Retried = 7, 2, 3
	a.Wait.Add(10 * time.Millisecond)
	a.Exec.Add(time.Second)
	a.Exec.Add(time.Second)
	now := time.Now()
	bs := addHistory(nil, BucketStart(now, HistoryStepFine), &a, now, func(string, int64) string { return "k" })
	require.Len(t, bs, len(Resolutions))
	fields := map[string]string{"x": "1", keys.HistoryCompleted + "z": "4", keys.HistoryWait + "999": "1", keys.HistoryExec + "1": "-3"}
	for _, c := range bs[0].Counts {
		fields[c.Field] = strconv.FormatInt(c.N, 10)
	}
	require.Equal(t, a, ReadBucket(fields))
}

// The keys of a read: one per bucket from since to the last whole one, since clamped to the
// span, a queue's own or all queues'.
func TestHistoryKeys(t *testing.T) {
	t.Parallel()
	r := Resolutions[0]
	now := time.Unix(1_000_000, 0)
	first, ks := HistoryKeys("p", "q", r, now.Add(-time.Minute), now)
	require.Equal(t, BucketStart(now.Add(-time.Minute), r.Step), first)
	require.Equal(t, int(time.Minute/r.Step), len(ks))
	require.Equal(t, keys.New("p", "q").History(r.Name, first), ks[0])
	first, ks = HistoryKeys("p", "", r, time.Time{}, now)
	require.Equal(t, int(r.Span/r.Step)-1, len(ks), "the span's whole buckets but the oldest, which expires next")
	require.Equal(t, keys.HistoryAll("p", r.Name, first), ks[0])
	_, ks = HistoryKeys("p", "q", r, now.Add(time.Hour), now)
	require.Len(t, ks, 1, "a since in the future reads the last whole bucket")
}
