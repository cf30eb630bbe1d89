package jobstate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
)

// Canceling a debounced job ends its window: the debounce key, which has no expiry of its
// own, goes with it (left, it would stay for good when the key is never published again).
func TestDebounceCancelEndsTheWindow(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	ctx := t.Context()
	q := keys.New(keys.DefaultPrefix, redistest.UniqueName(t))
	j := jobstate.NewJob{ID: "a", Type: "t", MaxRetries: 1, Debounce: "k", DebounceQuiet: time.Hour,
		DebounceMaxWait: time.Hour}
	c := jobstate.DebounceCall(q, &j)
	_, err := jobstate.DebounceReply(c.Script.Run(ctx, rdb, c.Keys, c.Args...))
	require.NoError(t, err)
	require.Equal(t, "a", rdb.Get(ctx, q.Debounce("k")).Val())
	row, err := jobstate.NewStore(rdb, "").Cancel(ctx, q, jobstate.CancelParams{ID: "a", Now: time.Now(), Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, script.OK, row.Code)
	require.Zero(t, rdb.Exists(ctx, q.Debounce("k")).Val(), "the window ended with its job")
}

// Delete takes a queued job (as a scheduled one) out at once, record and all.
func TestCancelDeletesAQueuedJob(t *testing.T) {
	t.Parallel()
	lq := newLeaseQueue(t)
	lq.read("", "j1")
	require.Equal(t, "queued", lq.status("j1"))
	row, err := jobstate.NewStore(lq.rdb, "").Cancel(t.Context(), lq.q, jobstate.CancelParams{ID: "j1", Now: time.Now(), Delete: true})
	require.NoError(t, err)
	require.Equal(t, script.OK, row.Code)
	require.Zero(t, lq.rdb.Exists(t.Context(), lq.q.Job("j1")).Val(), "deleted, no tombstone")
}
