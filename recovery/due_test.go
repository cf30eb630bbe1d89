package recovery_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/recovery"
)

// TestRecovererRequeuesAtFirstDueScan: a scan lists entries from two thirds of the visibility
// timeout, before they are due, so that the first scan that finds one idle past the timeout
// has seen it before and recovers it at once. An entry seen idle 0.8 x VT and then 1.1 x VT,
// in two scans of one observation, is requeued by the second; listing only due entries would
// defer it to a third scan, an Interval later.
func TestRecovererRequeuesAtFirstDueScan(t *testing.T) {
	t.Parallel()
	const vt = 3 * time.Second
	_, b := setup(t)
	ctx := t.Context()
	f := deliverOne(t, b, 0)
	// Interval 1s: a gap is a silence of 1.5s (half the timeout), which the steps below, one
	// call after another, stay far from even on a loaded host.
	r, err := recovery.NewRecoverer(b.rdb, recovery.Config{Queue: b.queue, VisibilityTimeout: vt, Interval: time.Second})
	require.NoError(t, err)
	for try := 1; ; try++ {
		require.LessOrEqual(t, try, 5, "the recoverer saw a gap in its observation of Redis at every try")
		// Watch Redis for a lease period while the entry's worker renews it (idle 0).
		require.Eventually(t, func() bool {
			b.makeIdle(t, f.consumer, 0, f.entry)
			res, ran, err := r.RunOnce(ctx)
			if !assert.NoError(t, err) || !assert.True(t, ran) {
				return true // failed: stop waiting
			}
			assert.Zero(t, res.Requeued+res.Deferred, "a renewed entry was taken")
			trusted, _ := r.Watching()
			return trusted
		}, 30*time.Second, 20*time.Millisecond, "no trust in 30s")
		if t.Failed() {
			return
		}
		_, gaps := r.Watching()

		b.makeIdle(t, f.consumer, vt*8/10, f.entry)
		res, _, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Requeued+res.Deferred, "an entry not yet due was taken: %+v", res)

		b.makeIdle(t, f.consumer, vt*11/10, f.entry)
		res, _, err = r.RunOnce(ctx)
		require.NoError(t, err)
		if _, now := r.Watching(); now != gaps {
			continue // this host stalled between the scans: the observation started again
		}
		require.Equal(t, recovery.Result{Requeued: 1}, res, "the first scan that found the entry due")
		requireRequeued(t, b, f, 1)
		return
	}
}
