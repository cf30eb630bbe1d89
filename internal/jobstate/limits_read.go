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
// metrics' queue collector. A field that does not decode is an error naming it, as in
// ReadLimits.
func ReadLimitsOf(ctx context.Context, rdb redis.Cmdable, qs []keys.Queue) ([][]Limit, error) {
	fields, bad, err := ReadLimitFields(ctx, rdb, qs)
	if err != nil {
		return nil, err
	}
	out := make([][]Limit, len(qs))
	for k := range qs {
		if len(bad[k]) > 0 {
			return nil, bad[k][0]
		}
		out[k] = sortLimits(fields[k])
	}
	return out, nil
}

// ReadLimitFields reads the limits hashes of qs in one pipeline, as ReadLimitsOf. It is for a
// reader that goes on without a field that does not decode. A worker's limits watcher is one;
// it matches the scripts, which ignore such a field too. out[k] holds each of qs[k]'s limits
// by its field, and bad[k] the error of each field that does not decode.
func ReadLimitFields(ctx context.Context, rdb redis.Cmdable, qs []keys.Queue) (out []map[string]Limit, bad [][]error, err error) {
	if len(qs) == 0 {
		return nil, nil, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(qs))
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, q := range qs {
			cmds[k] = p.HGetAll(ctx, q.Limits())
		}
		return nil
	})
	if err != nil {
		return nil, nil, rediserr.Wrap("limits", err)
	}
	out, bad = make([]map[string]Limit, len(qs)), make([][]error, len(qs))
	for k, c := range cmds {
		out[k] = make(map[string]Limit, len(c.Val()))
		for f, v := range c.Val() {
			l, err := DecodeLimit(f, v)
			if err != nil {
				bad[k] = append(bad[k], err)
				continue
			}
			out[k][f] = l
		}
	}
	return out, bad, nil
}

// decodeLimits decodes a limits hash, sorted by scope (the queue's first, then by type). A
// field that does not decode is an error naming it: limits are an operator's settings, and a
// worker that silently ignored one would break it.
func decodeLimits(m map[string]string) ([]Limit, error) {
	ls := make(map[string]Limit, len(m))
	for f, v := range m {
		l, err := DecodeLimit(f, v)
		if err != nil {
			return nil, err
		}
		ls[f] = l
	}
	return sortLimits(ls), nil
}

// sortLimits lists ls sorted by scope: the queue's first, then by type, each type's limit of
// all its jobs before its per-key one.
func sortLimits(ls map[string]Limit) []Limit {
	out := make([]Limit, 0, len(ls))
	for _, l := range ls {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		return !a.PerKey && b.PerKey
	})
	return out
}
