package jobstate_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/status"
)

// counted returns a client of the shared test server and what counts its round trips.
func counted(t *testing.T) (*redis.Client, *redistest.Commands) {
	rdb := redistest.Client(t)
	return rdb, redistest.CountCommands(rdb)
}

// enqueue creates jobs in q with enqueue.lua and returns their entries ("" when scheduled).
func enqueue(t *testing.T, rdb redis.UniversalClient, q keys.Queue, now time.Time, jobs ...jobstate.NewJob) []string {
	t.Helper()
	cmds, err := jobstate.RunCalls(t.Context(), rdb, []script.Call{jobstate.EnqueueCall(q, now, jobs)})
	require.NoError(t, err)
	rows, err := jobstate.EnqueueReply(cmds[0], len(jobs))
	require.NoError(t, err)
	out := make([]string, len(rows))
	for k, r := range rows {
		require.Equal(t, script.OK, r.Code)
		out[k] = r.Entry
	}
	return out
}

func TestDecodeRecord(t *testing.T) {
	t.Parallel()
	r := jobstate.DecodeRecord([]string{
		keys.FieldType, "email", keys.FieldStatus, "queued", keys.FieldAttempt, "2",
		keys.FieldMaxRetries, "5", keys.FieldTimeout, "1500", keys.FieldCreatedAt, "1700000000000",
		keys.FieldStartedAt, "1700000000500", keys.FieldEntry, "1-0", keys.FieldVersion, "3",
		keys.FieldResult, "", keys.FieldMetadata, "md", keys.FieldPayload, "from the hash",
		// The entry's payload and metadata come last: its payload wins, an empty metadata not.
		keys.FieldPayload, "from the entry", keys.FieldMetadata, "",
	})
	created := time.UnixMilli(1700000000000)
	require.Equal(t, jobstate.Record{Type: "email", Status: "queued", Attempt: 2, MaxRetries: 5,
		Timeout: 1500 * time.Millisecond, CreatedAt: created, RunAt: created, EnqueuedAt: created,
		StartedAt: time.UnixMilli(1700000000500), Entry: "1-0", Version: 3, Result: []byte{},
		Payload: []byte("from the entry"), Metadata: "md", Priority: 1}, r)

	// A delayed job has run_at; its enqueued_at stays unset until it enters the stream.
	r = jobstate.DecodeRecord([]string{keys.FieldCreatedAt, "1000", keys.FieldRunAt, "2000"})
	require.Equal(t, time.UnixMilli(2000), r.RunAt)
	require.True(t, r.EnqueuedAt.IsZero())
	require.Nil(t, r.Result, "no result field, no result")
}

// A job's attempts: its history, then its last attempt from the hash unless the history has
// it (the same start), the last n of them.
func TestAllAttempts(t *testing.T) {
	t.Parallel()
	at := func(s int64) time.Time { return time.UnixMilli(s) }
	hist := []jobstate.AttemptRecord{{Attempt: 1, Worker: "w", Started: at(1), Ended: at(2), Outcome: status.AttemptRetried, Error: "boom"}}
	r := jobstate.Record{Status: "completed", Attempt: 2, Worker: "v", StartedAt: at(3), CompletedAt: at(4), Attempts: hist}
	require.Equal(t, append(slices.Clone(hist), jobstate.AttemptRecord{Attempt: 2, Worker: "v", Started: at(3), Ended: at(4),
		Outcome: status.AttemptCompleted}), r.AllAttempts(10))
	require.Equal(t, []jobstate.AttemptRecord{{Attempt: 2, Worker: "v", Started: at(3), Ended: at(4), Outcome: status.AttemptCompleted}},
		r.AllAttempts(1), "the last n")

	r.Status, r.CompletedAt = "in_progress", time.Time{}
	require.Equal(t, status.AttemptRunning, r.AllAttempts(10)[1].Outcome)
	r.Status, r.LastError = "failed", "bad"
	require.Equal(t, "bad", r.AllAttempts(10)[1].Error, "a failed last attempt not in the history")
	r.StartedAt = at(1)
	require.Equal(t, hist, r.AllAttempts(10), "the history has the last attempt already")
	r.StartedAt, r.Status = at(3), "queued"
	require.Equal(t, hist, r.AllAttempts(10), "a queued job's last start is no attempt of its own")
	require.Empty(t, (&jobstate.Record{}).AllAttempts(10))
}

