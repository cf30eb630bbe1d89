package pipeline

import (
	"fmt"
	"testing"

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
	c := NewClient(rdb, ClientConfig{Prefix: prefix, MaxQueues: most})
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
