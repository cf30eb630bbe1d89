package pipeline_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// TestInspector runs every Inspector test against the package's standalone server and against a
// private 3-master cluster, each in queues of its own.
func TestInspector(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	for _, be := range []struct {
		name string
		rdb  redis.UniversalClient
	}{{"Standalone", redistest.Client(t)}, {"Cluster", cl.Client(t)}} {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				name string
				test func(*testing.T, redis.UniversalClient)
			}{
				{"ListScheduled", testListScheduled},
				{"ListQueuedAndInProgress", testListQueuedAndInProgress},
				{"ListFailed", testListFailed},
				{"Paginate10000", testPaginate10000},
				{"PaginateScheduled10000", testPaginateScheduled10000},
				{"ListRefusals", testListRefusals},
				{"Queues", testQueues},
				{"ReplayAll", testReplayAll},
				{"PurgeByID", testPurgeByID},
				{"PurgeAll", testPurgeAll},
				{"DeleteQueue", testDeleteQueue},
				{"DeleteQueueEscapesPrefix", testDeleteQueueEscapesPrefix},
			} {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.test(t, be.rdb)
				})
			}
		})
	}
}

// enqueue publishes n jobs of type "t" with payload "p<i>", with opts(i) each.
func (b *testBundle) enqueue(t *testing.T, n int, opts func(i int) []pipeline.Option) []*pipeline.Job {
	t.Helper()
	tasks := make([]pipeline.Task, n)
	for i := range tasks {
		tasks[i] = pipeline.Task{Type: "t", Payload: []byte("p" + strconv.Itoa(i))}
		if opts != nil {
			tasks[i].Opts = opts(i)
		}
	}
	jobs, err := b.client.EnqueueBatch(t.Context(), b.queue, tasks)
	require.NoError(t, err)
	return jobs
}

// deliver hands up to n queued entries to consumer, as a worker's read would (the jobs stay
// in progress: nobody runs them).
func (b *testBundle) deliver(t *testing.T, consumer string, n int) []redis.XMessage {
	t.Helper()
	ctx := t.Context()
	err := b.rdb.XGroupCreateMkStream(ctx, b.q.Stream(), keys.Group, "0").Err()
	if err != nil && !rediserr.IsGroupExists(err) {
		require.NoError(t, err)
	}
	res, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: consumer,
		Streams: []string{b.q.Stream(), ">"}, Count: int64(n), Block: -1}).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	require.NoError(t, err)
	return res[0].Messages
}

// kill fails the delivered entries for good through finish.lua, as a worker would, entry i at
// died(i) (unix ms).
func (b *testBundle) kill(t *testing.T, msgs []redis.XMessage, died func(i int) int64) {
	t.Helper()
	const chunk = 50
	var chunks [][]jobstate.Transition
	for lo := 0; lo < len(msgs); lo += chunk {
		var ts []jobstate.Transition
		for i := lo; i < min(lo+chunk, len(msgs)); i++ {
			id := msgs[i].Values[keys.EntryUUID].(string)
			at := time.UnixMilli(died(i))
			ts = append(ts, jobstate.Dead(&b.q, jobstate.DeadParams{Ran: jobstate.Ran{ID: id, Entry: msgs[i].ID,
				Attempt: 1, Started: at.Add(-time.Millisecond), Finished: at}, Reason: "boom " + id}))
		}
		chunks = append(chunks, ts)
	}
	answers := jobstate.NewStore(b.rdb, "").Finish(t.Context(), jobstate.FinishParams{Config: jobstate.FinishConfig{
		Worker: "killer", Retention: time.Hour, MinRetention: time.Minute}, Chunks: chunks})
	for k, a := range answers {
		codes, err := a.Codes, a.Err
		require.NoError(t, err)
		for i, c := range codes {
			if c == script.Refused {
				// A cluster client sends a pipeline again when its replies come later than
				// its ReadTimeout, as on a loaded machine (go-redis does, whatever MaxRetries
				// says): the call sent again is refused, its job moved on by the first. The
				// refusal is the call's own when the job died of it.
				id := msgs[chunk*k+i].Values[keys.EntryUUID].(string)
				j, err := b.insp.Get(t.Context(), b.queue, id)
				require.NoError(t, err)
				require.Equal(t, status.Failed, j.Status, "finish refused: %s", id)
				require.Equal(t, "boom "+id, j.LastError, "finish refused: %s", id)
				continue
			}
			require.Equal(t, script.OK, c)
		}
	}
}

