package pipeline

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// The client remembers at most MaxQueues queues, however many it registered over time (queues
// deleted to make room for others): past the bound it asks Redis each time instead.
func TestKnownQueuesCacheBounded(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.UniqueName(t)
	const most = 3
	c, err := NewClient(rdb, ClientConfig{Prefix: prefix, MaxQueues: most})
	require.NoError(t, err)
	for i := range 4 * most {
		queue := fmt.Sprintf("q%d", i)
		_, err := c.Enqueue(t.Context(), queue, Task{Type: "t"})
		require.NoError(t, err)
		// Deleted by someone else, which makes room for the next.
		require.NoError(t, rdb.SRem(t.Context(), keys.Queues(prefix), queue).Err())
	}
	n := 0
	c.known.Range(func(any, any) bool { n++; return true })
	require.Equal(t, most, n)
	require.EqualValues(t, most, c.nknown.Load())
}

// Publishing to made-up names past the bound grows no cache of the client: the names are
// refused, and their partition counts are cached only within the budget of calls that read.
func TestMadeUpQueuesLeaveCachesBounded(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	const most, names = 3, maxReadCounts + 500
	c, err := NewClient(rdb, ClientConfig{Prefix: redistest.UniqueName(t), MaxQueues: most})
	require.NoError(t, err)
	for i := range names {
		_, err := c.Enqueue(t.Context(), fmt.Sprintf("q%d", i), Task{Type: "t"})
		if i >= most {
			require.ErrorIs(t, err, ErrTooManyQueues)
		}
	}
	count := func(m *sync.Map) int {
		n := 0
		m.Range(func(any, any) bool { n++; return true })
		return n
	}
	require.Equal(t, most, count(&c.known))
	require.LessOrEqual(t, count(&c.parts), maxReadCounts+most)
}

// A queue deleted after the client registered it is refused (RequireQueues) or added again
// within knownTTL: the cache does not keep publishing to a queue nobody lists.
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
	now = now.Add(knownTTL)
	mu.Unlock()
	_, err = strict.Enqueue(t.Context(), "q", Task{Type: "t"})
	require.ErrorIs(t, err, ErrQueueNotFound)
	_, err = loose.Enqueue(t.Context(), "q", Task{Type: "t"})
	require.NoError(t, err)
	qs, err := insp.Queues(t.Context())
	require.NoError(t, err)
	require.Len(t, qs, 1, "the loose client added it again")
	require.EqualValues(t, 1, strict.nknown.Load()+loose.nknown.Load())
}
