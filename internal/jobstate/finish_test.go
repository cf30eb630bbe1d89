package jobstate_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// The completer writes chunks concurrently, so a job's start mark may reach Redis after its
// outcome. finish.lua must then leave the outcome alone and not count a refusal, while a late
// outcome (a stale worker's) is still refused and counted.
func TestFinishLateStartMarkIsIgnored(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	queue := redistest.UniqueName(t)
	q := keys.New(keys.DefaultPrefix, queue)
	job, err := c.Enqueue(ctx, queue, pipeline.Task{Type: "t", Payload: []byte("p")})
	require.NoError(t, err)
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, q.Stream(), keys.Group, "0").Err())
	_, err = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w1",
		Streams: []string{q.Stream(), ">"}, Count: 1}).Result()
	require.NoError(t, err)

	cfg := jobstate.FinishConfig{Worker: "w1", Retention: time.Hour, MinRetention: time.Minute}
	now := time.Now()
	run := func(ts ...jobstate.Transition) []script.Code {
		call := jobstate.FinishCall(cfg, ts)
		return finishCodes(t, len(ts), call.Script.Run(ctx, rdb, call.Keys, call.Args...))
	}
	done := jobstate.Done(&q, jobstate.DoneParams{Ran: jobstate.Ran{ID: job.ID, Entry: job.Entry, Attempt: 1,
		Started: now, Finished: now.Add(5 * time.Millisecond)}}).WithPayload("p")
	start := jobstate.Start(&q, jobstate.StartParams{ID: job.ID, Entry: job.Entry, Attempt: 1, At: now})

	require.Equal(t, []script.Code{applied}, run(done))
	require.Equal(t, []script.Code{refused}, run(start), "the late start mark changes nothing")
	got, err := c.Get(ctx, queue, job.ID)
	require.NoError(t, err)
	require.Equal(t, status.Completed, got.Status)
	st, err := c.Stats(ctx, queue)
	require.NoError(t, err)
	require.Zero(t, st.Refused, "a late start mark is no refusal")

	require.Equal(t, []script.Code{refused}, run(done), "a second outcome for the same entry is refused")
	st, err = c.Stats(ctx, queue)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Refused)
	require.EqualValues(t, 1, st.Completed)
}

// testBundle drives finish.lua directly: jobs are enqueued through the client and read by
// consumer "w1", as a worker would, and transitions are applied one call at a time.
type testBundle struct {
	t     *testing.T
	rdb   *redis.Client
	c     *pipeline.Client
	queue string
	q     keys.Queue
	cfg   jobstate.FinishConfig
}

func setup(t *testing.T, retention time.Duration) *testBundle {
	t.Helper()
	rdb := redistest.Client(t)
	queue := redistest.UniqueName(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	f := &testBundle{t: t, rdb: rdb, c: client, queue: queue,
		q: keys.New(keys.DefaultPrefix, queue)}
	f.cfg = jobstate.FinishConfig{Worker: "w1", Retention: retention, MinRetention: time.Minute}
	require.NoError(t, rdb.XGroupCreateMkStream(t.Context(), f.q.Stream(), keys.Group, "0").Err())
	return f
}

// read delivers the next entries to consumer w1 and returns their ids.
func (f *testBundle) read(n int) []string {
	f.t.Helper()
	res, err := f.rdb.XReadGroup(f.t.Context(), &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w1",
		Streams: []string{f.q.Stream(), ">"}, Count: int64(n), Block: -1}).Result()
	require.NoError(f.t, err)
	var ids []string
	for _, m := range res[0].Messages {
		ids = append(ids, m.ID)
	}
	return ids
}

func (f *testBundle) run(ts ...jobstate.Transition) []script.Code {
	f.t.Helper()
	call := jobstate.FinishCall(f.cfg, ts)
	return finishCodes(f.t, len(ts), call.Script.Run(f.t.Context(), f.rdb, call.Keys, call.Args...))
}

// finishCodes reads finish.lua's reply to n transitions: one code per transition.
func finishCodes(t *testing.T, n int, cmd *redis.Cmd) []script.Code {
	t.Helper()
	codes, err := jobstate.FinishReply(cmd, n)
	require.NoError(t, err)
	return codes
}

// ran is attempt 1 of job id on entry, run from at for a millisecond.
func ran(id, entry string, at time.Time) jobstate.Ran {
	return jobstate.Ran{ID: id, Entry: entry, Attempt: 1, Started: at, Finished: at.Add(time.Millisecond)}
}

// Per-transition codes of finish.lua, as the tests read them.
const (
	applied = script.OK
	refused = script.Refused
	died    = script.Died
)