// listAll follows List's cursors to the end and returns every job seen, checking that each page
// is within its limit and holds only jobs of status.
func listAll(t *testing.T, insp *pipeline.Inspector, queue string, status status.Status, limit int) ([]*pipeline.Job, int) {
	t.Helper()
	var all []*pipeline.Job
	cursor, pages := "", 0
	for {
		p, err := insp.List(t.Context(), queue, status, pipeline.Page{Cursor: cursor, Limit: limit})
		require.NoError(t, err)
		pages++
		require.LessOrEqual(t, len(p.Jobs), min(cmp.Or(limit, pipeline.DefaultPageLimit), pipeline.MaxPageLimit))
		for _, j := range p.Jobs {
			require.Equal(t, status, j.Status, j.ID)
		}
		all = append(all, p.Jobs...)
		if p.Next == "" {
			return all, pages
		}
		require.NotEqual(t, cursor, p.Next)
		cursor = p.Next
		require.Less(t, pages, 100_000, "List never ends")
	}
}

func ids(jobs []*pipeline.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// byEntry sorts jobs by stream entry id (stream order).
func byEntry(a, b *pipeline.Job) int {
	pa, pb := strings.SplitN(a.Entry, "-", 2), strings.SplitN(b.Entry, "-", 2)
	ma, _ := strconv.ParseUint(pa[0], 10, 64)
	mb, _ := strconv.ParseUint(pb[0], 10, 64)
	sa, _ := strconv.ParseUint(pa[1], 10, 64)
	sb, _ := strconv.ParseUint(pb[1], 10, 64)
	return cmp.Or(cmp.Compare(ma, mb), cmp.Compare(sa, sb))
}

func testListScheduled(t *testing.T, rdb redis.UniversalClient) {
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	// Ties: jobs 0-9 share one due time, 10-19 another; ids chosen so that their byte order
	// differs from the order they were published in (and mixes cases: "Z" < "a").
	names := []string{"b", "a", "Z", "c-1", "c:2", "c.3", "A", "zz", "z", "m"}
	jobs := b.enqueue(t, 20, func(i int) []pipeline.Option {
		return []pipeline.Option{pipeline.WithID(names[i%10] + strconv.Itoa(i/10)),
			pipeline.WithRunAt(base.Add(time.Duration(1-i/10) * time.Second))}
	})
	want := slices.Clone(jobs)
	slices.SortFunc(want, func(x, y *pipeline.Job) int {
		return cmp.Or(x.RunAt.Compare(y.RunAt), strings.Compare(x.ID, y.ID))
	})
	for _, limit := range []int{1, 3, 7, 20, 0} {
		got, pages := listAll(t, b.insp, b.queue, status.Scheduled, limit)
		require.Equal(t, ids(want), ids(got), "limit %d", limit)
		require.Equal(t, max(1, (20+cmp.Or(limit, 100)-1)/cmp.Or(limit, 100)), pages, "no empty last page (limit %d)", limit)
	}
	got, _ := listAll(t, b.insp, b.queue, status.Scheduled, 20)
	require.Equal(t, "A1", got[0].ID, "due first, and first by bytes ('A' < 'Z' < 'a')")
	require.Equal(t, "p16", string(got[0].Payload), "the payload is read")
	require.True(t, base.Equal(got[0].RunAt))

	// The cursor's job leaves the set (canceled here; promoted, in life): the next page starts
	// right after where it was, in the middle of a group of equal due times.
	p1, err := b.insp.List(ctx, b.queue, status.Scheduled, pipeline.Page{Limit: 4})
	require.NoError(t, err)
	require.NoError(t, b.insp.Cancel(ctx, b.queue, p1.Jobs[3].ID))
	rest, _ := listAll2(t, b.insp, b.queue, status.Scheduled, p1.Next, 3)
	require.Equal(t, ids(want[4:]), ids(rest))

	// A canceled job is no longer listed.
	all, _ := listAll(t, b.insp, b.queue, status.Scheduled, 0)
	require.Len(t, all, 19)
	require.NotContains(t, ids(all), p1.Jobs[3].ID)
}

// listAll2 is listAll from a cursor.
func listAll2(t *testing.T, insp *pipeline.Inspector, queue string, status status.Status, cursor string, limit int) ([]*pipeline.Job, int) {
	t.Helper()
	var all []*pipeline.Job
	pages := 0
	for cursor != "" {
		p, err := insp.List(t.Context(), queue, status, pipeline.Page{Cursor: cursor, Limit: limit})
		require.NoError(t, err)
		pages++
		all = append(all, p.Jobs...)
		cursor = p.Next
	}
	return all, pages
}

func testListQueuedAndInProgress(t *testing.T, rdb redis.UniversalClient) {
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	// Nothing yet: no stream, no group.
	for _, s := range []status.Status{status.Queued, status.InProgress} {
		p, err := b.insp.List(ctx, b.queue, s, pipeline.Page{})
		require.NoError(t, err)
		require.Empty(t, p.Jobs)
		require.Empty(t, p.Next)
	}
	jobs := b.enqueue(t, 10, func(i int) []pipeline.Option {
		return []pipeline.Option{pipeline.WithMaxRetries(i)}
	})
	got, _ := listAll(t, b.insp, b.queue, status.Queued, 4)
	require.Equal(t, ids(jobs), ids(got), "stream order")
	require.Equal(t, "p0", string(got[0].Payload), "the payload is read from the entry")
	require.Equal(t, 9, got[9].MaxRetries)
	require.Equal(t, jobs[3].Entry, got[3].Entry)

	// Three entries are handed to a worker: they leave the queued listing and are in progress.
	msgs := b.deliver(t, "w1", 3)
	require.Len(t, msgs, 3)
	got, _ = listAll(t, b.insp, b.queue, status.Queued, 4)
	require.Equal(t, ids(jobs[3:]), ids(got))
	// A cursor from before the delivered entries still skips them.
	p, err := b.insp.List(ctx, b.queue, status.Queued, pipeline.Page{Cursor: jobs[0].Entry, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, ids(jobs[3:5]), ids(p.Jobs))

	p, err = b.insp.List(ctx, b.queue, status.InProgress, pipeline.Page{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, ids(jobs[:2]), ids(p.Jobs))
	require.NotEmpty(t, p.Next)
	for _, j := range p.Jobs {
		require.Equal(t, status.InProgress, j.Status, "handed out, its start not yet recorded")
		require.Equal(t, "w1", j.Worker)
		require.Equal(t, 1, j.Attempt, "the attempt the entry starts")
		l := p.Leases[j.ID]
		require.Equal(t, "w1", l.Worker)
		require.Equal(t, j.Entry, l.Entry)
		require.EqualValues(t, 1, l.Deliveries)
		require.GreaterOrEqual(t, l.Idle, time.Duration(0))
	}
	p, err = b.insp.List(ctx, b.queue, status.InProgress, pipeline.Page{Cursor: p.Next, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, ids(jobs[2:3]), ids(p.Jobs))
	require.Empty(t, p.Next)

	// The job is taken by another worker that has not renewed its lease for ten minutes
	// (XCLAIM's IDLE sets the idle time), then renewed (XCLAIM JUSTID resets it).
	e := msgs[0].ID
	require.NoError(t, b.rdb.Do(ctx, "XCLAIM", b.q.Stream(), keys.Group, "w2", 0, e, "IDLE", 600_000, "JUSTID").Err())
	p, err = b.insp.List(ctx, b.queue, status.InProgress, pipeline.Page{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, jobs[0].ID, p.Jobs[0].ID)
	require.Equal(t, "w2", p.Jobs[0].Worker)
	require.GreaterOrEqual(t, p.Leases[jobs[0].ID].Idle, 10*time.Minute)
	require.NoError(t, b.rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: b.q.Stream(), Group: keys.Group,
		Consumer: "w2", Messages: []string{e}}).Err())
	p, err = b.insp.List(ctx, b.queue, status.InProgress, pipeline.Page{Limit: 1})
	require.NoError(t, err)
	require.Less(t, p.Leases[jobs[0].ID].Idle, 10*time.Minute, "renewed")

	// JSON: jobs as Job's own JSON, and leases by job id.
	out, err := json.Marshal(p)
	require.NoError(t, err)
	var v struct {
		Jobs   []map[string]any          `json:"jobs"`
		Next   string                    `json:"next"`
		Leases map[string]map[string]any `json:"leases"`
	}
	require.NoError(t, json.Unmarshal(out, &v), string(out))
	require.Equal(t, jobs[0].ID, v.Jobs[0]["id"])
	require.Equal(t, "in_progress", v.Jobs[0]["status"])
	require.Equal(t, "w2", v.Leases[jobs[0].ID]["worker"])
	require.Contains(t, v.Leases[jobs[0].ID], "idle_ms")

	// A canceled job's entry is gone: it is neither queued nor in progress.
	require.NoError(t, b.insp.Cancel(ctx, b.queue, jobs[1].ID))
	require.NoError(t, b.insp.Cancel(ctx, b.queue, jobs[5].ID))
	got, _ = listAll(t, b.insp, b.queue, status.InProgress, 0)
	require.Equal(t, []string{jobs[0].ID, jobs[2].ID}, ids(got))
	got, _ = listAll(t, b.insp, b.queue, status.Queued, 0)
	require.Equal(t, ids(slices.Delete(slices.Clone(jobs[3:]), 2, 3)), ids(got))
}

func testListFailed(t *testing.T, rdb redis.UniversalClient) {
	b := setup(t, setupOpts{rdb: rdb})
	jobs := b.enqueue(t, 30, nil)
	msgs := b.deliver(t, "w1", 30)
	base := time.Now().UnixMilli()
	b.kill(t, msgs, func(i int) int64 { return base + int64(i/4) }) // four die in each ms
	byID := map[string]int{}
	for i, m := range msgs {
		byID[m.Values[keys.EntryUUID].(string)] = i
	}
	want := slices.Clone(jobs)
	slices.SortFunc(want, func(x, y *pipeline.Job) int { // newest first, ties by id descending
		return cmp.Or(cmp.Compare(byID[y.ID]/4, byID[x.ID]/4), strings.Compare(y.ID, x.ID))
	})
	for _, limit := range []int{1, 4, 5, 29, 30, 31} {
		got, _ := listAll(t, b.insp, b.queue, status.Failed, limit)
		require.Equal(t, ids(want), ids(got), "limit %d", limit)
	}
	got, _ := listAll(t, b.insp, b.queue, status.Failed, 0)
	require.Equal(t, "boom "+got[0].ID, got[0].LastError)
	require.NotEmpty(t, got[0].Payload)
	require.Equal(t, base+7, got[0].CompletedAt.UnixMilli(), "the time of death")
}

// Paging over 10,000 jobs in each status that streams hold: every job is seen exactly once,
// in order.
func testPaginate10000(t *testing.T, rdb redis.UniversalClient) {
	const n = 10_000
	b := setup(t, setupOpts{rdb: rdb})
	jobs := b.enqueue(t, n, nil)
	want := slices.Clone(jobs)
	slices.SortFunc(want, byEntry)

	got, pages := listAll(t, b.insp, b.queue, status.Queued, 777)
	require.Equal(t, ids(want), ids(got))
	require.Equal(t, (n+776)/777, pages)

	msgs := b.deliver(t, "w1", n)
	require.Len(t, msgs, n)
	got, _ = listAll(t, b.insp, b.queue, status.Queued, 500)
	require.Empty(t, got)
	got, pages = listAll(t, b.insp, b.queue, status.InProgress, 5000)
	require.Equal(t, n/pipeline.MaxPageLimit, pages, "a limit above the maximum is cut to it")
	require.Equal(t, ids(want), ids(got))

	base := time.Now().UnixMilli()
	b.kill(t, msgs, func(i int) int64 { return base + int64(i/10) })
	got, _ = listAll(t, b.insp, b.queue, status.InProgress, 0)
	require.Empty(t, got)
	index := make(map[string]int, n)
	for i, m := range msgs {
		index[m.Values[keys.EntryUUID].(string)] = i
	}
	slices.SortFunc(want, func(x, y *pipeline.Job) int { // newest death first, ties by id desc
		return cmp.Or(cmp.Compare(index[y.ID]/10, index[x.ID]/10), strings.Compare(y.ID, x.ID))
	})
	got, pages = listAll(t, b.insp, b.queue, status.Failed, 999)
	require.Equal(t, ids(want), ids(got))
	require.Equal(t, (n+998)/999, pages)
}

func testPaginateScheduled10000(t *testing.T, rdb redis.UniversalClient) {
	const n = 10_000
	b := setup(t, setupOpts{rdb: rdb})
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	// Many share a due time: 100 distinct times, 100 jobs each, published out of order.
	jobs := b.enqueue(t, n, func(i int) []pipeline.Option {
		return []pipeline.Option{pipeline.WithRunAt(base.Add(time.Duration((i*37)%100) * time.Millisecond))}
	})
	want := slices.Clone(jobs)
	slices.SortFunc(want, func(x, y *pipeline.Job) int {
		return cmp.Or(x.RunAt.Compare(y.RunAt), strings.Compare(x.ID, y.ID))
	})
	got, pages := listAll(t, b.insp, b.queue, status.Scheduled, 333)
	require.Equal(t, ids(want), ids(got))
	require.Equal(t, (n+332)/333, pages)
}

func testListRefusals(t *testing.T, rdb redis.UniversalClient) {
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	for _, tc := range []struct {
		status status.Status
		page   pipeline.Page
		msg    string
	}{
		{status.Completed, pipeline.Page{Cursor: "1-0"}, "cursor"},
		{status.Canceled, pipeline.Page{Cursor: "12:bad id"}, "cursor"},
		{"done", pipeline.Page{}, `unknown status "done"`},
		{status.Queued, pipeline.Page{Limit: -1}, "negative"},
		{status.Queued, pipeline.Page{Cursor: "12:x"}, "cursor"},
		{status.InProgress, pipeline.Page{Cursor: "x-1"}, "cursor"},
		{status.Scheduled, pipeline.Page{Cursor: "1-0"}, "cursor"},
		{status.Failed, pipeline.Page{Cursor: "12:bad id"}, "cursor"},
	} {
		_, err := b.insp.List(ctx, b.queue, tc.status, tc.page)
		require.ErrorIs(t, err, pipeline.ErrInvalid, tc.msg)
		require.ErrorContains(t, err, tc.msg)
	}
	_, err := b.insp.List(ctx, "a{b}", status.Queued, pipeline.Page{})
	require.ErrorIs(t, err, pipeline.ErrInvalid)

	// An unusable config is NewInspector's error, naming every unusable field.
	bad, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Retention: -time.Hour, MinRetention: -1})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	require.ErrorContains(t, err, "retention -1h0m0s is negative")
	require.ErrorContains(t, err, "min retention")
	require.Nil(t, bad)
	none, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Retention: pipeline.RetainNone})
	require.NoError(t, err)
	_, err = none.Stats(ctx, b.queue)
	require.NoError(t, err, "RetainNone is no negative retention")
}

