package pipeline

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/publish"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// A publish reads its queue's route (partition count and job defaults) once when the count is
// not cached, and not at all when it is. The first publish to a queue is the case where the
// count cannot be cached: the queue is not registered yet, and the client's budget of counts
// for calls that only read is spent. Enqueue and EnqueueBatch used to read the route twice
// there, once for the defaults and once for the count.
func TestPublishReadsRouteOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	// Each Store.ReadRoute sends one HGETALL, of the settings record; nothing else in a
	// publish does.
	cmds := redistest.CountCommands(rdb)
	reads := func() int64 { return cmds.Named("hgetall") }
	c, err := NewClient(rdb, ClientConfig{Prefix: redistest.UniqueName(t)})
	require.NoError(t, err)
	cfg := c.publishConfig()
	cfg.ReadCounts = -1 // the budget of counts for calls that only read is spent
	c.pub = publish.New(cfg)
	ctx := t.Context()

	for _, pub := range []struct {
		name    string
		publish func(queue string) error
	}{
		{"Enqueue", func(queue string) error {
			_, err := c.Enqueue(ctx, queue, Task{Type: "t"})
			return err
		}},
		{"EnqueueDelayed", func(queue string) error {
			_, err := c.Enqueue(ctx, queue, Task{Type: "t"}, WithDelay(time.Hour))
			return err
		}},
		{"EnqueueBatch", func(queue string) error {
			_, err := c.EnqueueBatch(ctx, queue, []Task{{Type: "t"}, {Type: "t"}})
			return err
		}},
	} {
		queue := "q-" + strings.ToLower(pub.name)
		before := reads()
		require.NoError(t, pub.publish(queue))
		require.EqualValues(t, 1, reads()-before, "%s: a cold publish reads the route once", pub.name)
		// The queue is known now, so the next publish caches what it reads.
		before = reads()
		require.NoError(t, pub.publish(queue))
		require.EqualValues(t, 1, reads()-before, "%s: a publish to a known queue, its count not cached, reads the route once", pub.name)
		// A layout change anywhere in the process (parallel tests make them) drops the cached
		// route: the pair below is made again until none came between its publishes.
		for {
			layouts := publish.Layouts()
			require.NoError(t, pub.publish(queue)) // caches the route, if a change dropped it
			before = reads()
			require.NoError(t, pub.publish(queue))
			warm := reads() - before
			if publish.Layouts() == layouts {
				require.EqualValues(t, 0, warm, "%s: a warm publish (its count cached) reads none", pub.name)
				break
			}
		}
	}
}

// A publish that cannot read its queue's route because Redis is unreachable fails as the
// enqueue it is (op "enqueue"), whether or not the route was cached. The API answers with that
// op. It used to say "queues" once the cached route was publish.RouteTTL old: the API's
// TestRedisUnreachable failed so on a loaded machine, where its steps took over 5 s. The clock
// here is moved past publish.RouteTTL instead.
func TestPublishRouteFailureIsEnqueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var off atomic.Int64
	c, err := NewClient(rdb, ClientConfig{Prefix: redistest.UniqueName(t),
		Now: func() time.Time { return time.Now().Add(time.Duration(off.Load())) }})
	require.NoError(t, err)
	ctx := t.Context()
	_, err = c.Enqueue(ctx, "q", Task{Type: "t"}) // the route is cached
	require.NoError(t, err)
	require.NoError(t, srv.Stop())

	for _, stale := range []bool{false, true} {
		if stale {
			off.Store(int64(2 * publish.RouteTTL))
		}
		_, err := c.Enqueue(ctx, "q", Task{Type: "t"})
		require.Error(t, err)
		require.Equal(t, "enqueue", rediserr.OpOf(err), "Enqueue, route stale %v: %v", stale, err)
		require.Equal(t, rediserr.Unreachable, rediserr.Classify(err))
		_, err = c.EnqueueBatch(ctx, "q", []Task{{Type: "t"}, {Type: "t"}})
		require.Error(t, err)
		require.Equal(t, "enqueue", rediserr.OpOf(err), "EnqueueBatch, route stale %v: %v", stale, err)
	}
}
