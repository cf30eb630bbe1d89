package inspect

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/status"
)

// Why's table: each reason from the record and facts that make it the first that holds, and
// the facts that come before it in status.Reasons' order.
func TestWhy(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_800_000_000_000)
	later, earlier := now.Add(time.Minute), now.Add(-time.Minute)
	reading := Readers{Any: true, Types: map[string]bool{"sleep": true}}
	old := Readers{Any: true, AllTypes: true} // a worker whose heartbeat lists no types
	mark := func(at time.Time, inst string) string { return strconv.FormatInt(at.UnixMilli(), 10) + " " + inst }
	one := &jobstate.Limit{Concurrency: 1}
	cases := []struct {
		name string
		rec  jobstate.Record
		f    JobFacts
		want *Wait
	}{
		{"in progress", jobstate.Record{Status: "in_progress"}, JobFacts{}, nil},
		{"completed", jobstate.Record{Status: "completed"}, JobFacts{}, nil},
		{"dependencies", jobstate.Record{Status: "waiting", WorkflowKey: "wf", WfDeps: []string{"w1.A", "w1.B", "w1.C"}},
			JobFacts{Outcomes: map[string]string{"C": "C", "B": "F"}},
			&Wait{Kind: status.Dependencies, Tasks: []string{"A", "B"}, Detail: "waiting for tasks A, B"}},
		{"dependencies of a Finally task", jobstate.Record{Status: "waiting", WfFinally: true, WfDeps: []string{"w1.A", "w1.B"}},
			JobFacts{Outcomes: map[string]string{"B": "F"}},
			&Wait{Kind: status.Dependencies, Tasks: []string{"A"}, Detail: "waiting for task A"}},
		{"concurrency limit", jobstate.Record{Status: "scheduled", LimitWait: "q", RunAt: earlier},
			JobFacts{Now: now, Limit: one, Held: 1},
			&Wait{Kind: status.ConcurrencyLimit, Scope: "queue", Held: 1, Slots: 1, Detail: "concurrency limit of queue: 1 of 1 slots held"}},
		{"concurrency limit with no reader", jobstate.Record{Status: "scheduled", LimitWait: "tk:sleep k1", RunAt: earlier},
			JobFacts{Now: now, Limit: &jobstate.Limit{Concurrency: 3}, Held: 3},
			&Wait{Kind: status.ConcurrencyLimit, Scope: "type sleep key k1", Held: 3, Slots: 3, Detail: "concurrency limit of type sleep key k1: 3 of 3 slots held"}},
		{"concurrency limit removed", jobstate.Record{Status: "scheduled", LimitWait: "t:sleep"}, JobFacts{Held: 2},
			&Wait{Kind: status.ConcurrencyLimit, Scope: "type sleep", Held: 2,
				Detail: "a slot of type sleep (2 held; it has no concurrency limit now: the next slot given back wakes it)"}},
		{"overdue with no reader", jobstate.Record{Status: "scheduled", RunAt: earlier}, JobFacts{Now: now},
			&Wait{Kind: status.NoReader, Until: earlier, Detail: "no live worker reads queue q (due since " + stamp(earlier) + ")"}},
		{"delay with no reader yet", jobstate.Record{Status: "scheduled", RunAt: later}, JobFacts{Now: now},
			&Wait{Kind: status.Due, Cause: "delay", Until: later, Detail: "due at " + stamp(later) + " (delay)"}},
		{"rate limit", jobstate.Record{Status: "scheduled", Type: "sleep", RunAt: later, RateWait: mark(later, "t:sleep")}, JobFacts{Now: now, Readers: reading},
			&Wait{Kind: status.RateLimit, Scope: "type sleep", Until: later, Detail: "rate limit of type sleep until " + stamp(later)}},
		{"an outdated rate mark", jobstate.Record{Status: "scheduled", Type: "sleep", RunAt: later, ScheduledFor: "retry", RateWait: mark(earlier, "q")},
			JobFacts{Now: now, Readers: reading},
			&Wait{Kind: status.Due, Cause: "retry", Until: later, Detail: "due at " + stamp(later) + " (retry backoff)"}},
		{"debounce", jobstate.Record{Status: "scheduled", Type: "sleep", RunAt: later, Debounce: "k"}, JobFacts{Now: now, Readers: reading},
			&Wait{Kind: status.Debounce, Until: later, Detail: "debounce window until " + stamp(later)}},
		{"a debounced job's retry", jobstate.Record{Status: "scheduled", Type: "sleep", RunAt: later, Debounce: "k", ScheduledFor: "retry", StartedAt: earlier},
			JobFacts{Now: now, Readers: reading},
			&Wait{Kind: status.Due, Cause: "retry", Until: later, Detail: "due at " + stamp(later) + " (retry backoff)"}},
		{"snooze", jobstate.Record{Status: "scheduled", Type: "sleep", RunAt: later, ScheduledFor: "snooze"}, JobFacts{Now: now, Readers: reading},
			&Wait{Kind: status.Due, Cause: "snooze", Until: later, Detail: "due at " + stamp(later) + " (snooze)"}},
		{"a retry of a type no worker handles", jobstate.Record{Status: "scheduled", Type: "ecoh", RunAt: later, ScheduledFor: "retry"},
			JobFacts{Now: now, Readers: reading},
			&Wait{Kind: status.NoHandler, Detail: "no live worker of queue q handles type ecoh (they handle sleep)"}},
		{"group window", jobstate.Record{Status: "queued", Group: "g"}, JobFacts{Position: 2},
			&Wait{Kind: status.GroupWindow, Group: "g", Position: 2, Detail: "group g's window is full (position 2 in its wait list)"}},
		{"no reader", jobstate.Record{Status: "queued", Entry: "1-0", Type: "sleep"}, JobFacts{Paused: true},
			&Wait{Kind: status.NoReader, Detail: "no live worker reads queue q"}},
		{"paused", jobstate.Record{Status: "queued", Entry: "1-0", Type: "ecoh"}, JobFacts{Paused: true, Readers: reading},
			&Wait{Kind: status.Paused, Detail: "queue q is paused"}},
		{"no handler", jobstate.Record{Status: "queued", Entry: "1-0", Type: "ecoh"}, JobFacts{Readers: reading, Ahead: 3},
			&Wait{Kind: status.NoHandler, Detail: "no live worker of queue q handles type ecoh (they handle sleep)"}},
		{"an old worker handles every type", jobstate.Record{Status: "queued", Entry: "1-0", Type: "ecoh"}, JobFacts{Readers: old},
			&Wait{Kind: status.Ready, Detail: "ready: the next free worker slot takes it"}},
		{"priority", jobstate.Record{Status: "queued", Entry: "1-0", Type: "sleep", Priority: 3}, JobFacts{Readers: reading, Ahead: 5},
			&Wait{Kind: status.Priority, Jobs: 5, Detail: "behind 5 jobs of a higher priority"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, Why("q", &c.rec, c.f))
		})
	}
}