func testQueues(t *testing.T, rdb redis.UniversalClient) {
	// A prefix of its own, so that the known queues are only this test's.
	prefix := redistest.UniqueName(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	ctx := t.Context()
	all, err := insp.Queues(ctx)
	require.NoError(t, err)
	require.Empty(t, all)

	names := []string{"c", "a", "b-emails", "d.x"} // spread over the cluster's slots
	for k, name := range names {
		for range k + 1 {
			_, err := client.Enqueue(ctx, name, pipeline.Task{Type: "t"})
			require.NoError(t, err)
		}
		_, err := client.Enqueue(ctx, name, pipeline.Task{Type: "t"}, pipeline.WithDelay(time.Hour))
		require.NoError(t, err)
	}
	// A name in the set that is no queue name is left out.
	require.NoError(t, rdb.SAdd(ctx, keys.Queues(prefix), "not a queue").Err())
	all, err = insp.Queues(ctx)
	require.NoError(t, err)
	require.Len(t, all, 4)
	var got []string
	for _, s := range all {
		got = append(got, s.Queue)
		one, err := insp.Stats(ctx, s.Queue)
		require.NoError(t, err)
		// The same reading but for the latency, which grew in between: the queued jobs wait.
		require.GreaterOrEqual(t, one.LatencyMS, s.LatencyMS, s.Queue)
		one.LatencyMS = s.LatencyMS
		require.Equal(t, one, s)
		k := slices.Index(names, s.Queue)
		require.EqualValues(t, k+1, s.Queued, s.Queue)
		require.EqualValues(t, 1, s.Scheduled, s.Queue)
		require.EqualValues(t, k+2, s.Enqueued, s.Queue)
	}
	require.Equal(t, []string{"a", "b-emails", "c", "d.x"}, got, "sorted by name")
}

func testReplayAll(t *testing.T, rdb redis.UniversalClient) {
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	n, err := b.insp.ReplayAll(ctx, b.queue)
	require.NoError(t, err)
	require.Zero(t, n, "nothing dead")

	const dead = 250
	jobs := b.enqueue(t, dead, nil)
	msgs := b.deliver(t, "w1", dead)
	now := time.Now().UnixMilli()
	b.kill(t, msgs, func(i int) int64 { return now - int64(i%3) })
	// An unreadable entry's dead record has no type: it cannot run again and stays.
	require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.q.Stream(), Values: []string{"foo", "bar"}}).Err())
	garbage := b.deliver(t, "w1", 1)
	require.Len(t, garbage, 1)
	gid := jobstate.DeadEntryPrefix + garbage[0].ID
	fb := jobstate.NewStore(b.rdb, "").Batch()
	f := fb.Finish(jobstate.FinishConfig{Worker: "w1"},
		[]jobstate.Transition{jobstate.Poison(&b.q, jobstate.PoisonParams{ID: gid, Entry: garbage[0].ID,
			At: time.UnixMilli(now), Reason: "unreadable"})})
	require.NoError(t, fb.Exec(ctx))
	_, err = f.Result()
	require.NoError(t, err)
	require.EqualValues(t, dead+1, stats(t, b).Dead)

	n, err = b.insp.ReplayAll(ctx, b.queue)
	require.Equal(t, dead, n)
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	require.ErrorContains(t, err, "1 dead jobs cannot run again")
	require.ErrorContains(t, err, gid)
	st := stats(t, b)
	require.EqualValues(t, 1, st.Dead)
	require.EqualValues(t, dead, st.Queued)
	got, _ := listAll(t, b.insp, b.queue, status.Queued, 0)
	require.ElementsMatch(t, ids(jobs), ids(got))
	for _, j := range got {
		require.Zero(t, j.Attempt, "a fresh set of attempts")
	}
	left, _ := listAll(t, b.insp, b.queue, status.Failed, 0)
	require.Equal(t, []string{gid}, ids(left))
}

