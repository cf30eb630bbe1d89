package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/events"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/recovery"
	"github.com/conveyorq/conveyor/status"
)

// The visibility timeout of the tests' recoverers, and the idle time given to entries whose
// worker is meant to look dead.
const (
	testVisibility = 10 * time.Second
	deadIdle       = time.Minute
)

// testBundle is what a test of the Recoverer needs around it (the package's one test bundle,
// after river's maintenance tests): the shared server's client, a Client that publishes to the
// test's queue, the queue and its keys.
type testBundle struct {
	rdb    *redis.Client
	client *pipeline.Client
	queue  string
	q      keys.Queue
}

// setupOpts changes what setup makes; the zero value is the usual test.
type setupOpts struct {
	cfg recovery.Config // the Recoverer's (see testBundle.recoverer for its defaults)
}

// setup returns a Recoverer of a queue of the test's own (made, not started; see
// testBundle.recoverer) and the bundle around it.
func setup(t *testing.T, opts ...setupOpts) (*recovery.Recoverer, *testBundle) {
	t.Helper()
	var o setupOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	rdb := redistest.Client(t)
	queue := redistest.UniqueName(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	b := &testBundle{
		rdb:    rdb,
		client: client,
		queue:  queue,
		q:      keys.New(keys.DefaultPrefix, queue),
	}
	return b.recoverer(t, o.cfg), b
}

// recoverer returns a Recoverer of b's queue that skips the trust in its own observation of
// Redis (see trust_test.go for that), so that one scan recovers what is idle.
func (b *testBundle) recoverer(t *testing.T, cfg recovery.Config) *recovery.Recoverer {
	t.Helper()
	cfg.Queue = b.queue
	if cfg.VisibilityTimeout == 0 {
		cfg.VisibilityTimeout = testVisibility
	}
	r, err := recovery.NewRecoverer(b.rdb, cfg)
	require.NoError(t, err)
	return r.SkipTrust()
}

func (b *testBundle) enqueue(t *testing.T, opts ...pipeline.Option) *pipeline.Job {
	t.Helper()
	j, err := b.client.Enqueue(t.Context(), b.queue,
		pipeline.Task{Type: "test", Payload: []byte("payload of " + redistest.UniqueName(t)),
			Metadata: map[string]string{"k": "v"}}, opts...)
	require.NoError(t, err)
	require.Equal(t, status.Queued, j.Status)
	return j
}

func (b *testBundle) enqueueN(t *testing.T, n int) []*pipeline.Job {
	t.Helper()
	tasks := make([]pipeline.Task, n)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "test", Payload: fmt.Appendf(nil, "payload %d", i)}
	}
	jobs, err := b.client.EnqueueBatch(t.Context(), b.queue, tasks)
	require.NoError(t, err)
	return jobs
}

// deliver reads up to n new entries as consumer, as a worker would, and returns their ids.
func (b *testBundle) deliver(t *testing.T, consumer string, n int) []string {
	t.Helper()
	ctx := t.Context()
	err := b.rdb.XGroupCreateMkStream(ctx, b.q.Stream(), keys.Group, "0").Err()
	if err != nil && !rediserr.IsGroupExists(err) {
		require.NoError(t, err)
	}
	streams, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: keys.Group, Consumer: consumer, Streams: []string{b.q.Stream(), ">"},
		Count: int64(n), Block: -1,
	}).Result()
	require.NoError(t, err)
	var ids []string
	for _, s := range streams {
		for _, m := range s.Messages {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// makeIdle sets the idle time of pending entries, as if their worker stopped renewing that long ago.
func (b *testBundle) makeIdle(t *testing.T, consumer string, idle time.Duration, ids ...string) {
	t.Helper()
	args := []any{"XCLAIM", b.q.Stream(), keys.Group, consumer, 0}
	for _, id := range ids {
		args = append(args, id)
	}
	args = append(args, "IDLE", idle.Milliseconds(), "JUSTID")
	claimed, err := b.rdb.Do(t.Context(), args...).StringSlice()
	require.NoError(t, err)
	require.Len(t, claimed, len(ids))
}

func (b *testBundle) get(t *testing.T, id string) *pipeline.Job {
	t.Helper()
	j, err := b.client.Get(t.Context(), b.queue, id)
	require.NoError(t, err)
	return j
}

func (b *testBundle) pending(t *testing.T) []redis.XPendingExt {
	t.Helper()
	p, err := b.rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{
		Stream: b.q.Stream(), Group: keys.Group, Start: "-", End: "+", Count: 100000,
	}).Result()
	if rediserr.IsNoStream(err) {
		return nil
	}
	require.NoError(t, err)
	return p
}

func (b *testBundle) entry(t *testing.T, id string) map[string]any {
	t.Helper()
	msgs, err := b.rdb.XRange(t.Context(), b.q.Stream(), id, id).Result()
	require.NoError(t, err)
	if len(msgs) == 0 {
		return nil
	}
	return msgs[0].Values
}

func (b *testBundle) xlen(t *testing.T) int64 {
	t.Helper()
	n, err := b.rdb.XLen(t.Context(), b.q.Stream()).Result()
	require.NoError(t, err)
	return n
}

func (b *testBundle) stat(t *testing.T, name string) int {
	t.Helper()
	v, err := b.rdb.HGet(t.Context(), b.q.Stats(), name).Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	require.NoError(t, err)
	n, err := strconv.Atoi(v)
	require.NoError(t, err)
	return n
}

func (b *testBundle) inDead(t *testing.T, id string) bool {
	t.Helper()
	err := b.rdb.ZScore(t.Context(), b.q.Dead(), id).Err()
	if errors.Is(err, redis.Nil) {
		return false
	}
	require.NoError(t, err)
	return true
}

// idleEntry is the entry a case left (idle, or not yet) for a recoverer to find, and its job.
type idleEntry struct {
	job      *pipeline.Job // the job whose entry went idle, if any
	entry    string        // the idle (or not) entry
	consumer string        // the consumer holding it
	record   string        // the dead record's id, for unreadable entries
	xlen     int64         // XLEN before the scan
}

// staleEntry adds an entry for f's job that its record does not name, and delivers it to f's
// consumer, idle for deadIdle: what a worker that lost its job leaves behind.
func (b *testBundle) staleEntry(t *testing.T, f idleEntry) string {
	t.Helper()
	e, err := b.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: b.q.Stream(),
		Values: []any{keys.EntryUUID, f.job.ID, keys.EntryPayload, "p", keys.EntryMetadata, "",
			keys.EntryJob, keys.FormatEntryJob(1, 5, 0, "test")}}).Result()
	require.NoError(t, err)
	require.Equal(t, []string{e}, b.deliver(t, f.consumer, 1))
	b.makeIdle(t, f.consumer, deadIdle, e)
	return e
}

