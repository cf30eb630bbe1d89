// Package storetest is the conformance suite of jobstate.Backend: what pipeline, delayed and
// recovery rely on a store to do, checked through the interface alone. Run it against every
// Backend (the Redis store on a standalone server and on a cluster; a wrapper that fails on
// demand) so that a store that passes is one pipeline can run on.
//
// River's riverdrivertest plays this part for its drivers; this suite is smaller, one test per
// contract a caller leans on, not per method.
package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/status"
)

// Run runs the suite. newStore returns a store over a prefix no other test uses, whose
// Client is the Redis the store writes to: the suite hands entries out on it as the stream
// transport would.
func Run(t *testing.T, newStore func(t *testing.T) jobstate.Backend) {
	t.Run("EnqueueGetStatus", func(t *testing.T) { testEnqueueGetStatus(t, newStore(t)) })
	t.Run("PendingBeforeExec", func(t *testing.T) { testPendingBeforeExec(t, newStore(t)) })
	t.Run("FinishOnce", func(t *testing.T) { testFinishOnce(t, newStore(t)) })
	t.Run("FinishKeepsLogs", func(t *testing.T) { testFinishKeepsLogs(t, newStore(t)) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, newStore(t)) })
	t.Run("ScheduledRunNow", func(t *testing.T) { testScheduledRunNow(t, newStore(t)) })
	t.Run("QueueRegistry", func(t *testing.T) { testQueueRegistry(t, newStore(t)) })
	t.Run("PartitionCounts", func(t *testing.T) { testPartitionCounts(t, newStore(t)) })
	t.Run("Beats", func(t *testing.T) { testBeats(t, newStore(t)) })
	t.Run("Sightings", func(t *testing.T) { testSightings(t, newStore(t)) })
	t.Run("History", func(t *testing.T) { testHistory(t, newStore(t)) })
}

// enqueue creates jobs in q through a Batch and fails the test unless each was created.
func enqueue(t *testing.T, s jobstate.Backend, q keys.Queue, now time.Time, jobs ...jobstate.NewJob) []jobstate.Created {
	t.Helper()
	b := s.Batch()
	p := b.Enqueue(q, now, jobs)
	require.NoError(t, b.Exec(t.Context()))
	rows, err := p.Result()
	require.NoError(t, err)
	require.Len(t, rows, len(jobs))
	for _, r := range rows {
		require.Equal(t, script.OK, r.Code)
	}
	return rows
}

func requireStatus(t *testing.T, s jobstate.Backend, q keys.Queue, id string, want status.Status) {
	t.Helper()
	st, err := s.Status(t.Context(), q, id)
	require.NoError(t, err)
	require.Equal(t, string(want), st)
}

// A job enqueued is there to read, queued, and counted; a job never enqueued is ErrNoJob.
func testEnqueueGetStatus(t *testing.T, s jobstate.Backend) {
	ctx := t.Context()
	q := keys.New(s.Prefix(), "q")
	now := time.Now()
	rows := enqueue(t, s, q, now, jobstate.NewJob{ID: "a", Type: "t", Payload: []byte("pa")},
		jobstate.NewJob{ID: "b", Type: "t"})
	require.NotEmpty(t, rows[0].Entry)

	flat, found, err := s.Get(ctx, q, "a")
	require.NoError(t, err)
	require.True(t, found)
	rec := jobstate.DecodeRecord(flat)
	require.Equal(t, "t", rec.Type)
	require.Equal(t, []byte("pa"), rec.Payload)
	requireStatus(t, s, q, "a", status.Queued)

	_, err = s.Status(ctx, q, "none")
	require.ErrorIs(t, err, jobstate.ErrNoJob)
	_, found, err = s.Get(ctx, q, "none")
	require.NoError(t, err)
	require.False(t, found)

	st, err := s.ReadStats(ctx, []keys.Queue{q})
	require.NoError(t, err)
	require.EqualValues(t, 2, st[0].Queued)
	require.EqualValues(t, 2, st[0].Enqueued)
}

// A call of a batch has no answer before the batch runs.
func testPendingBeforeExec(t *testing.T, s jobstate.Backend) {
	q := keys.New(s.Prefix(), "q")
	p := s.Batch().Get(q, "a")
	_, err := p.Result()
	require.ErrorIs(t, err, jobstate.ErrNotRun)
}