func stats(t *testing.T, b *testBundle) *pipeline.QueueStats {
	t.Helper()
	st, err := b.insp.Stats(t.Context(), b.queue)
	require.NoError(t, err)
	return st
}

func testPurgeByID(t *testing.T, rdb redis.UniversalClient) {
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	jobs := b.enqueue(t, 5, nil)
	msgs := b.deliver(t, "w1", 3)
	b.kill(t, msgs, func(int) int64 { return time.Now().UnixMilli() })
	dead := ids(jobs[:3])
	queued := jobs[3].ID

	// Bad input deletes nothing.
	n, err := b.insp.Purge(ctx, b.queue, dead[0], "bad id")
	require.ErrorIs(t, err, pipeline.ErrInvalid)
	require.Zero(t, n)
	require.EqualValues(t, 3, stats(t, b).Dead)

	n, err = b.insp.Purge(ctx, b.queue, dead[0], queued, dead[1], "no-such-job", dead[0])
	require.Equal(t, 2, n)
	require.ErrorIs(t, err, pipeline.ErrNotDead)
	require.ErrorIs(t, err, pipeline.ErrNotFound)
	require.ErrorContains(t, err, queued+": "+pipeline.ErrNotDead.Error()+" (it is queued)")
	for _, id := range dead[:2] {
		_, err := b.insp.Get(ctx, b.queue, id)
		require.ErrorIs(t, err, pipeline.ErrNotFound)
	}
	j, err := b.insp.Get(ctx, b.queue, queued)
	require.NoError(t, err)
	require.Equal(t, status.Queued, j.Status, "a job that is not dead is left alone")
	left, _ := listAll(t, b.insp, b.queue, status.Failed, 0)
	require.Equal(t, dead[2:], ids(left))

	n, err = b.insp.Purge(ctx, b.queue)
	require.NoError(t, err)
	require.Zero(t, n)

	// More ids than one script call takes.
	b = setup(t, setupOpts{rdb: rdb})
	more := b.enqueue(t, 1200, nil)
	b.kill(t, b.deliver(t, "w1", 1200), func(int) int64 { return time.Now().UnixMilli() })
	n, err = b.insp.Purge(ctx, b.queue, ids(more[2:])...)
	require.NoError(t, err)
	require.Equal(t, 1198, n)
	left, _ = listAll(t, b.insp, b.queue, status.Failed, 0)
	require.ElementsMatch(t, ids(more[:2]), ids(left))
}

