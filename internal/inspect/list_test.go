package inspect

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/status"
)

var errInvalid = errors.New("invalid")

// setStore is a store of scheduled sets alone, in memory: what listSet reads. Any other call
// panics on the nil Backend it embeds.
type setStore struct {
	jobstate.Backend
	sets map[string][]jobstate.SetItem // by the set's key, in the set's order
	recs map[string]jobstate.Record    // by job key
}

func (s *setStore) Prefix() string { return "p" }

func (s *setStore) ScheduledPage(_ context.Context, q keys.Queue, after *jobstate.SetItem, n int) ([]jobstate.SetItem, error) {
	items := s.sets[q.Scheduled()]
	if after != nil {
		for k, it := range items {
			if it == *after {
				items = items[k+1:]
				break
			}
		}
	}
	return items[:min(n, len(items))], nil
}

// The queue has no wait lists.
func (s *setStore) HasWaitLists(context.Context, string) (bool, error) { return false, nil }

func (s *setStore) WaitListPage(context.Context, string, string, string, int, int) ([]jobstate.WaitItem, error) {
	return nil, nil
}

func (s *setStore) RecordSizes(_ context.Context, q keys.Queue, ids []string) ([]int64, error) {
	out := make([]int64, len(ids))
	for k, id := range ids {
		r := s.recs[q.Job(id)]
		out[k] = int64(len(r.Payload) + len(r.Result))
	}
	return out, nil
}

func (s *setStore) Records(_ context.Context, q keys.Queue, ids []string) ([]*jobstate.Record, error) {
	out := make([]*jobstate.Record, len(ids))
	for k, id := range ids {
		if r, ok := s.recs[q.Job(id)]; ok {
			out[k] = &r
		}
	}
	return out, nil
}

// engine is an Engine over a setStore of parts partitions of queue "q", each holding n
// scheduled jobs of size bytes of payload.
func engine(parts, n, size int) *Engine {
	s := &setStore{sets: map[string][]jobstate.SetItem{}, recs: map[string]jobstate.Record{}}
	var qs []keys.Queue
	for p := range parts {
		q := keys.New("p", keys.PartitionName("q", p, parts))
		qs = append(qs, q)
		for k := range n {
			id := fmt.Sprintf("j%d-%d", p, k)
			s.sets[q.Scheduled()] = append(s.sets[q.Scheduled()], jobstate.SetItem{Member: id, Score: int64(1000 + k)})
			s.recs[q.Job(id)] = jobstate.Record{Status: string(status.Scheduled), Payload: make([]byte, size)}
		}
	}
	return New(s, Config{Now: time.Now, Errs: Errors{Invalid: errInvalid},
		Partitions: func(context.Context, string) ([]keys.Queue, error) { return qs, nil }})
}

// ids lists a page's job ids.
func ids(p *Page) []string {
	var out []string
	for _, r := range p.Rows {
		out = append(out, r.ID)
	}
	return out
}

// A set's page ends with the job that spends the budget, and its cursor is that job's.
func TestListSetBudget(t *testing.T) {
	e := engine(1, 5, 3)
	p, err := e.List(t.Context(), "q", status.Scheduled, "", 100, 8)
	require.NoError(t, err)
	require.Equal(t, []string{"j0-0", "j0-1", "j0-2"}, ids(p))
	require.Equal(t, "1002:j0-2", p.Next)

	p, err = e.List(t.Context(), "q", status.Scheduled, p.Next, 100, 8)
	require.NoError(t, err)
	require.Equal(t, []string{"j0-3", "j0-4"}, ids(p))
	require.Empty(t, p.Next)

	// A job larger than the whole budget still makes a page of its own.
	p, err = engine(1, 2, 20).List(t.Context(), "q", status.Scheduled, "", 100, 8)
	require.NoError(t, err)
	require.Equal(t, []string{"j0-0"}, ids(p))
	require.Equal(t, "1000:j0-0", p.Next)
}