// deliver hands q's next entry to consumer, as the stream transport does.
func deliver(t *testing.T, s jobstate.Backend, q keys.Queue, consumer string) redis.XMessage {
	t.Helper()
	ctx := t.Context()
	rdb := s.Client()
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, q.Stream(), keys.Group, "0").Err())
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: consumer,
		Streams: []string{q.Stream(), ">"}, Count: 1, Block: -1}).Result()
	require.NoError(t, err)
	return res[0].Messages[0]
}

// An outcome is applied once: the same outcome sent again (a retried write whose first try
// went through) is refused, and the job keeps the first.
func testFinishOnce(t *testing.T, s jobstate.Backend) {
	ctx := t.Context()
	q := keys.New(s.Prefix(), "q")
	now := time.Now()
	enqueue(t, s, q, now, jobstate.NewJob{ID: "a", Type: "t"})
	entry := deliver(t, s, q, "w1")
	require.NoError(t, script.Load(ctx, s.Client(), jobstate.WorkerScripts()...))

	ran := jobstate.Ran{ID: "a", Entry: entry.ID, Attempt: 1, Started: now, Finished: now}
	cfg := jobstate.FinishConfig{Worker: "w1", Retention: time.Hour, MinRetention: time.Minute}
	chunk := []jobstate.Transition{jobstate.Done(&q, jobstate.DoneParams{Ran: ran, Result: "r"})}
	first := s.Finish(ctx, jobstate.FinishParams{Config: cfg, Chunks: [][]jobstate.Transition{chunk}})
	require.Len(t, first, 1)
	require.NoError(t, first[0].Err)
	require.Equal(t, []script.Code{script.OK}, first[0].Codes)
	requireStatus(t, s, q, "a", status.Completed)

	again := s.Finish(ctx, jobstate.FinishParams{Config: cfg, Chunks: [][]jobstate.Transition{chunk}})
	require.NoError(t, again[0].Err)
	require.Equal(t, []script.Code{script.Refused}, again[0].Codes)
	st, err := s.ReadStats(ctx, []keys.Queue{q})
	require.NoError(t, err)
	require.EqualValues(t, 1, st[0].Completed)
}

// An outcome's lines are kept with the job, read back by attempt with the cut count; a
// refused outcome's are not.
func testFinishKeepsLogs(t *testing.T, s jobstate.Backend) {
	ctx := t.Context()
	q := keys.New(s.Prefix(), "q")
	now := time.Now()
	enqueue(t, s, q, now, jobstate.NewJob{ID: "a", Type: "t"}, jobstate.NewJob{ID: "b", Type: "t"},
		jobstate.NewJob{ID: "c", Type: "t"}, jobstate.NewJob{ID: "d", Type: "t"})
	rdb := s.Client()
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, q.Stream(), keys.Group, "0").Err())
	read, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w1",
		Streams: []string{q.Stream(), ">"}, Count: 4, Block: -1}).Result()
	require.NoError(t, err)
	entries := read[0].Messages
	require.Len(t, entries, 4)
	require.NoError(t, script.Load(ctx, s.Client(), jobstate.WorkerScripts()...))
	none, err := s.Logs(ctx, q, "a")
	require.NoError(t, err)
	require.Empty(t, none)

	cfg := jobstate.FinishConfig{Worker: "w1", Retention: time.Hour, MinRetention: time.Minute}
	done := func(id string, entry string) jobstate.Transition {
		return jobstate.Done(&q, jobstate.DoneParams{Ran: jobstate.Ran{ID: id, Entry: entry, Attempt: 1, Started: now, Finished: now}})
	}
	// One call with lines for a and none for b (11 values an item), then a call of c and d,
	// which logged nothing (10 values an item): each item is read at its place either way.
	a := done("a", entries[0].ID).WithLogs(jobstate.EncodeLogs(3, []string{"x", "y"}))
	for _, want := range []script.Code{script.OK, script.Refused} {
		res := s.Finish(ctx, jobstate.FinishParams{Config: cfg, Chunks: [][]jobstate.Transition{{a, done("b", entries[1].ID)}}})
		require.NoError(t, res[0].Err)
		require.Equal(t, []script.Code{want, want}, res[0].Codes)
	}
	res := s.Finish(ctx, jobstate.FinishParams{Config: cfg, Chunks: [][]jobstate.Transition{{done("c", entries[2].ID), done("d", entries[3].ID)}}})
	require.NoError(t, res[0].Err)
	require.Equal(t, []script.Code{script.OK, script.OK}, res[0].Codes)
	for _, id := range []string{"a", "b", "c", "d"} {
		requireStatus(t, s, q, id, status.Completed)
	}
	logs, err := s.Logs(ctx, q, "a")
	require.NoError(t, err)
	require.Len(t, logs, 1, "the refused outcome wrote no lines")
	require.Equal(t, jobstate.AttemptLogs{Attempt: 1, Outcome: string(status.Completed), Ended: time.UnixMilli(now.UnixMilli()),
		Cut: 3, Lines: []string{"x", "y"}}, logs[0])
	for _, id := range []string{"b", "c", "d"} {
		l, err := s.Logs(ctx, q, id)
		require.NoError(t, err)
		require.Empty(t, l, "job %s logged nothing", id)
	}
}