func (f *testBundle) outcome(op jobstate.Op, id, entry string) jobstate.Transition {
	now := time.Now()
	switch op {
	case jobstate.OpDone:
		return jobstate.Done(&f.q, jobstate.DoneParams{Ran: ran(id, entry, now), Result: "d"})
	case jobstate.OpRetry:
		return jobstate.Retry(&f.q, jobstate.RetryParams{Ran: ran(id, entry, now), Reason: "d", RetryAt: now.Add(time.Minute)})
	case jobstate.OpDead:
		return jobstate.Dead(&f.q, jobstate.DeadParams{Ran: ran(id, entry, now), Reason: "d"})
	}
	panic("no outcome " + op.String())
}

func (f *testBundle) get(id string) *pipeline.Job {
	f.t.Helper()
	j, err := f.c.Get(f.t.Context(), f.queue, id)
	require.NoError(f.t, err)
	return j
}

func (f *testBundle) stats() *pipeline.QueueStats {
	f.t.Helper()
	s, err := f.c.Stats(f.t.Context(), f.queue)
	require.NoError(f.t, err)
	return s
}

func (f *testBundle) pending() []string {
	f.t.Helper()
	p, err := f.rdb.XPendingExt(f.t.Context(), &redis.XPendingExtArgs{Stream: f.q.Stream(), Group: keys.Group,
		Start: "-", End: "+", Count: 100}).Result()
	require.NoError(f.t, err)
	var ids []string
	for _, e := range p {
		ids = append(ids, e.ID)
	}
	return ids
}

func (f *testBundle) inStream(entry string) bool {
	f.t.Helper()
	r, err := f.rdb.XRange(f.t.Context(), f.q.Stream(), entry, entry).Result()
	require.NoError(f.t, err)
	return len(r) == 1
}

// The fence itself: an outcome naming an entry the job no longer lives on is refused while the
// job is live on a newer entry, and the job's state is untouched. (Removing `entry == h[1]`
// from finish.lua's liveness check broke no test before this one.)
func TestFinishFenceRefusesAnOldEntry(t *testing.T) {
	t.Parallel()
	for _, st := range []status.Status{status.Queued, status.InProgress} {
		for _, op := range []jobstate.Op{jobstate.OpDone, jobstate.OpRetry, jobstate.OpDead} {
			t.Run(string(st)+"/"+op.String(), func(t *testing.T) {
				t.Parallel()
				f := setup(t, time.Hour)
				job, err := f.c.Enqueue(t.Context(), f.queue, pipeline.Task{Type: "t", Payload: []byte("p")})
				require.NoError(t, err)
				old := f.read(1)[0]
				// The job was recovered: it lives on a new entry now.
				require.NoError(t, f.rdb.XAck(t.Context(), f.q.Stream(), keys.Group, old).Err())
				require.NoError(t, f.rdb.XDel(t.Context(), f.q.Stream(), old).Err())
				newer, err := f.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: f.q.Stream(), Values: []any{
					keys.EntryUUID, job.ID, keys.EntryPayload, "p", keys.EntryMetadata, "",
					keys.EntryJob, keys.FormatEntryJob(2, 5, 0, "t")}}).Result()
				require.NoError(t, err)
				require.NoError(t, f.rdb.HSet(t.Context(), f.q.Job(job.ID), keys.FieldEntry, newer).Err())
				if st == status.InProgress {
					require.Equal(t, []string{newer}, f.read(1))
					require.Equal(t, []script.Code{applied}, f.run(jobstate.Start(&f.q, jobstate.StartParams{ID: job.ID, Entry: newer, Attempt: 2, At: time.Now()})))
				}
				before := f.get(job.ID)
				require.Equal(t, st, before.Status)

				require.Equal(t, []script.Code{refused}, f.run(f.outcome(op, job.ID, old)))
				after := f.get(job.ID)
				require.Equal(t, before, after, "a refused outcome changes nothing")
				require.True(t, f.inStream(newer), "the job's live entry stays")
				require.EqualValues(t, 1, f.stats().Refused)
				require.Zero(t, f.stats().Completed+f.stats().Failed+f.stats().Retried)
			})
		}
	}
}