// A partitioned queue is listed partition after partition, its cursor "<partition>/<cursor>".
func TestListPartitions(t *testing.T) {
	e := engine(2, 3, 1)
	var got []string
	var cursors []string
	cursor := ""
	for {
		p, err := e.List(t.Context(), "q", status.Scheduled, cursor, 2, 1<<20)
		require.NoError(t, err)
		got = append(got, ids(p)...)
		if p.Next == "" {
			break
		}
		cursor = p.Next
		cursors = append(cursors, cursor)
	}
	require.Equal(t, []string{"j0-0", "j0-1", "j0-2", "j1-0", "j1-1", "j1-2"}, got)
	require.Equal(t, []string{"0/1001:j0-1", "1/1000:j1-0"}, cursors)

	for _, bad := range []string{"2/", "01/", "x/1:a", "1000:j0-0"} {
		_, err := e.List(t.Context(), "q", status.Scheduled, bad, 2, 1<<20)
		require.ErrorIs(t, err, errInvalid, bad)
	}
}

func TestCursorShape(t *testing.T) {
	for _, c := range []struct {
		st     status.Status
		cursor string
		ok     bool
	}{
		{status.Scheduled, "", true},
		{status.Scheduled, "1700000000000:job-1", true},
		{status.Failed, "3/1700000000000:job-1", true},
		{status.Completed, "3/", true},
		{status.Scheduled, "1700000000000", false},
		{status.Scheduled, "x:job", false},
		{status.Scheduled, "-1/", false},
		{status.Queued, "1-0", true},
		{status.Queued, "p3:", true},
		{status.Queued, "p3:1700000000000-4", true},
		{status.InProgress, "2/p3:5-5", true},
		{status.Queued, "p1:1-0", false},  // level 1 has no prefix
		{status.Queued, "p03:1-0", false}, // not the level's own spelling
		{status.Queued, "1700000000000:job", false},
		{status.InProgress, "1-x", false},
	} {
		require.Equal(t, c.ok, cursorShape(c.st, c.cursor), "%s %q", c.st, c.cursor)
	}
}

func TestLevelCursor(t *testing.T) {
	for _, l := range []int{keys.MinPriority, 2, keys.MaxPriority} {
		level, inner, ok := cutLevelCursor(levelCursor(l, "5-1"))
		require.True(t, ok)
		require.Equal(t, l, level)
		require.Equal(t, "5-1", inner)
	}
	_, _, ok := cutLevelCursor(fmt.Sprintf("p%d:", keys.MaxPriority+1))
	require.False(t, ok)
}

func TestEntryID(t *testing.T) {
	id, ok := parseEntryID("17-3")
	require.True(t, ok)
	require.Equal(t, "17-4", id.next().String())
	require.Equal(t, entryID{18, 0}, entryID{17, ^uint64(0)}.next())
	require.True(t, id.less(id.next()))
	require.False(t, id.less(id))
	for _, bad := range []string{"", "17", "17-", "a-1", "-1"} {
		_, ok := parseEntryID(bad)
		require.False(t, ok, bad)
	}
}

// chunked reads a stream in chunks, the first of streamChunk, and cuts the page at the budget
// with the entry of its last job as the cursor.
func TestChunkedBudget(t *testing.T) {
	var reads []int
	list := func(_ context.Context, _ keys.Queue, cursor string, n int) (*Page, error) {
		reads = append(reads, n)
		var from int
		if cursor != "" {
			_, err := fmt.Sscanf(cursor, "1-%d", &from)
			require.NoError(t, err)
			from++
		}
		p := &Page{}
		for k := from; k < min(from+n, 100); k++ {
			entry := fmt.Sprintf("1-%d", k)
			p.Rows = append(p.Rows, Row{ID: fmt.Sprint(k), Rec: jobstate.Record{Entry: entry, Payload: make([]byte, 10)}})
			p.Next = entry
		}
		return p, nil
	}
	bud := &pageBudget{left: 255}
	p, err := bud.chunked(list)(t.Context(), keys.New("p", "q"), "", 100)
	require.NoError(t, err)
	require.Len(t, p.Rows, 26, "the job that reaches the budget is the page's last")
	require.Equal(t, "1-25", p.Next)
	require.Equal(t, []int{streamChunk, 16}, reads, "the second read is what the budget's rest fits")
}

func TestSumStats(t *testing.T) {
	one := &jobstate.Stats{Queue: "q", Queued: 1}
	require.Same(t, one, SumStats("q", []*jobstate.Stats{one}))
	st := SumStats("q", []*jobstate.Stats{{Queued: 1, Dead: 2, GroupWaiting: 3}, {Queued: 4, Limited: 5}})
	require.Equal(t, jobstate.Stats{Queue: "q", Queued: 5, Dead: 2, GroupWaiting: 3, Limited: 5}, *st)
}
