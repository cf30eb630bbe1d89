package redistest

import (
	"context"
	"fmt"
	"strconv"

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