// seedOne seeds a job in status through the real scripts (jobtest), held by a lost consumer
// whose entry has been idle for idle.
func seedOne(t *testing.T, b *testBundle, st status.Status, idle time.Duration) idleEntry {
	t.Helper()
	consumer := "lost-" + redistest.UniqueName(t)
	s := jobtest.Seed(t, b.rdb, b.queue, st, jobtest.Opts{Consumer: consumer, Result: "done",
		Task: pipeline.Task{Type: "test", Payload: []byte("payload of " + consumer), Metadata: map[string]string{"k": "v"}}})
	f := idleEntry{job: s.Job, consumer: consumer, entry: s.Entry, xlen: b.xlen(t)}
	if idle > 0 {
		b.makeIdle(t, f.consumer, idle, f.entry)
	}
	return f
}

// deliverOne enqueues a job and delivers its entry to a consumer that then goes quiet.
func deliverOne(t *testing.T, b *testBundle, idle time.Duration, opts ...pipeline.Option) idleEntry {
	t.Helper()
	j := b.enqueue(t, opts...)
	f := idleEntry{job: j, consumer: "lost-" + redistest.UniqueName(t)}
	ids := b.deliver(t, f.consumer, 1)
	require.Equal(t, []string{j.Entry}, ids)
	f.entry = ids[0]
	if idle > 0 {
		b.makeIdle(t, f.consumer, idle, f.entry)
	}
	f.xlen = b.xlen(t)
	return f
}

// requireGone checks that entry is neither in the stream nor pending.
func requireGone(t *testing.T, b *testBundle, entry string) {
	t.Helper()
	require.Nil(t, b.entry(t, entry), "entry %s still in the stream", entry)
	for _, p := range b.pending(t) {
		require.NotEqual(t, entry, p.ID, "entry %s still pending", entry)
	}
}

// requireRequeued checks that f's job was put back as a new entry after its lost attempt n.
func requireRequeued(t *testing.T, b *testBundle, f idleEntry, n int) {
	t.Helper()
	j := b.get(t, f.job.ID)
	require.Equal(t, status.Queued, j.Status)
	require.NotEmpty(t, j.Entry)
	require.NotEqual(t, f.entry, j.Entry, "no new entry")
	require.Equal(t, n, j.Attempt, "the lost attempt is not counted")
	require.Contains(t, j.LastError, f.consumer, "last_error does not name the lost worker")
	require.Contains(t, j.LastError, fmt.Sprintf("attempt %d lost", n))
	require.Equal(t, f.job.Payload, j.Payload)
	require.Equal(t, f.job.Metadata, j.Metadata)
	require.Greater(t, j.Version, f.job.Version)
	requireGone(t, b, f.entry)
	require.Equal(t, f.xlen, b.xlen(t), "XLEN changed")
	e := b.entry(t, j.Entry)
	require.NotNil(t, e, "the new entry is not in the stream")
	require.Equal(t, f.job.ID, e[keys.EntryUUID])
	attempt, _, _, typ, ok := keys.ParseEntryJob(e[keys.EntryJob].(string))
	require.True(t, ok)
	require.Equal(t, n+1, attempt)
	require.Equal(t, "test", typ)
	require.Equal(t, string(f.job.Payload), e[keys.EntryPayload])
}