// A refused outcome whose job record is gone (expired, purged) still acknowledges and deletes
// its entry: nothing else would.
func TestFinishRefusedWithoutRecordDropsEntry(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	job, err := f.c.Enqueue(t.Context(), f.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	entry := f.read(1)[0]
	require.NoError(t, f.rdb.Del(t.Context(), f.q.Job(job.ID)).Err())
	require.Equal(t, []script.Code{refused}, f.run(f.outcome(jobstate.OpDone, job.ID, entry)))
	require.Empty(t, f.pending())
	require.False(t, f.inStream(entry))
	require.EqualValues(t, 1, f.stats().Refused)
}

// A refused outcome leaves alone an entry that carries another job. Stream ids are not reused
// while Redis keeps its data, but after a failover to a replica that missed writes, XADD can
// hand a new job the id a stale worker still holds; that worker's refusal must not delete the
// new job's live entry (it would stay queued forever, never pending, never recovered).
func TestFinishRefusalLeavesAnotherJobsEntry(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	stale, err := f.c.Enqueue(t.Context(), f.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	require.NoError(t, f.c.Cancel(t.Context(), f.queue, stale.ID)) // it moved on
	other, err := f.c.Enqueue(t.Context(), f.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	// The stale worker names other's entry, as if its own entry's id had been handed out again.
	require.Equal(t, []script.Code{refused}, f.run(f.outcome(jobstate.OpDone, stale.ID, other.Entry)))
	require.True(t, f.inStream(other.Entry), "another job's entry is left alone")
	require.Equal(t, status.Queued, f.get(other.ID).Status)
	require.Equal(t, []string{other.Entry}, f.read(1), "and it is still delivered")
}

// A completed job no longer names an entry: its entry is gone from the stream. Completed jobs
// kept their `entry` before, on both paths of finish.lua.
func TestFinishDoneClearsEntry(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	plain, err := f.c.Enqueue(t.Context(), f.queue, pipeline.Task{Type: "t", Payload: []byte("p")})
	require.NoError(t, err)
	noResult, err := f.c.Enqueue(t.Context(), f.queue, pipeline.Task{Type: "t", Payload: []byte("p")})
	require.NoError(t, err)
	withMeta, err := f.c.Enqueue(t.Context(), f.queue, pipeline.Task{Type: "t", Payload: []byte("p"), Metadata: map[string]string{"k": "v"}})
	require.NoError(t, err)
	entries := f.read(3)
	now := time.Now()
	fast := f.outcome(jobstate.OpDone, plain.ID, entries[0]).WithPayload("p") // the fast path: payload sent back
	fastEmpty := jobstate.Done(&f.q, jobstate.DoneParams{Ran: ran(noResult.ID, entries[1], now), Result: ""}).WithPayload("p")
	slow := f.outcome(jobstate.OpDone, withMeta.ID, entries[2])
	require.Equal(t, []script.Code{applied, applied, applied}, f.run(fast, fastEmpty, slow))
	for _, id := range []string{plain.ID, noResult.ID, withMeta.ID} {
		j := f.get(id)
		require.Equal(t, status.Completed, j.Status)
		require.Empty(t, j.Entry, "%s keeps no entry once completed", id)
		require.Equal(t, "p", string(j.Payload))
		// The retention TTL is set on both paths, near the retention.
		ttl, err := f.rdb.PTTL(t.Context(), f.q.Job(id)).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 59*time.Minute, "%s: retention TTL", id)
		require.LessOrEqual(t, ttl, time.Hour)
	}
	require.Equal(t, "v", f.get(withMeta.ID).Metadata["k"])
}

// A job that dies records when: completed_at is its time of death, also its score in the dead
// set.
func TestFinishDeadRecordsCompletedAt(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	job, err := f.c.Enqueue(t.Context(), f.queue, pipeline.Task{Type: "t"}, pipeline.WithMaxRetries(0))
	require.NoError(t, err)
	entry := f.read(1)[0]
	tr := f.outcome(jobstate.OpRetry, job.ID, entry) // out of retries: dies
	require.Equal(t, []script.Code{died}, f.run(tr))
	j := f.get(job.ID)
	require.Equal(t, status.Failed, j.Status)
	require.Equal(t, tr.FinishedAt(), j.CompletedAt)
	score, err := f.rdb.ZScore(t.Context(), f.q.Dead(), job.ID).Result()
	require.NoError(t, err)
	require.EqualValues(t, tr.FinishedAt().UnixMilli(), score)
	require.Empty(t, j.Entry)
}

// A publish that go-redis sends again after its reply was lost must not make a second job,
// even when the job finished, with no retention, before the copy arrived. Before, the copy
// found no record and enqueued the job again.
func TestEnqueueResentAfterFinish(t *testing.T) {
	t.Parallel()
	f := setup(t, pipeline.RetainNone)
	now := time.Now()
	for i, nj := range []jobstate.NewJob{
		{ID: "generated-1", Type: "t", Payload: []byte("p"), RunAt: now},
		{ID: "generated-2", Type: "t", Payload: []byte("p"), RunAt: now, UniqueKey: "u", UniqueTTL: time.Hour},
		{ID: "chosen", Type: "t", Payload: []byte("p"), RunAt: now, ChosenID: true},
	} {
		var send func() string
		if nj.Plain(now) && i == 0 {
			send = func() string {
				row, err := jobstate.NewStore(f.rdb, "").Enqueue1(t.Context(), f.q, now, &nj)
				require.NoError(t, err)
				if row.Code == script.Exists {
					return "="
				}
				return row.Entry
			}
		} else {
			call := jobstate.EnqueueCall(f.q, now, []jobstate.NewJob{nj})
			send = func() string {
				return enqueueRows(t, 1, call.Script.Run(t.Context(), f.rdb, call.Keys, call.Args...))[0]
			}
		}
		first := send()
		require.NotEqual(t, "=", first)
		entry := f.read(1)[0]
		require.Equal(t, []script.Code{applied}, f.run(f.outcome(jobstate.OpDone, nj.ID, entry)))
		require.Equal(t, "=", send(), "the copy finds the finished job")
		xlen, err := f.rdb.XLen(t.Context(), f.q.Stream()).Result()
		require.NoError(t, err)
		require.Zero(t, xlen, "nothing was enqueued twice")
		require.Equal(t, status.Completed, f.get(nj.ID).Status)
	}
	s := f.stats()
	require.EqualValues(t, 3, s.Enqueued)
	require.EqualValues(t, 3, s.Completed)
}

// An unreadable entry whose id names an existing job that lives on another entry is kept as a
// dead record of its own, under entry-<entry id>. Before, it was deleted with no record.
func TestFinishPoisonNamingAnotherJobIsKept(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	job, err := f.c.Enqueue(t.Context(), f.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	f.read(1)
	bad, err := f.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: f.q.Stream(), Values: []any{
		keys.EntryUUID, job.ID, keys.EntryPayload, "imposter"}}).Result()
	require.NoError(t, err)
	require.Equal(t, []string{bad}, f.read(1))
	now := time.Now()
	require.Equal(t, []script.Code{applied}, f.run(jobstate.Poison(&f.q, jobstate.PoisonParams{ID: job.ID, Entry: bad, At: now,
		Reason: "unreadable stream entry " + bad + ": missing conveyor field"})))
	rec := f.get("entry-" + bad)
	require.Equal(t, status.Failed, rec.Status)
	require.Equal(t, "imposter", string(rec.Payload))
	require.Empty(t, rec.Type)
	require.Equal(t, status.Queued, f.get(job.ID).Status, "the named job is untouched")
	require.False(t, f.inStream(bad))
	require.EqualValues(t, 1, f.stats().Dead)
}

// Cancel refuses a job that already ended and leaves it untouched; a canceled job with no
// retention leaves a tombstone for the shortest retention, like a completed one.
func TestCancelFinishedAndTombstone(t *testing.T) {
	t.Parallel()
	f := setup(t, time.Hour)
	done, err := f.c.Enqueue(t.Context(), f.queue, pipeline.Task{Type: "t"})
	require.NoError(t, err)
	dead, err := f.c.Enqueue(t.Context(), f.queue, pipeline.Task{Type: "t"}, pipeline.WithMaxRetries(0))
	require.NoError(t, err)
	entries := f.read(2)
	require.Equal(t, []script.Code{applied, applied}, f.run(f.outcome(jobstate.OpDone, done.ID, entries[0]), f.outcome(jobstate.OpDead, dead.ID, entries[1])))
	for _, id := range []string{done.ID, dead.ID} {
		before := f.get(id)
		require.ErrorIs(t, f.c.Cancel(t.Context(), f.queue, id), pipeline.ErrNotCancelable)
		require.Equal(t, before, f.get(id), "a refused cancel changes nothing")
	}
	require.Zero(t, f.stats().Canceled)

	c, err := pipeline.NewClient(f.rdb, pipeline.ClientConfig{Retention: pipeline.RetainNone, MinRetention: time.Minute})
	require.NoError(t, err)
	gone, err := c.Enqueue(t.Context(), f.queue, pipeline.Task{Type: "t", Payload: []byte("big")})
	require.NoError(t, err)
	require.NoError(t, c.Cancel(t.Context(), f.queue, gone.ID))
	fields, err := f.rdb.HGetAll(t.Context(), f.q.Job(gone.ID)).Result()
	require.NoError(t, err)
	require.Len(t, fields, 2, "only a tombstone is left: %v", fields)
	require.Equal(t, string(status.Canceled), fields[keys.FieldStatus])
	ttl, err := f.rdb.PTTL(t.Context(), f.q.Job(gone.ID)).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 50*time.Second)
}
