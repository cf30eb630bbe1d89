package recovery_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/recovery"
)

// NewRecoverer refuses an unusable Config, naming every unusable field at once.
func TestNewRecovererValidatesConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  recovery.Config
		bad  []string // fields the error names; none: valid
	}{
		{name: "ZeroMeansDefaults", cfg: recovery.Config{Queue: "q"}},
		{name: "Smallest", cfg: recovery.Config{Queue: "q", VisibilityTimeout: recovery.MinVisibilityTimeout,
			Interval: time.Millisecond, LockTTL: time.Millisecond, BatchSize: 1, ConsumerTTL: time.Nanosecond}},
		{name: "Largest", cfg: recovery.Config{Queue: "q", VisibilityTimeout: 24 * time.Hour, Interval: time.Hour,
			LockTTL: time.Hour, BatchSize: recovery.MaxBatchSize, ConsumerTTL: 7 * 24 * time.Hour}},
		{name: "NoQueue", cfg: recovery.Config{}, bad: []string{"Queue"}},
		{name: "QueueWithBraces", cfg: recovery.Config{Queue: "a{b}"}, bad: []string{"Queue"}},
		{name: "Partition", cfg: recovery.Config{Queue: "q#2.AbC"}},
		{name: "PartitionNotANumber", cfg: recovery.Config{Queue: "q#x"}, bad: []string{"Queue"}},
		{name: "PartitionOverMax", cfg: recovery.Config{Queue: "q#1024.AbC"}, bad: []string{"Queue"}},
		{name: "NegativeVisibilityTimeout", cfg: recovery.Config{Queue: "q", VisibilityTimeout: -time.Second}, bad: []string{"VisibilityTimeout"}},
		{name: "VisibilityTimeoutTooShortToRenew", cfg: recovery.Config{Queue: "q", VisibilityTimeout: 2 * time.Millisecond}, bad: []string{"VisibilityTimeout"}},
		{name: "NegativeInterval", cfg: recovery.Config{Queue: "q", Interval: -time.Second}, bad: []string{"Interval"}},
		{name: "SubMillisecondInterval", cfg: recovery.Config{Queue: "q", Interval: time.Microsecond}, bad: []string{"Interval"}},
		{name: "NegativeLockTTL", cfg: recovery.Config{Queue: "q", LockTTL: -1}, bad: []string{"LockTTL"}},
		{name: "SubMillisecondLockTTL", cfg: recovery.Config{Queue: "q", LockTTL: 999 * time.Microsecond}, bad: []string{"LockTTL"}},
		{name: "NegativeBatchSize", cfg: recovery.Config{Queue: "q", BatchSize: -1}, bad: []string{"BatchSize"}},
		{name: "BatchSizeOverMax", cfg: recovery.Config{Queue: "q", BatchSize: recovery.MaxBatchSize + 1}, bad: []string{"BatchSize"}},
		{name: "NegativeConsumerTTL", cfg: recovery.Config{Queue: "q", ConsumerTTL: -time.Hour}, bad: []string{"ConsumerTTL"}},
		{name: "AllAtOnce", cfg: recovery.Config{VisibilityTimeout: -1, Interval: -1, LockTTL: -1, BatchSize: -1, ConsumerTTL: -1},
			bad: []string{"Queue", "VisibilityTimeout", "Interval", "LockTTL", "BatchSize", "ConsumerTTL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := recovery.NewRecoverer(nil, tc.cfg)
			if len(tc.bad) == 0 {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, recovery.ErrInvalidConfig)
			for _, field := range tc.bad {
				require.Contains(t, err.Error(), field)
			}
		})
	}
}

// An invalid Config is an error from NewRecoverer, never silently replaced by defaults.
func TestRecovererInvalidConfig(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	f := deliverOne(t, b, deadIdle)
	for _, cfg := range []recovery.Config{
		{Interval: -time.Second},
		{BatchSize: -1},
		{LockTTL: -1},
		{BatchSize: recovery.MaxBatchSize + 1},
	} {
		cfg.Queue = b.queue
		r, err := recovery.NewRecoverer(b.rdb, cfg)
		require.ErrorIs(t, err, recovery.ErrInvalidConfig)
		require.Nil(t, r)
	}
	requireUntouched(t, b, f)
}

// TestDefaultLockTTLFor: the lock TTL follows the visibility timeout (a lease period) within
// [MinDefaultLockTTL, DefaultLockTTL], so a worker that dies holding the lock delays recovery
// by about a third of what the visibility timeout already costs, not by a fixed 10s.
func TestDefaultLockTTLFor(t *testing.T) {
	for _, tc := range []struct{ vt, want time.Duration }{
		{recovery.MinVisibilityTimeout, recovery.MinDefaultLockTTL},
		{1500 * time.Millisecond, time.Second},
		{3 * time.Second, time.Second},
		{6 * time.Second, 2 * time.Second},
		{recovery.DefaultVisibilityTimeout, recovery.DefaultLockTTL},
		{time.Hour, recovery.DefaultLockTTL},
	} {
		require.Equal(t, tc.want, recovery.DefaultLockTTLFor(tc.vt), "visibility timeout %v", tc.vt)
	}
}