// requireDead checks that f's job is in the dead set after its lost attempt n.
func requireDead(t *testing.T, b *testBundle, f idleEntry, n int) {
	t.Helper()
	j := b.get(t, f.job.ID)
	require.Equal(t, status.Failed, j.Status)
	require.Empty(t, j.Entry)
	require.Equal(t, n, j.Attempt)
	require.Contains(t, j.LastError, f.consumer)
	require.Contains(t, j.LastError, "no retries left")
	require.Equal(t, f.job.Payload, j.Payload, "the payload was not kept")
	require.Equal(t, f.job.Metadata, j.Metadata, "the metadata was not kept")
	require.False(t, j.CompletedAt.IsZero())
	require.True(t, b.inDead(t, f.job.ID))
	requireGone(t, b, f.entry)
	require.Zero(t, b.xlen(t))
	flat, err := b.rdb.HGetAll(t.Context(), b.q.Job(f.job.ID)).Result()
	require.NoError(t, err)
	require.Equal(t, string(f.job.Payload), flat[keys.FieldPayload], "the payload is not in the hash")
}

// requireUntouched checks that f's job and entry are as the setup left them.
func requireUntouched(t *testing.T, b *testBundle, f idleEntry) {
	t.Helper()
	j := b.get(t, f.job.ID)
	require.Equal(t, f.entry, j.Entry)
	require.Equal(t, f.job.Version, j.Version)
	require.Empty(t, j.LastError)
	require.NotNil(t, b.entry(t, f.entry))
	p := b.pending(t)
	require.Len(t, p, 1)
	require.Equal(t, f.entry, p[0].ID)
	require.Equal(t, f.xlen, b.xlen(t))
}

