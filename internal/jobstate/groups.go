package jobstate

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// Fair groups (pipeline.WithGroup). The scripts keep each group's window and wait list
// (lua/groups.lua, "Fair groups"). Here are the settings an operator writes, and the reads of
// the groups' counts. The settings are plain hash fields. A script reads them whenever a job
// enters or leaves a window, so a change applies from the next one on. A window raised fills
// as the group's jobs leave it: each leave refills up to the window.

// GroupSettings are a queue's group settings: Window (0: keys.DefaultGroupWindow) and the
// weights of the groups that have one (a group without one weighs 1).
type GroupSettings struct {
	Window  int64
	Weights map[string]int64
}

// GroupChange is a change of a queue's group settings: Window when above 0; each group of
// Weights to its weight, or back to 1 (the field deleted) when 0; ResetWindow deletes the
// window setting (back to the default).
type GroupChange struct {
	Window      int64
	ResetWindow bool
	Weights     map[string]int64
}

// ReadGroupSettings reads q's group settings.
func ReadGroupSettings(ctx context.Context, rdb redis.Cmdable, q keys.Queue) (GroupSettings, error) {
	m, err := rdb.HGetAll(ctx, q.GroupConfig()).Result()
	if err != nil {
		return GroupSettings{}, rediserr.Wrap("groups", err)
	}
	return decodeGroupSettings(m), nil
}

func decodeGroupSettings(m map[string]string) GroupSettings {
	s := GroupSettings{Weights: map[string]int64{}}
	for f, v := range m {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			continue // not written by SetGroupSettings; the scripts read it as the default too
		}
		if f == keys.GroupWindowField {
			s.Window = n
		} else if g, ok := strings.CutPrefix(f, keys.GroupWeightPrefix); ok {
			s.Weights[g] = n
		}
	}
	return s
}

// SetGroupSettings applies c to the group settings of each of qs (a queue's partitions: each
// keeps its own windows, in its own hash tag) in one MULTI per partition.
func SetGroupSettings(ctx context.Context, rdb redis.UniversalClient, qs []keys.Queue, c GroupChange) error {
	var set []any
	var del []string
	if c.Window > 0 {
		set = append(set, keys.GroupWindowField, c.Window)
	} else if c.ResetWindow {
		del = append(del, keys.GroupWindowField)
	}
	groups := make([]string, 0, len(c.Weights))
	for g := range c.Weights {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	for _, g := range groups {
		if w := c.Weights[g]; w > 0 {
			set = append(set, keys.GroupWeightPrefix+g, w)
		} else {
			del = append(del, keys.GroupWeightPrefix+g)
		}
	}
	if len(set) == 0 && len(del) == 0 {
		return nil
	}
	for _, q := range qs {
		_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if len(set) > 0 {
				p.HSet(ctx, q.GroupConfig(), set...)
			}
			if len(del) > 0 {
				p.HDel(ctx, q.GroupConfig(), del...)
			}
			return nil
		})
		if err != nil {
			return rediserr.Wrap("groups", fmt.Errorf("set groups of %s: %w", q.Tag(), err))
		}
	}
	return nil
}

// GroupCount is one group's jobs in a queue: InWindow in its window (in the stream, running, or
// deferred by a limit), Waiting for a place.
type GroupCount struct {
	Group    string
	InWindow int64
	Waiting  int64
}

