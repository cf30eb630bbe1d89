package pipeline

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/publish"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// A queue deleted after the client registered it is refused (RequireQueues) or added again
// within publish.KnownTTL: the cache does not keep publishing to a queue nobody lists.
func TestKnownQueueDeletedElsewhere(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.UniqueName(t)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	insp, err := NewInspector(rdb, InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	strict, err := NewClient(rdb, ClientConfig{Prefix: prefix, RequireQueues: true, Now: clock})
	require.NoError(t, err)
	loose, err := NewClient(rdb, ClientConfig{Prefix: prefix, Now: clock})
	require.NoError(t, err)
	_, err = insp.CreateQueue(t.Context(), "q", QueueOptions{})
	require.NoError(t, err)
	for _, c := range []*Client{strict, loose} {
		_, err = c.Enqueue(t.Context(), "q", Task{Type: "t"})
		require.NoError(t, err)
	}
	require.NoError(t, insp.DeleteQueue(t.Context(), "q", true))
	mu.Lock()
	now = now.Add(publish.KnownTTL)
	mu.Unlock()
	_, err = strict.Enqueue(t.Context(), "q", Task{Type: "t"})
	require.ErrorIs(t, err, ErrQueueNotFound)
	_, err = loose.Enqueue(t.Context(), "q", Task{Type: "t"})
	require.NoError(t, err)
	qs, err := insp.Queues(t.Context())
	require.NoError(t, err)
	require.Len(t, qs, 1, "the loose client added it again")
}