func testPurgeAll(t *testing.T, rdb redis.UniversalClient) {
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	b.enqueue(t, 1100, nil)
	now := time.Now().UnixMilli()
	// Half died a day ago.
	b.kill(t, b.deliver(t, "w1", 1100), func(i int) int64 { return now - int64(i%2)*24*3600*1000 })
	n, err := b.insp.PurgeAll(ctx, b.queue, 2*24*time.Hour)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = b.insp.PurgeAll(ctx, b.queue, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 550, n)
	n, err = b.insp.PurgeAll(ctx, b.queue, 0)
	require.NoError(t, err)
	require.Equal(t, 550, n)
	require.Zero(t, stats(t, b).Dead)
	_, err = b.insp.PurgeAll(ctx, b.queue, -time.Second)
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}

// queueKeys lists the keys of rdb that match pattern, on every master of a cluster.
func queueKeys(t *testing.T, rdb redis.UniversalClient, pattern string) []string {
	t.Helper()
	var out []string
	scan := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			out = append(out, it.Val())
		}
		return it.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex // ForEachMaster runs on every master at once
		require.NoError(t, cc.ForEachMaster(t.Context(), func(ctx context.Context, node *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, node)
		}))
	} else {
		require.NoError(t, scan(t.Context(), rdb))
	}
	slices.Sort(out)
	return out
}

