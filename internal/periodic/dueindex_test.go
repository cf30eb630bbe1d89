package periodic

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// A scheduler scores a schedule in the due index by what it read of it, unless the
// schedule's Last or its definition changed since: a read older than another scheduler's
// tick must not move the schedule back to a time it is no longer due at.
func TestIndexSkipsAReadOlderThanLast(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, redistest.Client(t), time.Now().Truncate(time.Second))
	require.NoError(t, b.store.Put(ctx, Def{Name: "s", Spec: "@every 1h", Queue: "q", Type: "t"}, b.clock.Now()))
	scs, err := b.store.read(ctx, []string{"s"})
	require.NoError(t, err)
	require.Len(t, scs, 1)
	// Another scheduler ticks: Last moves on, the definition (gen) stays.
	moved := b.clock.Now().Add(time.Hour).UnixMilli()
	require.NoError(t, b.rdb.HSet(ctx, keys.ScheduleState(b.prefix, "s"), keys.ScheduleFieldLast, moved).Err())
	before := b.rdb.ZScore(ctx, keys.SchedulesDue(b.prefix), "s").Val()
	require.NoError(t, b.store.index(ctx, scs[0], b.clock.Now().Add(time.Minute)))
	require.Equal(t, before, b.rdb.ZScore(ctx, keys.SchedulesDue(b.prefix), "s").Val(), "the stale read left the index alone")
}

// A schedule scored early in the due index (stored again, or resumed: scored 0) is scored by
// its next tick at the first pass that finds it not due, so that the passes until then do
// not read it again.
func TestSchedulerScoresAnEarlyEntryByItsNextTick(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, redistest.Client(t), at(14000))
	require.NoError(t, b.store.Put(ctx, Def{Name: "c", Spec: "@every 1h", Queue: "q", Type: "t"}, b.clock.Now()))
	require.NoError(t, b.store.Put(ctx, Def{Name: "c", Spec: "@every 2h", Queue: "q", Type: "t"}, b.clock.Now()))
	due := keys.SchedulesDue(b.prefix)
	require.Zero(t, b.rdb.ZScore(ctx, due, "c").Val(), "stored again: scored early")
	_, err := b.scheduler(t).RunOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, b.jobs.ids())
	spec, err := Parse("@every 2h")
	require.NoError(t, err)
	next := spec.Next(at(14000))
	require.True(t, next.After(at(14000)))
	require.Equal(t, float64(next.UnixMilli()), b.rdb.ZScore(ctx, due, "c").Val())
}

// A page that ends the listing says so, also when it is full: no cursor to an empty page.
func TestStorePageFullLastPageHasNoNext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, redistest.Client(t), at(15000))
	for _, n := range []string{"a", "b"} {
		require.NoError(t, b.store.Put(ctx, Def{Name: n, Spec: "@daily", Queue: "q", Type: "t"}, b.clock.Now()))
	}
	page, next, err := b.store.Page(ctx, "", 2)
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Empty(t, next, "the two are all")
}