func TestFindFirstRecordsLocate(t *testing.T) {
	t.Parallel()
	rdb, rt := counted(t)
	ctx := t.Context()
	name := redistest.UniqueName(t)
	a, b := keys.New(keys.DefaultPrefix, name+"-a"), keys.New(keys.DefaultPrefix, name+"-b")
	now := time.Now()
	enqueue(t, rdb, b, now, jobstate.NewJob{ID: "j1", Type: "t", Payload: []byte("p1"), RunAt: now, ChosenID: true})
	enqueue(t, rdb, a, now, jobstate.NewJob{ID: "j2", Type: "t", Payload: []byte("p2"), RunAt: now.Add(time.Hour), ChosenID: true})

	// get.lua's first EVALSHA on a server may meet NOSCRIPT and be sent again: load it first.
	_, _, err := jobstate.NewStore(rdb, "").FindFirst(ctx, []jobstate.Lookup{{Queue: a, ID: "j0"}})
	require.NoError(t, err)
	var k int
	var rec jobstate.Record
	require.EqualValues(t, 1, rt.During(func() {
		k, rec, err = jobstate.NewStore(rdb, "").FindFirst(ctx, []jobstate.Lookup{{Queue: a, ID: "j1"}, {Queue: b, ID: "j1"}})
	}))
	require.NoError(t, err)
	require.Equal(t, 1, k)
	require.Equal(t, "queued", rec.Status)
	require.Equal(t, []byte("p1"), rec.Payload, "get.lua adds the entry's payload")

	k, _, err = jobstate.NewStore(rdb, "").FindFirst(ctx, []jobstate.Lookup{{Queue: a, ID: "nope"}})
	require.NoError(t, err)
	require.Equal(t, -1, k)

	var recs []*jobstate.Record
	require.EqualValues(t, 1, rt.During(func() { recs, err = jobstate.NewStore(rdb, "").Records(ctx, a, []string{"j2", "nope"}) }))
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, "scheduled", recs[0].Status)
	require.Equal(t, now.Add(time.Hour).UnixMilli(), recs[0].RunAt.UnixMilli())
	require.Nil(t, recs[1])
	require.Zero(t, rt.During(func() { recs, err = jobstate.NewStore(rdb, "").Records(ctx, a, nil) }), "nothing to read, no round trip")
	require.NoError(t, err)
	require.Empty(t, recs)

	var at []int
	require.EqualValues(t, 1, rt.During(func() {
		at, err = jobstate.NewStore(rdb, "").Locate(ctx, []keys.Queue{a, b}, []string{"j1", "j2", "nope"})
	}))
	require.NoError(t, err)
	require.Equal(t, []int{1, 0, -1}, at)
}

func TestSetPages(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	q := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))

	_, ok, err := jobstate.NewStore(rdb, "").LastDead(ctx, q)
	require.NoError(t, err)
	require.False(t, ok, "no dead set")

	require.NoError(t, rdb.ZAdd(ctx, q.Dead(), redis.Z{Score: 10, Member: "a"}, redis.Z{Score: 30, Member: "c"},
		redis.Z{Score: 20, Member: "b"}).Err())
	require.NoError(t, rdb.ZAdd(ctx, q.Scheduled(), redis.Z{Score: 5, Member: "x"}, redis.Z{Score: 7, Member: "y"}).Err())

	last, ok, err := jobstate.NewStore(rdb, "").LastDead(ctx, q)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, jobstate.SetItem{Member: "c", Score: 30}, last)
	require.Equal(t, time.UnixMilli(30), last.At())

	newest, err := jobstate.NewStore(rdb, "").DeadPage(ctx, q, false, nil, 2)
	require.NoError(t, err)
	require.Equal(t, []jobstate.SetItem{{Member: "c", Score: 30}, {Member: "b", Score: 20}}, newest)
	oldest, err := jobstate.NewStore(rdb, "").DeadPage(ctx, q, true, &newest[1], 5)
	require.NoError(t, err)
	require.Equal(t, []jobstate.SetItem{{Member: "c", Score: 30}}, oldest, "after b, oldest first")

	sched, err := jobstate.NewStore(rdb, "").ScheduledPage(ctx, q, nil, 10)
	require.NoError(t, err)
	require.Equal(t, []jobstate.SetItem{{Member: "x", Score: 5}, {Member: "y", Score: 7}}, sched)
}

