package pipeline_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// listIDs lists every job of queue in st, page after page of limit, and returns their ids
// in the listing's order.
func listIDs(t *testing.T, insp *pipeline.Inspector, queue string, st status.Status, limit int) []string {
	t.Helper()
	jobs, _ := listAll(t, insp, queue, st, limit)
	return ids(jobs)
}

// sorted is ids sorted, for comparing sets.
func sorted(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// Issue 33: a concurrency limit of 1 and three jobs: one runs, and the two deferred for the
// slot are scheduled: in the scheduled gauge (LimitWaiting names them) and listed by
// List(scheduled), where before they were in no count and no list.
func TestAccountingConcurrencyWaitersAreScheduled(t *testing.T) {
	t.Parallel()
	for _, tc := range groupClients(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{rdb: tc.rdb})
			ctx := t.Context()
			ids := make([]string, 3)
			for k := range ids {
				j, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "gate", Payload: []byte("none")})
				require.NoError(t, err)
				ids[k] = j.ID
			}
			require.NoError(t, b.insp.SetLimit(ctx, b.queue, pipeline.Limit{Concurrency: 1}))
			g := newGroupGate()
			b.startWorker(t, pipeline.WorkerConfig{Concurrency: 3, VisibilityTimeout: 3 * time.Second},
				map[string]pipeline.HandlerFunc{"gate": g.handle})
			running := g.next(t)
			var waiting []string
			for _, id := range ids {
				if id != running {
					waiting = append(waiting, id)
				}
			}
			for _, id := range waiting {
				j := b.waitStatus(t, id, status.Scheduled)
				require.NotEmpty(t, j.ID)
			}
			st := b.stats(t)
			require.EqualValues(t, 2, st.Scheduled, "the jobs waiting for the slot are scheduled")
			require.EqualValues(t, 2, st.LimitWaiting)
			require.EqualValues(t, 1, st.InProgress)
			require.EqualValues(t, 0, st.Queued)
			require.Equal(t, sorted(waiting), sorted(listIDs(t, b.insp, b.queue, status.Scheduled, 1)))
			require.Equal(t, []string{running}, listIDs(t, b.insp, b.queue, status.InProgress, 10))

			// A canceled waiter leaves the count and the list at once.
			require.NoError(t, b.client.Cancel(ctx, b.queue, waiting[0]))
			st = b.stats(t)
			require.EqualValues(t, 1, st.Scheduled)
			require.EqualValues(t, 1, st.LimitWaiting)
			require.Equal(t, waiting[1:], listIDs(t, b.insp, b.queue, status.Scheduled, 10))
			g.finish(running, nil)
			require.Equal(t, waiting[1], g.next(t))
			g.finish(waiting[1], nil)
			b.waitStatus(t, waiting[1], status.Completed)
			st = b.stats(t)
			require.Zero(t, st.Scheduled+st.LimitWaiting+st.Queued+st.InProgress)
		})
	}
}

// Issue 33: jobs waiting in a fair group's list are queued (the gauge counted them already)
// and List(queued) lists them, after the stream's entries, where before it left them out.
func TestAccountingGroupWaitersAreListedQueued(t *testing.T) {
	t.Parallel()
	for _, tc := range groupClients(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{rdb: tc.rdb})
			ctx := t.Context()
			plain, err := b.client.Enqueue(ctx, b.queue, pipeline.Task{Type: "gate", Payload: []byte("none")})
			require.NoError(t, err)
			require.NoError(t, b.insp.SetGroups(ctx, b.queue, pipeline.GroupChange{Window: 1}))
			as := publishGroup(t, b.client, b.queue, "a", 3)
			bs := publishGroup(t, b.client, b.queue, "b", 2)
			st := b.stats(t)
			require.EqualValues(t, 6, st.Queued)
			require.EqualValues(t, 3, st.GroupWaiting)
			want := []string{plain.ID, as[0], bs[0], as[1], as[2], bs[1]}
			for _, limit := range []int{1, 2, 4, 100} {
				got := listIDs(t, b.insp, b.queue, status.Queued, limit)
				require.Len(t, got, len(want), "page size %d", limit)
				require.Equal(t, want[:3], got[:3], "the stream's entries come first")
				require.Equal(t, sorted(want[3:]), sorted(got[3:]), "then the groups' waiting jobs")
			}
		})
	}
}