// A queued job canceled is canceled, and canceling it again finds it so.
func testCancel(t *testing.T, s jobstate.Backend) {
	ctx := t.Context()
	q := keys.New(s.Prefix(), "q")
	now := time.Now()
	enqueue(t, s, q, now, jobstate.NewJob{ID: "a", Type: "t"})
	p := jobstate.CancelParams{ID: "a", Now: now, Retention: time.Hour, Events: s.Events(ctx)}
	row, err := s.Cancel(ctx, q, p)
	require.NoError(t, err)
	require.Equal(t, script.OK, row.Code)
	requireStatus(t, s, q, "a", status.Canceled)
	row, err = s.Cancel(ctx, q, p)
	require.NoError(t, err)
	require.NotEqual(t, script.OK, row.Code, "a second cancel changes nothing")
}

// A job due later waits in the scheduled set: a promotion leaves it, running it now queues it.
func testScheduledRunNow(t *testing.T, s jobstate.Backend) {
	ctx := t.Context()
	q := keys.New(s.Prefix(), "q")
	now := time.Now()
	enqueue(t, s, q, now, jobstate.NewJob{ID: "a", Type: "t", RunAt: now.Add(time.Hour)})
	requireStatus(t, s, q, "a", status.Scheduled)
	page, err := s.ScheduledPage(ctx, q, nil, 10)
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, "a", page[0].Member)

	p, err := s.Promote(ctx, q, jobstate.PromoteParams{Limit: 10, Events: s.Events(ctx)})
	require.NoError(t, err)
	require.Zero(t, p.Moved, "not due")
	row, err := s.RunNow(ctx, q, jobstate.RunNowParams{ID: "a", Events: s.Events(ctx)})
	require.NoError(t, err)
	require.Equal(t, script.OK, row.Code)
	requireStatus(t, s, q, "a", status.Queued)
}

// The known queues are bounded: a new queue past the bound is refused, a known one passes,
// and a forgotten one is unknown again.
func testQueueRegistry(t *testing.T, s jobstate.Backend) {
	ctx := t.Context()
	added, err := s.AddQueue(ctx, jobstate.AddQueueParams{Queue: "a", MaxQueues: 1})
	require.NoError(t, err)
	require.Equal(t, jobstate.QueueKnown, added)
	added, err = s.AddQueue(ctx, jobstate.AddQueueParams{Queue: "b", MaxQueues: 1})
	require.NoError(t, err)
	require.Equal(t, jobstate.QueuesFull, added)
	added, err = s.AddQueue(ctx, jobstate.AddQueueParams{Queue: "a", MaxQueues: 1})
	require.NoError(t, err)
	require.Equal(t, jobstate.QueueKnown, added)
	added, err = s.AddQueue(ctx, jobstate.AddQueueParams{Queue: "c", MaxQueues: 5, KnownOnly: true})
	require.NoError(t, err)
	require.Equal(t, jobstate.QueueUnknown, added)

	names, _, err := s.KnownQueues(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, names)
	require.NoError(t, s.ForgetQueue(ctx, "a"))
	known, err := s.IsKnownQueue(ctx, "a")
	require.NoError(t, err)
	require.False(t, known)
}

