package publish

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

var errRefused = errors.New("refused")

// newPublisher is a Publisher over rdb whose AddQueue refuses as pipeline's does: past
// maxQueues, or (require) any queue not known yet.
func newPublisher(rdb redis.UniversalClient, prefix string, maxQueues int, require bool, now func() time.Time) *Publisher {
	store := jobstate.NewStore(rdb, prefix)
	return New(Config{Store: store, Redis: rdb, Prefix: prefix, Now: now, MaxQueues: maxQueues,
		AddQueue: func(ctx context.Context, queue string) error {
			added, err := store.AddQueue(ctx, jobstate.AddQueueParams{Queue: queue, MaxQueues: maxQueues, KnownOnly: require})
			if err == nil && added != jobstate.QueueKnown {
				return fmt.Errorf("%w: %s", errRefused, queue)
			}
			return err
		},
		Refused: func(err error) bool { return errors.Is(err, errRefused) },
		ErrBusy: errors.New("busy")})
}

func count(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

// The publisher remembers at most MaxQueues queues, however many it registered over time
// (queues deleted to make room for others): past the bound it asks Redis each time instead.
func TestKnownQueuesCacheBounded(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.UniqueName(t)
	const most = 3
	p := newPublisher(rdb, prefix, most, false, time.Now)
	for i := range 4 * most {
		queue := fmt.Sprintf("q%d", i)
		require.NoError(t, p.Register(t.Context(), queue))
		// Deleted by someone else, which makes room for the next.
		require.NoError(t, rdb.SRem(t.Context(), keys.Queues(prefix), queue).Err())
	}
	require.Equal(t, most, count(&p.known))
	require.EqualValues(t, most, p.nknown.Load())
}

// Publishing to made-up names past the bound grows no cache: the names are refused, and their
// routes are cached only within the budget of calls that read. A publish reads its route,
// then registers its queue (One, Publish).
func TestMadeUpQueuesLeaveCachesBounded(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	const most, names = 3, MaxReadCounts + 500
	p := newPublisher(rdb, redistest.UniqueName(t), most, false, time.Now)
	for i := range names {
		queue := fmt.Sprintf("q%d", i)
		_, _, err := p.Route(t.Context(), queue, true)
		require.NoError(t, err)
		err = p.Register(t.Context(), queue)
		if i >= most {
			require.ErrorIs(t, err, errRefused)
		}
	}
	require.Equal(t, most, count(&p.known))
	require.LessOrEqual(t, count(&p.parts), MaxReadCounts+most)
}

// A queue refused after the publisher registered it (deleted elsewhere, RequireQueues) leaves
// the cache of known queues once KnownTTL has passed; one added again stays.
func TestKnownQueueRefusedIsForgotten(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.UniqueName(t)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	strict := newPublisher(rdb, prefix, 10, true, clock)
	loose := newPublisher(rdb, prefix, 10, false, clock)
	require.NoError(t, loose.Register(t.Context(), "q"))
	require.NoError(t, strict.Register(t.Context(), "q"))
	require.NoError(t, rdb.SRem(t.Context(), keys.Queues(prefix), "q").Err())
	require.NoError(t, strict.Register(t.Context(), "q"), "trusted within KnownTTL")
	mu.Lock()
	now = now.Add(KnownTTL)
	mu.Unlock()
	require.ErrorIs(t, strict.Register(t.Context(), "q"), errRefused)
	require.NoError(t, loose.Register(t.Context(), "q"))
	require.False(t, strict.registered("q"))
	require.True(t, loose.registered("q"))
	require.EqualValues(t, 1, strict.nknown.Load()+loose.nknown.Load())
}

// Relayout makes a cached route stale at once.
func TestRelayoutDropsRoutes(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	cmds := redistest.CountCommands(rdb)
	p := newPublisher(rdb, redistest.UniqueName(t), 10, false, time.Now)
	require.NoError(t, p.Register(t.Context(), "q"))
	for range 2 {
		_, _, err := p.Route(t.Context(), "q", true)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, cmds.Named("hgetall"), "the second read is cached")
	Relayout()
	_, _, err := p.Route(t.Context(), "q", true)
	require.NoError(t, err)
	require.EqualValues(t, 2, cmds.Named("hgetall"))
}
