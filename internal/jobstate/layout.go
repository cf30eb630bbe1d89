package jobstate

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// The partition layout's plain commands: what a change of a queue's partition count
// (pipeline.Inspector.CreateQueue) reads and writes besides the jobs' own keys.

// SetClosed sets (closed, for ttl) or clears the closed flag of every partition of qs
// (keys.Queue.Closed), in one pipeline.
func SetClosed(ctx context.Context, rdb redis.UniversalClient, qs []keys.Queue, closed bool, ttl time.Duration) error {
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, q := range qs {
			if closed {
				p.Set(ctx, q.Closed(), "1", ttl)
			} else {
				p.Del(ctx, q.Closed())
			}
		}
		return nil
	})
	return rediserr.Wrap("partitions", err)
}

// WritePartitions stores queue's partition count p (1 deletes it: the plain queue).
func WritePartitions(ctx context.Context, rdb redis.UniversalClient, prefix, queue string, p int) error {
	if p == 1 {
		return ForgetPartitions(ctx, rdb, prefix, queue)
	}
	return rediserr.Wrap("partitions", rdb.HSet(ctx, keys.Partitions(prefix), queue, StoredPartitions(p)).Err())
}

// LockLayout takes queue's layout lock (keys.LayoutLock) for ttl with token; ok is false when
// another holds it.
func LockLayout(ctx context.Context, rdb redis.UniversalClient, prefix, queue, token string, ttl time.Duration) (ok bool, err error) {
	ok, err = rdb.SetNX(ctx, keys.LayoutLock(prefix, queue), token, ttl).Result()
	return ok, rediserr.Wrap("partitions", err)
}

// UnlockLayout releases queue's layout lock if token still holds it; else it expires.
func UnlockLayout(ctx context.Context, rdb redis.UniversalClient, prefix, queue, token string) {
	key := keys.LayoutLock(prefix, queue)
	if v, err := rdb.Get(ctx, key).Result(); err == nil && v == token {
		_ = rdb.Del(ctx, key).Err()
	}
}

// MoveCounters adds the counters of the partitions from to those of to and deletes them. The
// caller makes sure nothing changes the old counters meanwhile. A failure half-way can lose
// counts, since the keys are in other slots and no one step moves them. It never counts one
// twice, since each old hash is deleted right after it is added.
func MoveCounters(ctx context.Context, rdb redis.UniversalClient, from []keys.Queue, to keys.Queue) error {
	for _, q := range from {
		if q.Stats() == to.Stats() {
			continue
		}
		m, err := rdb.HGetAll(ctx, q.Stats()).Result()
		if err != nil {
			return rediserr.Wrap("partitions", fmt.Errorf("read the counters: %w", err))
		}
		if len(m) == 0 {
			continue
		}
		_, err = rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for f, v := range m {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil && n != 0 {
					pl.HIncrBy(ctx, to.Stats(), f, n)
				}
			}
			return nil
		})
		if err == nil {
			err = rdb.Del(ctx, q.Stats()).Err()
		}
		if err != nil {
			return rediserr.Wrap("partitions", fmt.Errorf("move the counters: %w", err))
		}
	}
	return nil
}

// Nodes returns, on Redis Cluster, the address of the master that holds each of qs now; nil
// on any other client.
func Nodes(ctx context.Context, rdb redis.UniversalClient, qs []keys.Queue) ([]string, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return nil, nil
	}
	out := make([]string, len(qs))
	for k, q := range qs {
		node, err := cc.MasterForKey(ctx, q.Stream())
		if err != nil {
			return nil, rediserr.Wrap("partitions", fmt.Errorf("find the node of %s: %w", q.Tag(), err))
		}
		out[k] = node.Options().Addr
	}
	return out, nil
}