// Every reason Why answers is one of status.Reasons: the table above covers them all.
func TestWhyCoversEveryReason(t *testing.T) {
	t.Parallel()
	for _, r := range status.Reasons() {
		require.NotEmpty(t, r.Help(), r)
	}
}

func TestLimitScope(t *testing.T) {
	t.Parallel()
	for inst, want := range map[string]string{"q": "queue", "t:sleep": "type sleep", "qk:k 1": "key k 1", "tk:sleep k": "type sleep key k"} {
		require.Equal(t, want, LimitScope(inst))
		require.Equal(t, map[string]string{"q": "q", "t:sleep": "t:sleep", "qk:k 1": "qk", "tk:sleep k": "tk:sleep"}[inst],
			jobstate.LimitInstanceField(inst))
	}
}

// The counts by reason split the gauges, and add up to them.
func TestCounts(t *testing.T) {
	t.Parallel()
	reading := Readers{Any: true}
	st := &jobstate.Stats{Scheduled: 7, LimitWaiting: 2, Queued: 10, GroupWaiting: 3, Waiting: 4, InProgress: 1}
	cases := []struct {
		name string
		f    QueueFacts
		want map[status.Reason]int64
	}{
		{"read", QueueFacts{Readers: reading, Overdue: 1, Behind: 4}, map[status.Reason]int64{status.Dependencies: 4,
			status.ConcurrencyLimit: 2, status.GroupWindow: 3, status.Due: 5, status.Priority: 4, status.Ready: 3}},
		{"paused", QueueFacts{Readers: reading, Paused: true, Behind: 4}, map[status.Reason]int64{status.Dependencies: 4,
			status.ConcurrencyLimit: 2, status.GroupWindow: 3, status.Due: 5, status.Paused: 7}},
		{"no reader", QueueFacts{Overdue: 2, Paused: true}, map[status.Reason]int64{status.Dependencies: 4,
			status.ConcurrencyLimit: 2, status.GroupWindow: 3, status.Due: 3, status.NoReader: 9}},
		{"behind more than queued (read apart)", QueueFacts{Readers: reading, Behind: 40}, map[status.Reason]int64{status.Dependencies: 4,
			status.ConcurrencyLimit: 2, status.GroupWindow: 3, status.Due: 5, status.Priority: 7}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Counts(st, c.f)
			require.Equal(t, c.want, got)
			var sum int64
			for _, n := range got {
				sum += n
			}
			require.Equal(t, st.Scheduled+st.Queued+st.Waiting, sum)
		})
	}
	require.Nil(t, Counts(&jobstate.Stats{}, QueueFacts{}))
	require.Equal(t, int64(4), behind([4]int64{0, 2, 3, 1}))
}