func TestStreamReads(t *testing.T) {
	t.Parallel()
	rdb, rt := counted(t)
	ctx := t.Context()
	q := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))

	// No stream yet: no entries, no group, no leases.
	es, g, err := jobstate.NewStore(rdb, "").StreamPage(ctx, q, "-", 10)
	require.NoError(t, err)
	require.Empty(t, es)
	require.Nil(t, g)
	leases, err := jobstate.NewStore(rdb, "").PendingPage(ctx, q, "-", 10)
	require.NoError(t, err)
	require.Empty(t, leases)

	now := time.Now()
	var jobs []jobstate.NewJob
	for i := range 3 {
		id := "j" + strconv.Itoa(i)
		jobs = append(jobs, jobstate.NewJob{ID: id, Type: "t", Payload: []byte("p-" + id), RunAt: now, ChosenID: true})
	}
	entries := enqueue(t, rdb, q, now, jobs...)
	// An entry that names no valid job.
	bad, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: q.Stream(), Values: []any{keys.EntryUUID, "bad id!"}}).Result()
	require.NoError(t, err)

	es, g, err = jobstate.NewStore(rdb, "").StreamPage(ctx, q, "-", 10)
	require.NoError(t, err)
	require.Nil(t, g, "no worker read the queue yet")
	require.Len(t, es, 4)
	require.Equal(t, jobstate.Entry{ID: entries[0], Job: "j0", Payload: "p-j0"}, es[0])
	require.Equal(t, jobstate.Entry{ID: bad}, es[3])

	// A worker takes the first entry.
	require.NoError(t, rdb.XGroupCreate(ctx, q.Stream(), keys.Group, "0").Err())
	_, err = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w1", Streams: []string{q.Stream(), ">"}, Count: 1}).Result()
	require.NoError(t, err)

	require.EqualValues(t, 1, rt.During(func() { es, g, err = jobstate.NewStore(rdb, "").StreamPage(ctx, q, entries[1], 10) }))
	require.NoError(t, err)
	require.Equal(t, &jobstate.Group{LastDelivered: entries[0], Pending: 1}, g)
	require.Len(t, es, 3)
	rest, err := jobstate.NewStore(rdb, "").StreamRange(ctx, q, entries[2], 1)
	require.NoError(t, err)
	require.Equal(t, []jobstate.Entry{{ID: entries[2], Job: "j2", Payload: "p-j2"}}, rest)

	all, _, err := jobstate.NewStore(rdb, "").StreamPage(ctx, q, "-", 10)
	require.NoError(t, err)
	var recs []*jobstate.Record
	var held map[string]bool
	require.EqualValues(t, 1, rt.During(func() { recs, held, err = jobstate.NewStore(rdb, "").EntryRecords(ctx, q, all, true) }))
	require.NoError(t, err)
	require.Equal(t, map[string]bool{entries[0]: true}, held)
	require.Len(t, recs, 4)
	require.Equal(t, entries[1], recs[1].Entry)
	require.Equal(t, "queued", recs[1].Status)
	require.Nil(t, recs[3], "an entry that names no job has no record")

	leases, err = jobstate.NewStore(rdb, "").PendingPage(ctx, q, "-", 10)
	require.NoError(t, err)
	require.Len(t, leases, 1)
	require.Equal(t, entries[0], leases[0].Entry)
	require.Equal(t, "w1", leases[0].Worker)
	require.EqualValues(t, 1, leases[0].Deliveries)
}

