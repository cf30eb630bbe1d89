package jobstate

import (
	"context"
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
)

var (
	//go:embed latency.lua
	latencySrc    string
	latencyScript = newScript(latencySrc)
)

// Latency returns the latency of each of qs (queues or partitions), in milliseconds by Redis's
// clock: the age of its oldest job ready to run, its first stream entry, over its priority
// levels, that no worker was handed yet (latency.lua); 0 when none waits. A job that waits for
// its time, a slot or a place in its group is not ready yet: it is in no stream. One script a
// queue, all in one pipelined round trip (one per node on a cluster). The caller takes the
// largest over a queue's partitions.
func Latency(ctx context.Context, rdb redis.UniversalClient, qs []keys.Queue) ([]int64, error) {
	if len(qs) == 0 {
		return nil, nil
	}
	calls := make([]script.Call, len(qs))
	for k, q := range qs {
		streams := make([]string, keys.MaxPriority)
		for l := range streams {
			streams[l] = q.LevelStream(l + 1)
		}
		calls[k] = script.Call{Script: latencyScript, Keys: streams, Args: []any{keys.Group}}
	}
	cmds, err := runCalls(ctx, rdb, calls)
	out := make([]int64, len(qs))
	for k, cmd := range cmds {
		r, derr := decode("stats", cmd)
		if derr == nil {
			derr = r.want(1)
		}
		if derr != nil {
			return nil, derr
		}
		out[k] = r.int(0)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