func TestRecovererRunOnce(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, b *testBundle) idleEntry
		want  recovery.Result
		check func(t *testing.T, b *testBundle, f idleEntry)
	}{
		{
			name: "QueuedJobRequeued",
			setup: func(t *testing.T, b *testBundle) idleEntry {
				return deliverOne(t, b, deadIdle)
			},
			want: recovery.Result{Requeued: 1},
			check: func(t *testing.T, b *testBundle, f idleEntry) {
				requireRequeued(t, b, f, 1)
				require.Equal(t, 1, b.stat(t, keys.StatRecovered))
				require.Zero(t, b.stat(t, keys.StatFailed))
			},
		},
		{
			name: "InProgressJobRequeued",
			setup: func(t *testing.T, b *testBundle) idleEntry {
				return seedOne(t, b, status.InProgress, deadIdle)
			},
			want: recovery.Result{Requeued: 1},
			check: func(t *testing.T, b *testBundle, f idleEntry) {
				requireRequeued(t, b, f, 1)
				require.Equal(t, 1, b.stat(t, keys.StatRecovered))
			},
		},
		{
			name: "NoRetriesGoesDead",
			setup: func(t *testing.T, b *testBundle) idleEntry {
				return deliverOne(t, b, deadIdle, pipeline.WithMaxRetries(0))
			},
			want: recovery.Result{Dead: 1},
			check: func(t *testing.T, b *testBundle, f idleEntry) {
				requireDead(t, b, f, 1)
				require.Equal(t, 1, b.stat(t, keys.StatDeadByRecovery))
				require.Equal(t, 1, b.stat(t, keys.StatFailed))
				require.Zero(t, b.stat(t, keys.StatRecovered))
			},
		},
		{
			// A job that takes down every worker that runs it: each lost attempt counts, and
			// after max_retries+1 of them it ends in the dead set instead of looping.
			name: "AttemptAtMaxGoesDead",
			setup: func(t *testing.T, b *testBundle) idleEntry {
				f := deliverOne(t, b, deadIdle, pipeline.WithMaxRetries(2))
				r := b.recoverer(t, recovery.Config{})
				for n := 1; n <= 2; n++ {
					res, ran, err := r.RunOnce(t.Context())
					require.NoError(t, err)
					require.True(t, ran)
					require.Equal(t, recovery.Result{Requeued: 1}, res)
					requireRequeued(t, b, f, n)
					f.entry = b.get(t, f.job.ID).Entry
					require.Equal(t, []string{f.entry}, b.deliver(t, f.consumer, 1))
					b.makeIdle(t, f.consumer, deadIdle, f.entry)
				}
				return f
			},
			want: recovery.Result{Dead: 1},
			check: func(t *testing.T, b *testBundle, f idleEntry) {
				requireDead(t, b, f, 3)
				require.Contains(t, b.get(t, f.job.ID).LastError, "attempt 3 lost")
				require.Equal(t, 2, b.stat(t, keys.StatRecovered))
				require.Equal(t, 1, b.stat(t, keys.StatDeadByRecovery))
				require.Equal(t, 1, b.stat(t, keys.StatFailed))
			},
		},
		{
			name: "NotIdleLongEnoughLeftAlone",
			setup: func(t *testing.T, b *testBundle) idleEntry {
				f := deliverOne(t, b, 0)
				b.makeIdle(t, f.consumer, testVisibility-2*time.Second, f.entry)
				return f
			},
			want: recovery.Result{},
			check: func(t *testing.T, b *testBundle, f idleEntry) {
				requireUntouched(t, b, f)
				require.Zero(t, b.stat(t, keys.StatRecovered))
			},
		},
		{
			name: "CompletedJobDropped",
			setup: func(t *testing.T, b *testBundle) idleEntry {
				// A stale entry of a job that completed (on another entry), pending for a
				// lost consumer.
				f := seedOne(t, b, status.Completed, 0)
				f.entry = b.staleEntry(t, f)
				return f
			},
			want: recovery.Result{Dropped: 1},
			check: func(t *testing.T, b *testBundle, f idleEntry) {
				requireGone(t, b, f.entry)
				j := b.get(t, f.job.ID)
				require.Equal(t, status.Completed, j.Status)
				require.Equal(t, "done", string(j.Result))
				require.Empty(t, j.LastError)
				require.Zero(t, b.xlen(t))
				require.Zero(t, b.stat(t, keys.StatRecovered))
			},
		},
		{
			name: "MovedOnJobDropped",
			setup: func(t *testing.T, b *testBundle) idleEntry {
				f := deliverOne(t, b, deadIdle)
				// The job now rides on another entry (it was put back meanwhile).
				other, err := b.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: b.q.Stream(),
					Values: []any{keys.EntryUUID, f.job.ID, keys.EntryPayload, "p", keys.EntryMetadata, "",
						keys.EntryJob, keys.FormatEntryJob(2, 5, 0, "test")},
				}).Result()
				require.NoError(t, err)
				require.NoError(t, b.rdb.HSet(t.Context(), b.q.Job(f.job.ID), keys.FieldEntry, other).Err())
				f.record = other
				f.xlen = b.xlen(t)
				return f
			},
			want: recovery.Result{Dropped: 1},
			check: func(t *testing.T, b *testBundle, f idleEntry) {
				requireGone(t, b, f.entry)
				j := b.get(t, f.job.ID)
				require.Equal(t, status.Queued, j.Status)
				require.Equal(t, f.record, j.Entry)
				require.Empty(t, j.LastError)
				require.Equal(t, int64(1), b.xlen(t))
				require.NotNil(t, b.entry(t, f.record))
			},
		},
		{
			name: "UnreadableEntryBecomesDeadRecord",
			setup: func(t *testing.T, b *testBundle) idleEntry {
				f := idleEntry{consumer: "lost-" + redistest.UniqueName(t)}
				var err error
				f.entry, err = b.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: b.q.Stream(),
					Values: []any{"foo", "bar", keys.EntryJob, keys.FormatEntryJob(1, 0, 0, "oops")}}).Result()
				require.NoError(t, err)
				require.Equal(t, []string{f.entry}, b.deliver(t, f.consumer, 1))
				b.makeIdle(t, f.consumer, deadIdle, f.entry)
				f.record = "entry-" + f.entry
				return f
			},
			want: recovery.Result{Poison: 1},
			check: func(t *testing.T, b *testBundle, f idleEntry) {
				requireGone(t, b, f.entry)
				require.Zero(t, b.xlen(t))
				require.True(t, b.inDead(t, f.record))
				j := b.get(t, f.record)
				require.Equal(t, status.Failed, j.Status)
				require.Equal(t, "oops", j.Type)
				require.Contains(t, j.LastError, f.entry)
				require.Contains(t, j.LastError, keys.EntryUUID)
				require.Empty(t, j.Payload, "the entry had no payload of its own")
				require.Equal(t, 0, j.MaxRetries)
				require.Equal(t, 1, b.stat(t, keys.StatPoison))
				require.Equal(t, 1, b.stat(t, keys.StatFailed))
			},
		},
		{
			name: "EntryWithoutJobBecomesDeadRecord",
			setup: func(t *testing.T, b *testBundle) idleEntry {
				f := idleEntry{consumer: "lost-" + redistest.UniqueName(t), record: "ghost-" + redistest.UniqueName(t)}
				var err error
				f.entry, err = b.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: b.q.Stream(),
					Values: []any{keys.EntryUUID, f.record, keys.EntryPayload, "boo", keys.EntryMetadata, "",
						keys.EntryJob, keys.FormatEntryJob(1, 5, 0, "test")},
				}).Result()
				require.NoError(t, err)
				require.Equal(t, []string{f.entry}, b.deliver(t, f.consumer, 1))
				b.makeIdle(t, f.consumer, deadIdle, f.entry)
				return f
			},
			want: recovery.Result{Poison: 1},
			check: func(t *testing.T, b *testBundle, f idleEntry) {
				requireGone(t, b, f.entry)
				require.True(t, b.inDead(t, f.record))
				j := b.get(t, f.record)
				require.Equal(t, status.Failed, j.Status)
				require.Contains(t, j.LastError, "no job record")
				require.Equal(t, "boo", string(j.Payload), "the entry's own payload is kept")
				require.Equal(t, "test", j.Type, "the entry's type is kept, so a replay runs it")
				require.Equal(t, 5, j.MaxRetries)
				require.Equal(t, 1, b.stat(t, keys.StatPoison))
			},
		},
		{
			name: "DeletedButPendingEntryCleared",
			setup: func(t *testing.T, b *testBundle) idleEntry {
				f := deliverOne(t, b, deadIdle)
				require.NoError(t, b.rdb.XDel(t.Context(), b.q.Stream(), f.entry).Err())
				require.Len(t, b.pending(t), 1)
				return f
			},
			want: recovery.Result{Dropped: 1},
			check: func(t *testing.T, b *testBundle, f idleEntry) {
				require.Empty(t, b.pending(t))
				require.Zero(t, b.xlen(t))
			},
		},
		{
			name: "NoGroupYet",
			setup: func(t *testing.T, b *testBundle) idleEntry {
				b.enqueue(t)
				return idleEntry{}
			},
			want: recovery.Result{},
			check: func(t *testing.T, b *testBundle, f idleEntry) {
				require.Equal(t, int64(1), b.xlen(t))
			},
		},
		{
			name:  "NoStreamYet",
			setup: func(t *testing.T, b *testBundle) idleEntry { return idleEntry{} },
			want:  recovery.Result{},
			check: func(t *testing.T, b *testBundle, f idleEntry) {},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, b := setup(t)
			f := tc.setup(t, b)
			res, ran, err := r.RunOnce(t.Context())
			require.NoError(t, err)
			require.True(t, ran)
			require.Equal(t, tc.want, res)
			tc.check(t, b, f)
			require.Empty(t, b.rdb.Get(t.Context(), b.q.RecoveryLock()).Val(), "the lock was not released")

			// A second scan finds nothing left to do.
			res, _, err = r.RunOnce(t.Context())
			require.NoError(t, err)
			require.Zero(t, res.Requeued+res.Dead+res.Dropped+res.Poison)
		})
	}
}

