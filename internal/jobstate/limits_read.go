package jobstate

import (
	"context"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// ReadLimitsOf reads the limits of queues qs in one pipeline (one round trip on a standalone
// server, one per node involved on a cluster): out[k] is qs[k]'s limits, sorted as ReadLimits
// sorts them. For what reads many queues at once: the listing of every queue's limits, and the
// metrics' queue collector.
func ReadLimitsOf(ctx context.Context, rdb redis.Cmdable, qs []keys.Queue) ([][]Limit, error) {
	if len(qs) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(qs))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, q := range qs {
			cmds[k] = p.HGetAll(ctx, q.Limits())
		}
		return nil
	})
	if err != nil {
		return nil, rediserr.Wrap("limits", err)
	}
	out := make([][]Limit, len(qs))
	for k, c := range cmds {
		if out[k], err = decodeLimits(c.Val()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decodeLimits decodes a limits hash, sorted by scope (the queue's first, then by type). A
// field that does not decode is an error naming it: limits are an operator's settings, and a
// worker that silently ignored one would break it.
func decodeLimits(m map[string]string) ([]Limit, error) {
	out := make([]Limit, 0, len(m))
	for f, v := range m {
		l, err := DecodeLimit(f, v)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		return !a.PerKey && b.PerKey
	})
	return out, nil
}
