package pipeline

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// routeReads counts the reads of a prefix's settings records: each Store.ReadRoute, the
// publish's read of a queue's partition count and defaults, sends one HGETALL of them.
type routeReads struct {
	prefix string
	n      atomic.Int64
}

func (h *routeReads) count(cmd redis.Cmder) {
	args := cmd.Args()
	if strings.EqualFold(cmd.Name(), "hgetall") && len(args) > 1 {
		if key, _ := args[1].(string); strings.HasPrefix(key, jobstate.SettingsKey(h.prefix, "")) {
			h.n.Add(1)
		}
	}
}

func (h *routeReads) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *routeReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *routeReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// A publish reads its queue's route (partition count and job defaults) once when the count is
// not cached, and not at all when it is. The first publish to a queue is the case where the
// count cannot be cached: the queue is not registered yet, and the client's budget of counts
// for calls that only read is spent. Enqueue and EnqueueBatch used to read the route twice
// there, once for the defaults and once for the count.
func TestPublishReadsRouteOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := redistest.UniqueName(t)
	reads := &routeReads{prefix: prefix}
	rdb.AddHook(reads)
	c, err := NewClient(rdb, ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	c.nread.Store(maxReadCounts)
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
		before := reads.n.Load()
		require.NoError(t, pub.publish(queue))
		require.EqualValues(t, 1, reads.n.Load()-before, "%s: a cold publish reads the route once", pub.name)
		// The queue is known now, so the next publish caches what it reads.
		before = reads.n.Load()
		require.NoError(t, pub.publish(queue))
		require.EqualValues(t, 1, reads.n.Load()-before, "%s: a publish to a known queue, its count not cached, reads the route once", pub.name)
		before = reads.n.Load()
		require.NoError(t, pub.publish(queue))
		require.EqualValues(t, 0, reads.n.Load()-before, "%s: a warm publish (its count cached) reads none", pub.name)
	}
}