func TestRecovererTotals(t *testing.T) {
	t.Parallel()
	r, b := setup(t)
	deliverOne(t, b, deadIdle)
	deliverOne(t, b, deadIdle, pipeline.WithMaxRetries(0))
	res, _, err := r.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, recovery.Result{Requeued: 1, Dead: 1}, res)
	requeued, dead := r.Totals()
	require.Equal(t, int64(1), requeued)
	require.Equal(t, int64(1), dead)
}

func TestRecovererSkipsWhileLockHeld(t *testing.T) {
	t.Parallel()
	r, b := setup(t)
	f := deliverOne(t, b, deadIdle)
	require.NoError(t, b.rdb.Set(t.Context(), b.q.RecoveryLock(), "another-process", time.Minute).Err())
	res, ran, err := r.RunOnce(t.Context())
	require.NoError(t, err)
	require.False(t, ran)
	require.Equal(t, recovery.Result{}, res)
	requireUntouched(t, b, f)
	require.Equal(t, "another-process", b.rdb.Get(t.Context(), b.q.RecoveryLock()).Val())
}

func TestRecovererFence(t *testing.T) {
	t.Parallel()

	t.Run("LockStolenDuringScan", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		f := deliverOne(t, b, deadIdle)
		// Now is read inside the scan right before the script runs: the moment to lose the
		// lock to a stall past the TTL.
		var stole atomic.Bool
		r := b.recoverer(t, recovery.Config{Now: func() time.Time {
			require.NoError(t, b.rdb.Set(context.Background(), b.q.RecoveryLock(), "thief", time.Minute).Err())
			stole.Store(true)
			return time.Now()
		}})
		res, ran, err := r.RunOnce(t.Context())
		require.True(t, stole.Load())
		require.True(t, ran)
		require.ErrorIs(t, err, recovery.ErrFenced)
		require.Equal(t, recovery.Result{}, res)
		requireUntouched(t, b, f)
		require.Zero(t, b.stat(t, keys.StatRecovered))
		require.Equal(t, "thief", b.rdb.Get(t.Context(), b.q.RecoveryLock()).Val(), "the loser released the thief's lock")
	})

	t.Run("WrongToken", func(t *testing.T) {
		t.Parallel()
		r, b := setup(t)
		f := deliverOne(t, b, deadIdle)
		for _, held := range []string{"", "someone-else"} { // lock free, lock held by another
			if held != "" {
				require.NoError(t, b.rdb.Set(t.Context(), b.q.RecoveryLock(), held, time.Minute).Err())
			}
			res, err := r.ScanWithToken(t.Context(), "mine")
			require.ErrorIs(t, err, recovery.ErrFenced)
			require.Equal(t, recovery.Result{}, res)
			requireUntouched(t, b, f)
		}
		require.NoError(t, b.rdb.Set(t.Context(), b.q.RecoveryLock(), "mine", time.Minute).Err())
		res, err := r.ScanWithToken(t.Context(), "mine")
		require.NoError(t, err)
		require.Equal(t, recovery.Result{Requeued: 1}, res)
		requireRequeued(t, b, f, 1)
	})
}

// A worker may renew its lease after the scan listed its entry: the script's own idle check
// leaves the job with it.
func TestRecovererLeaseRenewedDuringScan(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	f := deliverOne(t, b, deadIdle)
	r := b.recoverer(t, recovery.Config{Now: func() time.Time {
		require.NoError(t, b.rdb.Do(context.Background(), "XCLAIM", b.q.Stream(), keys.Group,
			f.consumer, 0, f.entry, "JUSTID").Err())
		return time.Now()
	}})
	res, ran, err := r.RunOnce(t.Context())
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, recovery.Result{Skipped: 1}, res)
	requireUntouched(t, b, f)
}

