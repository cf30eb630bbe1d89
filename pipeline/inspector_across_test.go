package pipeline_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// listAcross pages through ListAllQueues of st with limit and returns the jobs as
// "<queue>/<id>", in the order listed, and the pages.
func listAcross(t *testing.T, insp *pipeline.Inspector, st status.Status, limit int, maxBytes int64) ([]string, int) {
	t.Helper()
	var all []string
	cursor, pages := "", 0
	for {
		p, err := insp.ListAllQueues(t.Context(), st, pipeline.Page{Cursor: cursor, Limit: limit, MaxBytes: maxBytes})
		require.NoError(t, err)
		pages++
		if limit > 0 {
			require.LessOrEqual(t, len(p.Jobs), limit)
		}
		if maxBytes == 1 {
			require.LessOrEqual(t, len(p.Jobs), 1, "a page past its byte budget")
		}
		for _, j := range p.Jobs {
			require.Equal(t, st, j.Status, j.ID)
			all = append(all, j.Queue+"/"+j.ID)
		}
		if p.Next == "" {
			return all, pages
		}
		require.NotEqual(t, cursor, p.Next)
		cursor = p.Next
		require.Less(t, pages, 10_000, "ListAllQueues never ends")
	}
}

// A listing across queues lists every job of the status once, queue after queue in name order
// and in each queue List's own order, whatever the page size: partitioned queues, priority
// levels and queues with none of the status among them.
func TestListAllQueues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client(t) }},
		// The partitions of a queue spread over the slots: every page's reads cross nodes.
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testListAllQueues(t, tc.client(t))
		})
	}
}

func testListAllQueues(t *testing.T, rdb redis.UniversalClient) {
	ctx := t.Context()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = insp.CreateQueue(ctx, "parts", pipeline.QueueOptions{Partitions: 3})
	require.NoError(t, err)

	// Queue name -> jobs queued (some at a lower level) and scheduled.
	plan := []struct {
		queue             string
		queued, scheduled int
	}{{"parts", 7, 5}, {"a", 3, 0}, {"empty", 0, 0}, {"z", 1, 4}, {"b.only-scheduled", 0, 2}}
	for _, p := range plan {
		for k := range p.queued {
			_, err := client.Enqueue(ctx, p.queue, pipeline.Task{Type: "t", Payload: []byte(`"x"`)}, pipeline.WithID(fmt.Sprintf("q%d", k)),
				pipeline.WithPriority(1+k%2))
			require.NoError(t, err)
		}
		for k := range p.scheduled {
			_, err := client.Enqueue(ctx, p.queue, pipeline.Task{Type: "t"}, pipeline.WithID(fmt.Sprintf("s%d", k)),
				pipeline.WithDelay(time.Duration(k+1)*time.Hour))
			require.NoError(t, err)
		}
	}
	// What List says, queue by queue in name order: the listing across queues must be that.
	names, err := insp.QueueNames(ctx)
	require.NoError(t, err)
	require.True(t, slices.IsSorted(names))
	want := map[status.Status][]string{}
	for _, st := range []status.Status{status.Queued, status.Scheduled, status.Failed} {
		for _, n := range names {
			jobs, _ := listAll(t, insp, n, st, 0)
			for _, j := range jobs {
				want[st] = append(want[st], n+"/"+j.ID)
			}
		}
	}
	require.Len(t, want[status.Queued], 11)
	require.Len(t, want[status.Scheduled], 11)

	for _, st := range []status.Status{status.Queued, status.Scheduled, status.Failed} {
		for _, limit := range []int{1, 2, 3, 5, 0} {
			got, pages := listAcross(t, insp, st, limit, 0)
			require.Equal(t, want[st], got, "%s, limit %d", st, limit)
			if limit > 0 {
				require.GreaterOrEqual(t, pages, len(want[st])/limit)
			}
		}
	}
	// A byte budget smaller than a job: one job a page, every job once.
	got, _ := listAcross(t, insp, status.Queued, 0, 1)
	require.Equal(t, want[status.Queued], got)
}

// The dead jobs of every queue: the case, where 'dead list' read one queue.
func TestListAllQueuesDead(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	var want []string
	for _, q := range []string{"billing", "emails"} {
		for range 2 {
			want = append(want, q+"/"+jobtest.Seed(t, rdb, q, status.Failed, jobtest.Opts{}).ID)
		}
		jobtest.Seed(t, rdb, q, status.Queued, jobtest.Opts{})
	}
	got, _ := listAcross(t, insp, status.Failed, 1, 0)
	require.ElementsMatch(t, want, got)
	require.Equal(t, "billing", got[0][:len("billing")], "queue by queue, in name order")
}

// A page of in_progress jobs keys its leases by job id: two queues' jobs of one id are never on
// one page, and both are listed.
func TestListAllQueuesInProgressSameID(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	for _, q := range []string{"a", "b"} {
		jobtest.Seed(t, rdb, q, status.InProgress, jobtest.Opts{Options: []pipeline.Option{pipeline.WithID("same")}})
	}
	p, err := insp.ListAllQueues(t.Context(), status.InProgress, pipeline.Page{})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 1)
	require.Equal(t, "a", p.Jobs[0].Queue)
	require.Equal(t, "jobtest", p.Leases["same"].Worker)
	require.Equal(t, "b/", p.Next)
	p, err = insp.ListAllQueues(t.Context(), status.InProgress, pipeline.Page{Cursor: p.Next})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 1)
	require.Equal(t, "b", p.Jobs[0].Queue)
	require.Empty(t, p.Next)
}

func TestListAllQueuesRefusals(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		st   status.Status
		page pipeline.Page
	}{
		{"unknown status", "lost", pipeline.Page{}},
		{"negative limit", status.Queued, pipeline.Page{Limit: -1}},
		{"negative budget", status.Queued, pipeline.Page{MaxBytes: -1}},
		{"cursor without a queue", status.Queued, pipeline.Page{Cursor: "12-0"}},
		{"cursor with a bad queue", status.Queued, pipeline.Page{Cursor: "a:b/12-0"}},
		{"cursor with an empty queue", status.Queued, pipeline.Page{Cursor: "/12-0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := insp.ListAllQueues(t.Context(), tc.st, tc.page)
			require.ErrorIs(t, err, pipeline.ErrInvalid)
		})
	}
}

// The separator of a cursor across queues is never in a queue name.
func TestAcrossQueuesSepIsNoQueueName(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	c, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	_, err = c.Enqueue(t.Context(), "a"+string(pipeline.AcrossQueuesSep)+"b", pipeline.Task{Type: "t"})
	require.ErrorIs(t, err, pipeline.ErrInvalid)
}