// The partition counts come back in the order asked, 1 for a queue without one, and a stored
// count that cannot be used is a *jobstate.CountError.
func testPartitionCounts(t *testing.T, s jobstate.Backend) {
	ctx := t.Context()
	require.NoError(t, jobstate.WritePartitions(ctx, s.Client(), s.Prefix(), "wide", 4))
	counts, err := s.PartitionCounts(ctx, []string{"plain", "wide"})
	require.NoError(t, err)
	require.Equal(t, []int{1, 4}, counts)

	require.NoError(t, s.Client().HSet(ctx, keys.Partitions(s.Prefix()), "bad", "zero").Err())
	_, err = s.PartitionCounts(ctx, []string{"wide", "bad"})
	var ce *jobstate.CountError
	require.ErrorAs(t, err, &ce)
}

// A worker's heartbeat is listed with the time it has left, and gone once it ends.
func testBeats(t *testing.T, s jobstate.Backend) {
	ctx := t.Context()
	rec, err := json.Marshal(map[string]string{"name": "w1"})
	require.NoError(t, err)
	now := time.Now()
	require.NoError(t, s.WriteBeat(ctx, jobstate.BeatParams{Name: "w1", Record: rec, TTL: time.Minute,
		Now: now, PruneBefore: now.Add(-time.Hour)}))
	beats, err := s.Beats(ctx)
	require.NoError(t, err)
	require.Len(t, beats, 1)
	require.Equal(t, "w1", beats[0].Name)
	require.JSONEq(t, string(rec), beats[0].Record)
	require.Positive(t, beats[0].Left)

	require.NoError(t, s.EndBeat(ctx, "w1"))
	beats, err = s.Beats(ctx)
	require.NoError(t, err)
	require.Empty(t, beats)
}

// A beat marks its queues and types seen by Redis's clock; the marks outlive the record, and a
// beat drops those older than SeenFor.
func testSightings(t *testing.T, s jobstate.Backend) {
	ctx := t.Context()
	seen, err := s.Sightings(ctx, time.Hour)
	require.NoError(t, err)
	require.Empty(t, seen.Queues)
	require.Empty(t, seen.Types)

	stale := float64(seen.Now.Add(-2 * time.Hour).UnixMilli())
	require.NoError(t, s.Client().ZAdd(ctx, keys.SeenQueues(s.Prefix()), redis.Z{Score: stale, Member: "old"}).Err())
	now := time.Now()
	require.NoError(t, s.WriteBeat(ctx, jobstate.BeatParams{Name: "w1", Record: []byte(`{}`), TTL: time.Minute, Now: now,
		PruneBefore: now.Add(-time.Hour), Queues: []string{"emails", "default"}, Types: []string{"echo"}, SeenFor: time.Hour}))
	require.NoError(t, s.EndBeat(ctx, "w1"))
	seen, err = s.Sightings(ctx, time.Hour)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"emails", "default"}, mapKeys(seen.Queues))
	require.Equal(t, []string{"echo"}, mapKeys(seen.Types))
	require.False(t, seen.Queues["emails"].After(seen.Now), "a sighting is stamped by Redis's clock")
	n, err := s.Client().ZCard(ctx, keys.SeenQueues(s.Prefix())).Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "the beat dropped the sighting older than SeenFor")
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// What is added to a history bucket is read back, summed; a bucket never written reads empty.
func testHistory(t *testing.T, s jobstate.Backend) {
	ctx := t.Context()
	q := keys.New(s.Prefix(), "q")
	key, other := q.History("1m", 60), q.History("1m", 120)
	b := jobstate.HistoryBucket{Key: key, ExpireAt: time.Now().Add(time.Hour),
		Counts: []jobstate.HistoryCount{{Field: keys.HistoryCompleted, N: 2}, {Field: keys.HistoryFailed, N: 1}}}
	require.NoError(t, s.AddHistory(ctx, []jobstate.HistoryBucket{b, b}))
	got, err := s.ReadHistory(ctx, []string{key, other})
	require.NoError(t, err)
	require.Equal(t, map[string]string{keys.HistoryCompleted: "4", keys.HistoryFailed: "2"}, got[0])
	require.Empty(t, got[1])
}