// TestRecovererConcurrent runs five scanners at once over the same idle entries. Without the
// lock, the per-entry atomic checks alone must keep each job recovered exactly once.
func TestRecovererConcurrent(t *testing.T) {
	t.Parallel()
	for _, disableLock := range []bool{true, false} {
		t.Run(fmt.Sprintf("DisableLock=%v", disableLock), func(t *testing.T) {
			t.Parallel()
			const n = 300
			_, b := setup(t)
			jobs := b.enqueueN(t, n)
			old := b.deliver(t, "lost", n)
			require.Len(t, old, n)
			b.makeIdle(t, "lost", deadIdle, old...)

			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				total recovery.Result
				scans int
			)
			start := make(chan struct{})
			for range 5 {
				r := b.recoverer(t, recovery.Config{DisableLock: disableLock, BatchSize: 20})
				wg.Go(func() {
					<-start
					res, ran, err := r.RunOnce(t.Context())
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					defer mu.Unlock()
					if ran {
						scans++
					}
					total.Add(res)
				})
			}
			close(start)
			wg.Wait()
			t.Logf("%d scans; %d entries found already settled by another", scans, total.Skipped)
			require.GreaterOrEqual(t, scans, 1)
			require.Equal(t, n, total.Requeued)
			require.Zero(t, total.Dead+total.Dropped+total.Poison)

			require.Equal(t, n, b.stat(t, keys.StatRecovered))
			require.Equal(t, int64(n), b.xlen(t))
			require.Empty(t, b.pending(t))
			oldSet := map[string]bool{}
			for _, id := range old {
				oldSet[id] = true
			}
			entries := map[string]bool{}
			for _, j := range jobs {
				got := b.get(t, j.ID)
				require.Equal(t, status.Queued, got.Status)
				require.Equal(t, 1, got.Attempt, "job %s recovered more than once", j.ID)
				require.Equal(t, j.Version+1, got.Version, "job %s changed more than once", j.ID)
				require.False(t, oldSet[got.Entry])
				entries[got.Entry] = true
			}
			require.Len(t, entries, n, "jobs share entries")
			msgs, err := b.rdb.XRange(t.Context(), b.q.Stream(), "-", "+").Result()
			require.NoError(t, err)
			ids := map[any]bool{}
			for _, m := range msgs {
				require.True(t, entries[m.ID], "entry %s carries no job", m.ID)
				ids[m.Values[keys.EntryUUID]] = true
			}
			require.Len(t, ids, n, "a job is in the stream twice")
		})
	}
}

func TestRecovererPagination(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		total, batch int
		live         func(i int) bool // entries whose worker is alive
	}{
		{50, 10, func(i int) bool { return i%4 == 0 }},
		{50, 10, func(i int) bool { return i >= 10 && i < 30 }},
		{20, 10, func(int) bool { return false }}, // exactly two full pages
		{30, 1, func(i int) bool { return i%2 == 1 }},
		{30, 7, func(i int) bool { return i < 25 }},
	} {
		t.Run(fmt.Sprintf("%d/batch%d", tc.total, tc.batch), func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			jobs := b.enqueueN(t, tc.total)
			ids := b.deliver(t, "lost", tc.total)
			require.Len(t, ids, tc.total)
			var idle []string
			for i, id := range ids {
				if !tc.live(i) {
					idle = append(idle, id)
				}
			}
			if len(idle) > 0 {
				b.makeIdle(t, "lost", deadIdle, idle...)
			}
			res, ran, err := b.recoverer(t, recovery.Config{BatchSize: tc.batch}).RunOnce(t.Context())
			require.NoError(t, err)
			require.True(t, ran)
			require.Equal(t, recovery.Result{Requeued: len(idle)}, res)
			require.Equal(t, int64(tc.total), b.xlen(t))
			require.Len(t, b.pending(t), tc.total-len(idle))
			for i, j := range jobs {
				got := b.get(t, j.ID)
				if tc.live(i) {
					require.Equal(t, ids[i], got.Entry, "a live worker's job was taken")
					require.Zero(t, got.Attempt)
				} else {
					require.NotEqual(t, ids[i], got.Entry, "an idle entry was missed")
					require.Equal(t, 1, got.Attempt)
				}
			}
		})
	}
}

// scanHook watches the XPENDING calls that start each scan, holding each one for a while so
// overlapping scans would show.
type scanHook struct {
	hold   time.Duration
	active atomic.Int64
	most   atomic.Int64
	scans  atomic.Int64
	mu     sync.Mutex
	times  []time.Time
}

func (h *scanHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scanHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *scanHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !strings.EqualFold(cmd.Name(), "xpending") {
			return next(ctx, cmd)
		}
		n := h.active.Add(1)
		defer h.active.Add(-1)
		for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
		}
		h.scans.Add(1)
		h.mu.Lock()
		h.times = append(h.times, time.Now())
		h.mu.Unlock()
		time.Sleep(h.hold)
		return next(ctx, cmd)
	}
}

func (h *scanHook) scanTimes() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.times...)
}