func testDeleteQueue(t *testing.T, rdb redis.UniversalClient) {
	b := setup(t, setupOpts{rdb: rdb})
	ctx := t.Context()
	// A neighbour whose name extends this queue's, with keys of every kind: it must keep them.
	nb := &testBundle{rdb: rdb, client: b.client, insp: b.insp, queue: b.queue + "x",
		q: keys.New(keys.DefaultPrefix, b.queue+"x")}
	fill := func(b *testBundle) {
		b.enqueue(t, 5, nil)
		b.enqueue(t, 2, func(int) []pipeline.Option { return []pipeline.Option{pipeline.WithDelay(time.Hour)} })
		b.enqueue(t, 1, func(int) []pipeline.Option {
			return []pipeline.Option{pipeline.WithUnique("u", time.Hour), pipeline.WithRetention(time.Hour)}
		})
		b.kill(t, b.deliver(t, "w1", 2), func(int) int64 { return time.Now().UnixMilli() })
		b.deliver(t, "w1", 1)
		require.NoError(t, b.rdb.Set(ctx, b.q.RecoveryLock(), "token", time.Hour).Err())
	}
	fill(b)
	fill(nb)
	nbKeys := queueKeys(t, rdb, "conveyor:{"+nb.queue+"}:*")
	require.Greater(t, len(nbKeys), 10)
	require.NotEmpty(t, queueKeys(t, rdb, "conveyor:{"+b.queue+"}:*"))

	// Busy: queued, scheduled and in-progress jobs.
	err := b.insp.DeleteQueue(ctx, b.queue, false)
	require.ErrorIs(t, err, pipeline.ErrQueueBusy)
	require.ErrorContains(t, err, "2 scheduled, 3 queued, 1 in progress, 2 dead")
	// Still busy with only the in-progress job left (its entry is held by a worker).
	p, err := b.insp.List(ctx, b.queue, status.Scheduled, pipeline.Page{})
	require.NoError(t, err)
	q, err := b.insp.List(ctx, b.queue, status.Queued, pipeline.Page{})
	require.NoError(t, err)
	for _, j := range append(p.Jobs, q.Jobs...) {
		require.NoError(t, b.insp.Cancel(ctx, b.queue, j.ID))
	}
	err = b.insp.DeleteQueue(ctx, b.queue, false)
	require.ErrorIs(t, err, pipeline.ErrQueueBusy)
	require.ErrorContains(t, err, "0 scheduled, 0 queued, 1 in progress, 2 dead")
	require.NotEmpty(t, queueKeys(t, rdb, "conveyor:{"+b.queue+"}:*"), "a refusal deletes nothing")

	require.NoError(t, b.insp.DeleteQueue(ctx, b.queue, true))
	require.Empty(t, queueKeys(t, rdb, "conveyor:{"+b.queue+"}:*"))
	require.Equal(t, nbKeys, queueKeys(t, rdb, "conveyor:{"+nb.queue+"}:*"), "the neighbour keeps every key")
	known, err := rdb.SMembers(ctx, keys.Queues(keys.DefaultPrefix)).Result()
	require.NoError(t, err)
	require.NotContains(t, known, b.queue)
	require.Contains(t, known, nb.queue)
	require.ErrorIs(t, b.insp.DeleteQueue(ctx, b.queue, false), pipeline.ErrQueueNotFound)

	// Dead jobs keep a queue from being deleted without force: they are kept for a replay, and
	// deleting the queue loses them (they were deleted silently before). Canceled ones do not.
	c := setup(t, setupOpts{rdb: rdb})
	c.enqueue(t, 3, nil)
	c.kill(t, c.deliver(t, "w1", 2), func(int) int64 { return time.Now().UnixMilli() })
	l, err := c.insp.List(ctx, c.queue, status.Queued, pipeline.Page{})
	require.NoError(t, err)
	require.NoError(t, c.insp.Cancel(ctx, c.queue, l.Jobs[0].ID))
	err = c.insp.DeleteQueue(ctx, c.queue, false)
	require.ErrorIs(t, err, pipeline.ErrQueueBusy)
	require.ErrorContains(t, err, "0 scheduled, 0 queued, 0 in progress, 2 dead")
	_, err = c.insp.PurgeAll(ctx, c.queue, 0)
	require.NoError(t, err)
	require.NoError(t, c.insp.DeleteQueue(ctx, c.queue, false), "only finished work left")
	require.Empty(t, queueKeys(t, rdb, "conveyor:{"+c.queue+"}:*"))
}