// ReadGroups reads the counts of the groups of qs (a queue's partitions, summed). It reads the
// groups that have jobs in their window or waiting, or have a weight set. It returns the first
// most of them by name, and how many there are in all. It takes two round trips: the groups'
// names, then the counts of those listed. So a queue with very many groups costs a listing no
// more than most groups' counts.
func (s *Store) ReadGroups(ctx context.Context, qs []keys.Queue, most int) ([]GroupCount, int, error) {
	type names struct{ active, waiting, cfg *redis.StringSliceCmd }
	ns := make([]names, len(qs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, q := range qs {
			ns[k] = names{p.SMembers(ctx, q.GroupsActive()), p.SMembers(ctx, q.GroupsWaiting()),
				p.HKeys(ctx, q.GroupConfig())}
		}
		return nil
	})
	if err != nil {
		return nil, 0, rediserr.Wrap("groups", err)
	}
	per := make([]map[string]bool, len(qs))
	all := map[string]bool{}
	for k := range qs {
		per[k] = map[string]bool{}
		for _, g := range append(ns[k].active.Val(), ns[k].waiting.Val()...) {
			per[k][g] = true
		}
		for _, f := range ns[k].cfg.Val() {
			if g, ok := strings.CutPrefix(f, keys.GroupWeightPrefix); ok {
				per[k][g] = true
			}
		}
		for g := range per[k] {
			all[g] = true
		}
	}
	listed := make([]string, 0, len(all))
	for g := range all {
		listed = append(listed, g)
	}
	slices.Sort(listed)
	total := len(listed)
	if most > 0 && len(listed) > most {
		listed = listed[:most]
	}
	type counts struct{ in, wait *redis.IntCmd }
	cs := make([]map[string]counts, len(qs))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, q := range qs {
			cs[k] = map[string]counts{}
			for _, g := range listed {
				if per[k][g] {
					cs[k][g] = counts{p.SCard(ctx, q.GroupWindow(g)), p.LLen(ctx, q.GroupWaiting(g))}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, rediserr.Wrap("groups", err)
	}
	out := make([]GroupCount, len(listed))
	for j, g := range listed {
		out[j].Group = g
		for k := range qs {
			if c, ok := cs[k][g]; ok {
				out[j].InWindow += c.in.Val()
				out[j].Waiting += c.wait.Val()
			}
		}
	}
	return out, total, nil
}

// CountGroupWeights says how many groups of q have a weight set, and whether each of groups
// has one, in one round trip: for the bound on a queue's weights (pipeline's maxGroupWeights).
func CountGroupWeights(ctx context.Context, rdb redis.Cmdable, q keys.Queue, groups []string) (n int, has []bool, err error) {
	var flen *redis.IntCmd
	var window *redis.BoolCmd
	var vals *redis.SliceCmd
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		flen = p.HLen(ctx, q.GroupConfig())
		window = p.HExists(ctx, q.GroupConfig(), keys.GroupWindowField)
		if len(groups) > 0 {
			fs := make([]string, len(groups))
			for k, g := range groups {
				fs[k] = keys.GroupWeightPrefix + g
			}
			vals = p.HMGet(ctx, q.GroupConfig(), fs...)
		}
		return nil
	})
	if err != nil {
		return 0, nil, rediserr.Wrap("groups", err)
	}
	n = int(flen.Val())
	if window.Val() {
		n--
	}
	has = make([]bool, len(groups))
	if vals != nil {
		for k, v := range vals.Val() {
			has[k] = v != nil
		}
	}
	return n, has, nil
}

// CopyGroupSettings replaces the group settings of each of to with from's: a change of a
// queue's partition count carries its settings into the new layout, whose scripts read only
// their own partition's hash. Replaced, not merged, so that a layout left earlier and now
// returned to keeps none of what was changed or removed since.
func CopyGroupSettings(ctx context.Context, rdb redis.UniversalClient, from keys.Queue, to []keys.Queue) error {
	m, err := rdb.HGetAll(ctx, from.GroupConfig()).Result()
	if err != nil {
		return rediserr.Wrap("groups", fmt.Errorf("read the group settings of %s: %w", from.Tag(), err))
	}
	fields := make([]any, 0, 2*len(m))
	for f, v := range m {
		fields = append(fields, f, v)
	}
	for _, q := range to {
		if q.GroupConfig() == from.GroupConfig() {
			continue
		}
		_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, q.GroupConfig())
			if len(fields) > 0 {
				p.HSet(ctx, q.GroupConfig(), fields...)
			}
			return nil
		})
		if err != nil {
			return rediserr.Wrap("groups", fmt.Errorf("copy the group settings to %s: %w", q.Tag(), err))
		}
	}
	return nil
}

// DeleteGroupSettings deletes the group settings of each of qs (a layout a change left).
func DeleteGroupSettings(ctx context.Context, rdb redis.UniversalClient, qs []keys.Queue) error {
	for _, q := range qs {
		if err := rdb.Del(ctx, q.GroupConfig()).Err(); err != nil {
			return rediserr.Wrap("groups", fmt.Errorf("delete the group settings of %s: %w", q.Tag(), err))
		}
	}
	return nil
}