func TestReadStats(t *testing.T) {
	t.Parallel()
	rdb, rt := counted(t)
	ctx := t.Context()
	name := redistest.UniqueName(t)
	a, b := keys.New(keys.DefaultPrefix, name+"-a"), keys.New(keys.DefaultPrefix, name+"-b")
	now := time.Now()
	enqueue(t, rdb, a, now,
		jobstate.NewJob{ID: "1", Type: "t", RunAt: now, ChosenID: true},
		jobstate.NewJob{ID: "2", Type: "t", RunAt: now, ChosenID: true},
		jobstate.NewJob{ID: "3", Type: "t", RunAt: now.Add(time.Hour), ChosenID: true})
	require.NoError(t, rdb.XGroupCreate(ctx, a.Stream(), keys.Group, "0").Err())
	_, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w", Streams: []string{a.Stream(), ">"}, Count: 1}).Result()
	require.NoError(t, err)
	require.NoError(t, rdb.ZAdd(ctx, a.Dead(), redis.Z{Score: 1, Member: "d"}).Err())

	var st []*jobstate.Stats
	require.EqualValues(t, 1, rt.During(func() { st, err = jobstate.NewStore(rdb, "").ReadStats(ctx, []keys.Queue{a, b}) }))
	require.NoError(t, err)
	require.Equal(t, &jobstate.Stats{Queue: a.Name(), Scheduled: 1, Queued: 1, InProgress: 1, Dead: 1, Enqueued: 3}, st[0])
	require.Equal(t, &jobstate.Stats{Queue: b.Name()}, st[1], "a queue nothing was enqueued to has all zeros")
}

func TestKnownQueuesAndPartitions(t *testing.T) {
	t.Parallel()
	rdb, rt := counted(t)
	ctx := t.Context()
	prefix := redistest.UniqueName(t)

	p, err := jobstate.PartitionCount(ctx, rdb, prefix, "q")
	require.NoError(t, err)
	require.Equal(t, 1, p, "none set")

	require.NoError(t, rdb.SAdd(ctx, keys.Queues(prefix), "b", "a", "not a queue!").Err())
	require.NoError(t, rdb.HSet(ctx, keys.Partitions(prefix), "b", jobstate.StoredPartitions(3)).Err())
	var names []string
	var counts map[string]int
	require.EqualValues(t, 1, rt.During(func() { names, counts, err = jobstate.NewStore(rdb, prefix).KnownQueues(ctx) }))
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, names)
	require.Equal(t, map[string]int{"b": 3}, counts)
	p, err = jobstate.PartitionCount(ctx, rdb, prefix, "b")
	require.NoError(t, err)
	require.Equal(t, 3, p)

	known, err := jobstate.NewStore(rdb, prefix).IsKnownQueue(ctx, "a")
	require.NoError(t, err)
	require.True(t, known)
	require.NoError(t, jobstate.NewStore(rdb, prefix).ForgetQueue(ctx, "a"))
	known, err = jobstate.NewStore(rdb, prefix).IsKnownQueue(ctx, "a")
	require.NoError(t, err)
	require.False(t, known)

	// A count the version before stored: refused, and its partitions named for deletion.
	require.NoError(t, rdb.HSet(ctx, keys.Partitions(prefix), "old", "2").Err())
	_, err = jobstate.PartitionCount(ctx, rdb, prefix, "old")
	require.ErrorIs(t, err, jobstate.ErrLegacyLayout)
	legacy, err := jobstate.LegacyPartitions(ctx, rdb, prefix, "old")
	require.NoError(t, err)
	require.Equal(t, []keys.Queue{keys.New(prefix, "old#0"), keys.New(prefix, "old#1")}, legacy)
	legacy, err = jobstate.LegacyPartitions(ctx, rdb, prefix, "b")
	require.NoError(t, err)
	require.Nil(t, legacy, "this version's count is no legacy one")

	_, err = jobstate.ParsePartitions("q", "0/spread")
	require.ErrorContains(t, err, `partition count of q in Redis is "0/spread"`)

	require.NoError(t, jobstate.ForgetPartitions(ctx, rdb, prefix, "b"))
	p, err = jobstate.PartitionCount(ctx, rdb, prefix, "b")
	require.NoError(t, err)
	require.Equal(t, 1, p)
}

func TestScanKeys(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	q := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))
	for i := range 5 {
		require.NoError(t, rdb.Set(ctx, q.Job(strconv.Itoa(i)), "x", 0).Err())
	}
	require.NoError(t, rdb.Set(ctx, q.Stats(), "x", 0).Err())

	n, err := jobstate.NewStore(rdb, keys.DefaultPrefix).ScanKeys(ctx, q.JobPrefix(), false, false)
	require.NoError(t, err)
	require.Equal(t, 5, n, "counted, not the stats key")
	n, err = jobstate.NewStore(rdb, keys.DefaultPrefix).ScanKeys(ctx, q.Base(), true, false)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	left, err := rdb.Exists(ctx, q.Stats(), q.Job("0")).Result()
	require.NoError(t, err)
	require.Zero(t, left)
}

