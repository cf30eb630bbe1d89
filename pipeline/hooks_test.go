package pipeline_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// A worker's hooks hear its scheduler's promotions (with the queue's name and the lag) and
// its recoverer's scans under the queue's lock, which it takes before and lets go after each.
func TestWorkerHooks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	promoted, scans := 0, 0
	var lockEvents []bool
	var queues []string
	hooks := pipeline.WorkerHooks{
		Promoted: func(q string, n int, lag time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			promoted += n
			queues = append(queues, q)
			if lag < 0 {
				t.Errorf("negative lag %v", lag)
			}
		},
		RecoveryLock: func(q string, held bool) {
			mu.Lock()
			defer mu.Unlock()
			lockEvents = append(lockEvents, held)
			queues = append(queues, q)
		},
		Recovered: func(q string, _ pipeline.RecoveryScan) {
			mu.Lock()
			defer mu.Unlock()
			scans++
			queues = append(queues, q)
		},
	}
	_, stop := b.startWorker(t, pipeline.WorkerConfig{Hooks: hooks, RecoveryInterval: 20 * time.Millisecond},
		map[string]pipeline.HandlerFunc{"ok": echo})
	j, err := b.client.Enqueue(t.Context(), b.queue, pipeline.Task{Type: "ok"}, pipeline.WithDelay(50*time.Millisecond))
	require.NoError(t, err)
	b.waitStatus(t, j.ID, status.Completed)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return scans >= 2 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, promoted)
	for _, q := range queues {
		require.Equal(t, b.queue, q)
	}
	require.NotEmpty(t, lockEvents)
	for i, held := range lockEvents {
		require.Equal(t, i%2 == 0, held, "lock events alternate, taken first: %v", lockEvents)
	}
	require.Len(t, lockEvents, 2*scans, "every scan took and let go of the lock")
}