// hookedClient is a client of the shared server whose commands go through h.
func hookedClient(t *testing.T, h *scanHook) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr})
	c.AddHook(h)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRecovererRun(t *testing.T) {
	t.Parallel()

	t.Run("AtStartThenEveryInterval", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		f := deliverOne(t, b, deadIdle)
		h := &scanHook{}
		const interval = 500 * time.Millisecond
		r, err := recovery.NewRecoverer(hookedClient(t, h), recovery.Config{
			Queue: b.queue, VisibilityTimeout: testVisibility, Interval: interval,
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		begin := time.Now()
		go func() { done <- r.Run(ctx) }()

		// The start-up scan comes at once, long before an interval passed. It lists the job
		// but leaves it: a new Recoverer trusts idle times only once it has watched Redis for
		// a lease period (see trust_test.go); the first scan after that recovers it.
		require.Eventually(t, func() bool {
			return b.get(t, f.job.ID).Entry != f.entry
		}, 30*time.Second, 5*time.Millisecond)
		recovered := time.Since(begin)
		require.Less(t, h.scanTimes()[0].Sub(begin), interval/2, "no scan at start-up")
		require.GreaterOrEqual(t, recovered, testVisibility/3, "recovered before a lease period of watching")

		// A worker dies again: a later scan finds it.
		f.entry = b.get(t, f.job.ID).Entry
		require.Equal(t, []string{f.entry}, b.deliver(t, f.consumer, 1))
		b.makeIdle(t, f.consumer, deadIdle, f.entry)
		require.Eventually(t, func() bool {
			return b.get(t, f.job.ID).Attempt == 2
		}, 10*time.Second, 10*time.Millisecond)
		require.Eventually(t, func() bool { return h.scans.Load() >= 3 }, 10*time.Second, 10*time.Millisecond)
		times := h.scanTimes()
		for i := 1; i < len(times); i++ {
			// Interval with up to 10% jitter either way.
			require.GreaterOrEqual(t, times[i].Sub(times[i-1]), interval*85/100, "scans %d and %d too close", i-1, i)
		}
		// The scan counts a requeue after its script returns, a moment after the job hash
		// shows the new attempt: wait for the count rather than read it once.
		require.Eventually(t, func() bool { requeued, _ := r.Totals(); return requeued == 2 },
			5*time.Second, 5*time.Millisecond, "requeued total")

		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, "Run does not stop quietly")
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not stop when its context ended")
		}
	})

	// With an Interval longer than a quarter of the visibility timeout, Run reads Redis's clock
	// between scans, so that its observation of Redis has no gap and it recovers at all.
	t.Run("LongIntervalStillWatches", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		const vt = 400 * time.Millisecond
		f := deliverOne(t, b, deadIdle)
		r, err := recovery.NewRecoverer(b.rdb, recovery.Config{Queue: b.queue, VisibilityTimeout: vt, Interval: vt})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		require.Eventually(t, func() bool {
			return b.get(t, f.job.ID).Entry != f.entry
		}, 30*time.Second, 10*time.Millisecond)
		cancel()
		require.NoError(t, <-done)
	})

	// Start runs Run in the background, as a worker's list of services does; Stop returns
	// once it has stopped, even in the middle of an hour's wait.
	t.Run("StartStop", func(t *testing.T) {
		t.Parallel()
		r, b := setup(t, setupOpts{cfg: recovery.Config{Interval: time.Hour}})
		f := deliverOne(t, b, deadIdle)
		require.NoError(t, r.Start(t.Context()))
		require.Eventually(t, func() bool { return b.get(t, f.job.ID).Entry != f.entry }, 30*time.Second, 10*time.Millisecond,
			"the first scan runs at once")
		r.Stop()
		r.Stop() // stopped already: nothing to do
		requireRequeued(t, b, f, 1)
	})

	t.Run("StopsWhenContextEndsDuringWait", func(t *testing.T) {
		t.Parallel()
		r, _ := setup(t, setupOpts{cfg: recovery.Config{Interval: time.Hour}})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not stop when its context ended")
		}
	})

	// Two recoverers on one queue: with the lock their scans never overlap; without it (the
	// control) they do, which shows the test can see an overlap.
	for _, disableLock := range []bool{false, true} {
		t.Run(fmt.Sprintf("OneScanAtATime/DisableLock=%v", disableLock), func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.enqueue(t)
			b.deliver(t, "live", 1) // a group and a live entry, so scans have something to list
			h := &scanHook{hold: 40 * time.Millisecond}
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			for range 2 {
				r, err := recovery.NewRecoverer(hookedClient(t, h), recovery.Config{
					Queue: b.queue, VisibilityTimeout: testVisibility, Interval: 15 * time.Millisecond,
					LockTTL: 5 * time.Second, DisableLock: disableLock,
				})
				require.NoError(t, err)
				wg.Go(func() {
					if err := r.Run(ctx); err != nil {
						t.Error(err)
					}
				})
			}
			if disableLock {
				require.Eventually(t, func() bool { return h.most.Load() >= 2 }, 10*time.Second, 5*time.Millisecond)
			} else {
				require.Eventually(t, func() bool { return h.scans.Load() >= 20 }, 10*time.Second, 5*time.Millisecond)
			}
			cancel()
			wg.Wait()
			if !disableLock {
				require.Equal(t, int64(1), h.most.Load(), "two scans overlapped")
			}
		})
	}
}

