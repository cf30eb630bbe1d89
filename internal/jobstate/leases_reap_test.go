package jobstate_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/script"
)

// The keeper takes back a few dead holders a call (8): the next call takes the rest, so
// more dead holders than one call reaps all come back. A reaped holder must leave the lease
// set: left there, every call would reap the same oldest ones again and the others' slots
// would stay taken for good.
func TestLeaseKeeperTakesBackMoreDeadHoldersThanOneCallReaps(t *testing.T) {
	t.Parallel()
	const dead = 9 // one more than a call reaps (lua/limits.lua cv_reap_holders)
	lq := newLeaseQueue(t, jobstate.Limit{Concurrency: dead})
	for k := range dead {
		h := jobstate.Holder{Name: fmt.Sprintf("dead/%d", k), Lease: time.Millisecond}
		res := lq.admit(h, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}}, nil)
		require.Equal(t, []jobstate.LeaseGrant{{Names: 1}}, res.Grants)
	}
	for k := range dead {
		lq.runOut(fmt.Sprintf("dead/%d", k))
	}
	live := jobstate.Holder{Name: "live/1", Lease: time.Minute}
	lq.keep(live, false)
	live.Known = true
	lq.keep(live, false)
	require.Zero(t, lq.taken("q"), "every dead holder's slot is back after two calls")
	require.Equal(t, []string{"live/1"}, lq.rdb.ZRange(t.Context(), lq.q.LimitPrefix()+"hz:", 0, -1).Val(),
		"the dead holders left the lease set")
}

// A holder is told of the instances it holds slots of that have waiting jobs, not of every
// instance it holds: told of one without waiters, its worker would give back slots it will
// want again at once.
func TestLeaseNamesOnlyTheHoldersInstancesWithWaiters(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{PerKey: true, Concurrency: 1})
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	lq.admit(a, []jobstate.LeaseRequest{{Inst: "qk:x", Names: []int{0}}}, nil)
	b := jobstate.Holder{Name: "b/1", Lease: time.Minute}
	res := lq.admit(b, []jobstate.LeaseRequest{{Inst: "qk:y", Names: []int{0}}}, lq.read("y", "j1", "j2"))
	require.Equal(t, []script.Code{script.OK, script.Deferred}, codes(res.Jobs), "j2 waits for y's slot")
	a.Known, b.Known = true, true
	_, waiting := lq.keep(a, false)
	require.Empty(t, waiting, "nobody waits for x")
	_, waiting = lq.keep(b, false)
	require.Equal(t, []string{"qk:y"}, waiting)
}

// A job asked about again after a lost reply (fenced) is granted only while it is still
// live: one canceled meanwhile is refused, though the call has a slot for it.
func TestLeaseFencedJobNoLongerLiveIsRefused(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t, jobstate.Limit{Concurrency: 1})
	items := lq.read("", "j1")
	row, err := jobstate.NewStore(lq.rdb, "").Cancel(t.Context(), lq.q, jobstate.CancelParams{ID: "j1", Now: time.Now(), Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, script.OK, row.Code)
	items[0].Fence = true
	a := jobstate.Holder{Name: "a/1", Lease: time.Minute}
	res := lq.admit(a, []jobstate.LeaseRequest{{Inst: "q", Names: []int{0}}}, items)
	require.Equal(t, []jobstate.LeaseGrant{{Names: 1}}, res.Grants)
	require.Equal(t, []script.Code{script.Refused}, codes(res.Jobs), "canceled since it was read")
}