func TestLayout(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	prefix := redistest.UniqueName(t)
	qs := []keys.Queue{keys.New(prefix, keys.PartitionName("q", 0, 2)), keys.New(prefix, keys.PartitionName("q", 1, 2))}

	require.NoError(t, jobstate.SetClosed(ctx, rdb, qs, true, time.Hour))
	n, err := rdb.Exists(ctx, qs[0].Closed(), qs[1].Closed()).Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.NoError(t, jobstate.SetClosed(ctx, rdb, qs, false, 0))
	n, err = rdb.Exists(ctx, qs[0].Closed(), qs[1].Closed()).Result()
	require.NoError(t, err)
	require.Zero(t, n)

	require.NoError(t, jobstate.WritePartitions(ctx, rdb, prefix, "q", 2))
	p, err := jobstate.PartitionCount(ctx, rdb, prefix, "q")
	require.NoError(t, err)
	require.Equal(t, 2, p)
	require.NoError(t, jobstate.WritePartitions(ctx, rdb, prefix, "q", 1))
	p, err = jobstate.PartitionCount(ctx, rdb, prefix, "q")
	require.NoError(t, err)
	require.Equal(t, 1, p)

	ok, err := jobstate.LockLayout(ctx, rdb, prefix, "q", "a", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = jobstate.LockLayout(ctx, rdb, prefix, "q", "b", time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "held by a")
	jobstate.UnlockLayout(ctx, rdb, prefix, "q", "b")
	ok, err = jobstate.LockLayout(ctx, rdb, prefix, "q", "b", time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "b's unlock left a's lock alone")
	jobstate.UnlockLayout(ctx, rdb, prefix, "q", "a")
	ok, err = jobstate.LockLayout(ctx, rdb, prefix, "q", "b", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)

	to := keys.New(prefix, "q")
	require.NoError(t, rdb.HSet(ctx, qs[0].Stats(), keys.StatEnqueued, 2, keys.StatCompleted, 1).Err())
	require.NoError(t, rdb.HSet(ctx, qs[1].Stats(), keys.StatEnqueued, 3).Err())
	require.NoError(t, jobstate.MoveCounters(ctx, rdb, qs, to))
	m, err := rdb.HGetAll(ctx, to.Stats()).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{keys.StatEnqueued: "5", keys.StatCompleted: "1"}, m)
	n, err = rdb.Exists(ctx, qs[0].Stats(), qs[1].Stats()).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the old counters are gone")

	nodes, err := jobstate.Nodes(ctx, rdb, qs)
	require.NoError(t, err)
	require.Nil(t, nodes, "no cluster")
}

// FindFirst over more lookups than it reads with a script each narrows them with EXISTS and
// still answers the first in order that has the job, on a standalone server and a cluster.
func TestFindFirstManyLookups(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rdb  func(*testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.rdb(t)
			ctx := t.Context()
			name := redistest.UniqueName(t)
			now := time.Now()
			var lookups []jobstate.Lookup
			for k := range 137 {
				lookups = append(lookups, jobstate.Lookup{Queue: keys.New(keys.DefaultPrefix, fmt.Sprintf("%s-%d", name, k)), ID: "j"})
			}
			k, _, err := jobstate.NewStore(rdb, "").FindFirst(ctx, lookups)
			require.NoError(t, err)
			require.Equal(t, -1, k)
			for _, at := range []int{118, 41} {
				enqueue(t, rdb, lookups[at].Queue, now, jobstate.NewJob{ID: "j", Type: "t", Payload: []byte(fmt.Sprint(at)), RunAt: now, ChosenID: true})
			}
			k, rec, err := jobstate.NewStore(rdb, "").FindFirst(ctx, lookups)
			require.NoError(t, err)
			require.Equal(t, 41, k, "the first in order")
			require.Equal(t, []byte("41"), rec.Payload)
		})
	}
}