// A prefix with MATCH's special characters is matched literally: another prefix that the
// pattern would match unescaped keeps its keys.
func testDeleteQueueEscapesPrefix(t *testing.T, rdb redis.UniversalClient) {
	u := redistest.UniqueName(t)
	queue := "q"
	literal := u + "*[ab]?"
	other := u + "xa!" // matched by the unescaped pattern u*[ab]?:{q}:*
	ctx := t.Context()
	for _, prefix := range []string{literal, other} {
		client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
		require.NoError(t, err)
		_, err = client.Enqueue(ctx, queue, pipeline.Task{Type: "t"}, pipeline.WithDelay(time.Hour))
		require.NoError(t, err)
	}
	otherKeys := queueKeys(t, rdb, other+":{*")
	require.Len(t, otherKeys, 3, "its scheduled set, job and stats")
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: literal})
	require.NoError(t, err)
	require.NoError(t, insp.DeleteQueue(ctx, queue, true))
	require.Equal(t, otherKeys, queueKeys(t, rdb, other+":{*"))
	for _, k := range queueKeys(t, rdb, u+"*") {
		require.False(t, strings.HasPrefix(k, literal), "left: %s", k)
	}
}

// A job a real worker runs is listed in progress with the worker's name, its attempt and its
// lease.
func TestInspectorListInProgressWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insp, err := pipeline.NewInspector(b.rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	started, release := make(chan string, 1), make(chan struct{})
	b.startWorker(t, pipeline.WorkerConfig{Name: "w-" + b.queue}, map[string]pipeline.HandlerFunc{
		"block": func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
			started <- j.ID
			<-release
			return nil, nil
		},
	})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "block", Payload: []byte(`{"x":1}`)})
	require.NoError(t, err)
	require.Equal(t, j.ID, <-started)
	p, err := insp.List(t.Context(), b.queue, status.InProgress, pipeline.Page{})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 1)
	got := p.Jobs[0]
	require.Equal(t, j.ID, got.ID)
	require.Equal(t, "w-"+b.queue, got.Worker)
	require.Equal(t, 1, got.Attempt)
	require.Equal(t, `{"x":1}`, string(got.Payload))
	require.Equal(t, "w-"+b.queue, p.Leases[j.ID].Worker)
	close(release)
	b.waitStatus(t, j.ID, status.Completed)
	p, err = insp.List(t.Context(), b.queue, status.InProgress, pipeline.Page{})
	require.NoError(t, err)
	require.Empty(t, p.Jobs)
}