// Issue 33: a workflow's waiting tasks are counted by the waiting gauge and listed by
// List(waiting), which was refused; they leave both when they are queued or canceled.
func TestAccountingWorkflowWaitingTasks(t *testing.T) {
	t.Parallel()
	for _, tc := range groupClients(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{rdb: tc.rdb})
			ctx := t.Context()
			wf, err := b.client.Workflow(ctx, b.queue, pipeline.Chain(
				pipeline.Task{Type: "gate", Payload: []byte("1")},
				pipeline.Task{Type: "gate", Payload: []byte("2")},
				pipeline.Task{Type: "gate", Payload: []byte("3")}))
			require.NoError(t, err)
			id := func(name string) string {
				for _, tk := range wf.Tasks {
					if tk.Name == name {
						return tk.JobID
					}
				}
				t.Fatalf("no task %s", name)
				return ""
			}
			st := b.stats(t)
			require.EqualValues(t, 2, st.Waiting)
			require.EqualValues(t, 1, st.Queued)
			require.Equal(t, []string{id("2"), id("3")}, listIDs(t, b.insp, b.queue, status.Waiting, 1))

			g := newGroupGate()
			b.startWorker(t, pipeline.WorkerConfig{Concurrency: 2, VisibilityTimeout: 3 * time.Second},
				map[string]pipeline.HandlerFunc{"gate": g.handle})
			require.Equal(t, id("1"), g.next(t))
			g.finish(id("1"), nil)
			require.Equal(t, id("2"), g.next(t))
			st = b.stats(t)
			require.EqualValues(t, 1, st.Waiting)
			require.Equal(t, []string{id("3")}, listIDs(t, b.insp, b.queue, status.Waiting, 10))
			// Task 2 dies: task 3 is canceled and leaves the index.
			g.finish(id("2"), pipeline.SkipRetry(context.Canceled))
			b.waitStatus(t, id("3"), status.Canceled)
			require.Zero(t, b.stats(t).Waiting)
			require.Empty(t, listIDs(t, b.insp, b.queue, status.Waiting, 10))
			// Its replay restores task 3 as waiting, back in the index.
			require.NoError(t, b.insp.Replay(ctx, b.queue, id("2")))
			b.waitStatus(t, id("3"), status.Waiting)
			require.EqualValues(t, 1, b.stats(t).Waiting)
			require.Equal(t, []string{id("3")}, listIDs(t, b.insp, b.queue, status.Waiting, 10))
			require.Equal(t, id("2"), g.next(t))
			// Canceled by a caller while waiting: out of the index.
			require.NoError(t, b.client.Cancel(ctx, b.queue, id("3")))
			require.Zero(t, b.stats(t).Waiting)
			require.Empty(t, listIDs(t, b.insp, b.queue, status.Waiting, 10))
			g.finish(id("2"), nil)
		})
	}
}

// A partitioned queue's listings go through each partition's wait lists too: the cursor
// "<partition>/<wait-list cursor>" carries a page from one partition's group wait lists into
// the next partition.
func TestAccountingPartitionedWaitLists(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	x := newPartitioned(t, rdb, redistest.UniqueName(t), 3)
	ctx := t.Context()
	require.NoError(t, x.insp.SetGroups(ctx, x.queue, pipeline.GroupChange{Window: 1}))
	var want []string
	for _, g := range []string{"a", "b", "c", "d"} {
		want = append(want, publishGroup(t, x.client, x.queue, g, 3)...)
	}
	wf, err := x.client.Workflow(ctx, x.queue, pipeline.Chain(pipeline.Task{Type: "gate"}, pipeline.Task{Type: "gate"},
		pipeline.Task{Type: "gate"}))
	require.NoError(t, err)
	want = append(want, wf.Tasks[0].JobID)
	st, err := x.insp.Stats(ctx, x.queue)
	require.NoError(t, err)
	require.EqualValues(t, len(want), st.Queued)
	require.EqualValues(t, 2, st.Waiting)
	for _, limit := range []int{1, 2, 5, 100} {
		require.Equal(t, sorted(want), sorted(listIDs(t, x.insp, x.queue, status.Queued, limit)), "page size %d", limit)
		require.Equal(t, sorted([]string{wf.Tasks[1].JobID, wf.Tasks[2].JobID}),
			sorted(listIDs(t, x.insp, x.queue, status.Waiting, limit)), "page size %d", limit)
	}
	// A cursor of a wait list that is not well formed is refused.
	for _, bad := range []string{"gw:", "gw:!!:0", "gw::x", "0/gw::-1", "lw::0"} {
		_, err := x.insp.List(ctx, x.queue, status.Queued, pipeline.Page{Cursor: bad})
		require.ErrorIs(t, err, pipeline.ErrInvalid, bad)
	}
}