func TestRecovererPrunesStoppedConsumers(t *testing.T) {
	t.Parallel()
	r, b := setup(t, setupOpts{cfg: recovery.Config{VisibilityTimeout: time.Hour, ConsumerTTL: 300 * time.Millisecond}})
	ctx := t.Context()
	b.enqueueN(t, 1)
	b.deliver(t, "busy", 1) // holds a pending entry: not deleted while it does
	require.NoError(t, b.rdb.XGroupCreateConsumer(ctx, b.q.Stream(), keys.Group, "stopped").Err())
	// Until Redis says "stopped" has idled past the TTL (before: a 400 ms sleep, and "fresh"
	// had to be pruned within 300 ms of its creation, a margin a loaded machine missed).
	// 10x: "fresh" is created just before the prune, tens of milliseconds apart; its TTL is 3 s.
	const ttl = 3 * time.Second
	require.Eventually(t, func() bool {
		cs, err := b.rdb.XInfoConsumers(ctx, b.q.Stream(), keys.Group).Result()
		require.NoError(t, err)
		return slices.ContainsFunc(cs, func(c redis.XInfoConsumer) bool { return c.Name == "stopped" && c.Idle >= ttl })
	}, time.Minute, 50*time.Millisecond)

	// ConsumerTTL is raised to 3x the visibility timeout, so nothing is pruned yet.
	res, ran, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, ran)
	require.Zero(t, res.Pruned)

	require.NoError(t, b.rdb.XGroupCreateConsumer(ctx, b.q.Stream(), keys.Group, "fresh").Err())
	r = b.recoverer(t, recovery.Config{VisibilityTimeout: 100 * time.Millisecond, ConsumerTTL: ttl})
	res, _, err = r.RunOnce(ctx)
	require.NoError(t, err)
	// The scan recovers busy's entry first (idle past the visibility timeout; nothing renews
	// it), which leaves busy with nothing pending, so the prune that follows deletes it along
	// with "stopped"; "fresh" has not been idle for ConsumerTTL and stays.
	require.Equal(t, recovery.Result{Requeued: 1, Pruned: 2}, res)
	consumers, err := b.rdb.XInfoConsumers(ctx, b.q.Stream(), keys.Group).Result()
	require.NoError(t, err)
	var names []string
	for _, c := range consumers {
		names = append(names, c.Name)
	}
	require.Equal(t, []string{"fresh"}, names)
}

func TestRecovererNeverPrunesConsumersWithPendingEntries(t *testing.T) {
	t.Parallel()
	r, b := setup(t)
	ctx := t.Context()
	b.enqueueN(t, 3)
	b.deliver(t, "holder", 3)
	require.NoError(t, b.rdb.XGroupCreateConsumer(ctx, b.q.Stream(), keys.Group, "empty").Err())
	// Any idle time qualifies: only pending entries protect a consumer.
	n, err := r.PruneOlderThan(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the consumer with nothing pending goes")
	consumers, err := b.rdb.XInfoConsumers(ctx, b.q.Stream(), keys.Group).Result()
	require.NoError(t, err)
	require.Len(t, consumers, 1)
	require.Equal(t, "holder", consumers[0].Name)
	require.EqualValues(t, 3, consumers[0].Pending, "its pending entries are intact")
}

// OnLock hears the lock taken and let go around each scan this Recoverer runs, with the lock
// really held in between, and OnScan hears what the scan did; a scan skipped because another
// process holds the lock tells neither.
func TestRecovererHooks(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	deliverOne(t, b, deadIdle)
	var events []string
	cfg := recovery.Config{
		OnLock: func(held bool) {
			lock := b.rdb.Get(context.Background(), b.q.RecoveryLock()).Val()
			events = append(events, fmt.Sprintf("lock %v (key set: %v)", held, lock != ""))
		},
		OnScan: func(res recovery.Result) { events = append(events, fmt.Sprintf("scan %d", res.Requeued)) },
	}
	_, ran, err := b.recoverer(t, cfg).RunOnce(t.Context())
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, []string{"lock true (key set: true)", "lock false (key set: false)", "scan 1"}, events)

	events = nil
	require.NoError(t, b.rdb.Set(t.Context(), b.q.RecoveryLock(), "another-process", time.Minute).Err())
	_, ran, err = b.recoverer(t, cfg).RunOnce(t.Context())
	require.NoError(t, err)
	require.False(t, ran)
	require.Empty(t, events)
}

// recover.lua announces what it did to each job on the queue's events channel, in one message:
// queued for a lost attempt put back (with the attempts recorded), failed for a job out of
// retries.
func TestRecoveryAnnouncesEvents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []pipeline.Option
		want string
	}{
		{"Requeued", nil, "queued"},
		{"OutOfRetries", []pipeline.Option{pipeline.WithMaxRetries(0)}, "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, b := setup(t)
			next := jobtest.Listen(t, b.rdb, b.q.Events())
			f := deliverOne(t, b, deadIdle, tc.opts...)
			_, _, err := r.RunOnce(t.Context())
			require.NoError(t, err)
			require.Equal(t, []events.Event{{ID: f.job.ID, Status: tc.want, Attempt: 1}}, next())
		})
	}
}

// TestIdleScanCallsNoCascade: a scan of a queue with no workflow cascade left to follow sends
// no wf_cascade.lua call; whether the work list holds anything rides in the scan's first
// read (the levels), so an idle scan costs Redis what it did before workflows. Every scan
// called the script once per queue before. (A scan that finds the list not empty follows it:
// pipeline's TestWorkflowCascadeFinishedByRecovery.)
func TestIdleScanCallsNoCascade(t *testing.T) {
	t.Parallel()
	r, b := setup(t)
	b.enqueue(t)
	var cascades atomic.Int64
	redistest.CountCommands(b.rdb).Observe(func(cmd redis.Cmder) {
		if slices.Contains(cmd.Args(), any(b.q.WorkflowCascade())) {
			cascades.Add(1)
		}
	})
	for range 3 {
		_, ran, err := r.RunOnce(t.Context())
		require.NoError(t, err)
		require.True(t, ran)
	}
	require.Zero(t, cascades.Load(), "calls touching the cascade work list outside the scan's first read")
}
