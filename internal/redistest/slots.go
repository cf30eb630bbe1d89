package redistest

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// MasterOf returns the address of the master that holds key's slot (a key or a sharded
// Pub/Sub channel), as the cluster reports it now.
func MasterOf(ctx context.Context, cc *redis.ClusterClient, key string) (string, error) {
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", err
	}
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start <= slot && slot <= r.End {
				for _, n := range sh.Nodes {
					if n.Role == "master" {
						return n.IP + ":" + strconv.FormatInt(n.Port, 10), nil
					}
				}
			}
		}
	}
	return "", fmt.Errorf("redistest: no master holds slot %d", slot)
}

// SlotNodes returns clients of the master that holds key's slot and of another master of c, and
// the slot. It is for a test that moves the slot between them. The clients are closed in
// tb.Cleanup.
func (c *Cluster) SlotNodes(tb testing.TB, cc *redis.ClusterClient, key string) (own, other *redis.Client, slot int) {
	tb.Helper()
	ctx := context.Background()
	from, err := MasterOf(ctx, cc, key)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	to := c.Addrs[0]
	if to == from {
		to = c.Addrs[1]
	}
	node := func(addr string) *redis.Client {
		r := redis.NewClient(&redis.Options{Addr: addr})
		tb.Cleanup(func() { _ = r.Close() })
		return r
	}
	return node(from), node(to), int(cc.ClusterKeySlot(ctx, key).Val())
}
