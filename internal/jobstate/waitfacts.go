package jobstate

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// The reads behind a waiting job's reason (internal/inspect's why.go): what a queue's state
// says of the jobs that are not running. They are made only when a reason is asked for (a
// Get, a page of a listing, a queue's stats), never on a job's path, and in one pipeline: one
// round trip on a standalone server, one per node involved on a cluster.

// WaitAsk is what ReadWaitFacts is asked about a queue.
type WaitAsk struct {
	// Queue is the queue's name, whose paused flag is read.
	Queue string
	Parts []PartAsk
}

// PartAsk is what ReadWaitFacts is asked about one partition of the queue (the queue itself
// when it has one).
type PartAsk struct {
	Q keys.Queue
	// Instances are the limit scope instances ('q', 't:<type>', 'qk:<key>', 'tk:<type> <key>')
	// whose limit and slots taken are read.
	Instances []string
	// Grouped are the jobs whose place in their fair group's wait list is read.
	Grouped []GroupedJob
	// Levels asks for the undelivered entries of each priority level's stream.
	Levels bool
	// OverdueBy, when set, asks for how many jobs of the scheduled set are due by then (the
	// caller's clock: the set's scores are Redis's, and a clock read in the same pipeline
	// cannot bound a command of it).
	OverdueBy time.Time
	// Workflows are the workflows (their hashes' keys) whose tasks' outcomes are read, the tasks
	// named.
	Workflows map[string][]string
}

// GroupedJob is a job waiting in a fair group's list.
type GroupedJob struct{ Group, ID string }

// WaitFacts is ReadWaitFacts' answer.
type WaitFacts struct {
	// Now is Redis's clock at the read.
	Now    time.Time
	Paused bool
	Parts  []PartFacts
}

// PartFacts is what ReadWaitFacts read of one partition (PartAsk's order).
type PartFacts struct {
	// Limits holds the limit of each instance asked for that has one (a field that does not
	// decode counts as none, as the scripts take it); Held the slots taken of each.
	Limits map[string]Limit
	Held   map[string]int64
	// Positions is each grouped job's place in its group's wait list, 1 first; absent when it
	// is not there (any more).
	Positions map[string]int
	// Undelivered counts the entries no worker was handed yet of each level's stream (index
	// level-1).
	Undelivered [keys.MaxPriority]int64
	// Overdue counts the scheduled set's jobs due by Now.
	Overdue int64
	// Outcomes holds the outcome ('C', 'F', 'X', 'P'; keys.WorkflowTaskStatus) each named task
	// of each workflow has, by workflow key and name; absent: none yet.
	Outcomes map[string]map[string]string
}

// LimitInstanceField is the limits hash's field of a scope instance (lua/limits.lua's
// cv_limit_field): a per-key instance's field drops its key.
func LimitInstanceField(inst string) string {
	switch {
	case strings.HasPrefix(inst, "qk:"):
		return "qk"
	case strings.HasPrefix(inst, "tk:"):
		if typ, _, ok := strings.Cut(inst, " "); ok {
			return typ
		}
	}
	return inst
}

// ReadWaitFacts reads what ask asks of the queues under prefix, in one pipeline.
func ReadWaitFacts(ctx context.Context, rdb redis.Cmdable, prefix string, ask WaitAsk) (*WaitFacts, error) {
	type partCmds struct {
		limits   map[string]*redis.StringCmd
		held     map[string]*redis.IntCmd
		pos      []*redis.IntCmd
		xlen     [keys.MaxPriority]*redis.IntCmd
		groups   [keys.MaxPriority]*redis.XInfoGroupsCmd
		overdue  *redis.IntCmd
		outcomes map[string]*redis.SliceCmd
		wfFields map[string][]string
	}
	var clock *redis.TimeCmd
	var settings *redis.SliceCmd
	var legacy *redis.BoolCmd
	all := make([]partCmds, len(ask.Parts))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		clock = p.Time(ctx)
		if ask.Queue != "" {
			settings = p.HMGet(ctx, SettingsKey(prefix, ask.Queue), SettingRev, SettingPaused)
			legacy = p.SIsMember(ctx, keys.Paused(prefix), ask.Queue)
		}
		for k, pa := range ask.Parts {
			c := &all[k]
			q := pa.Q
			if len(pa.Instances) > 0 {
				c.limits, c.held = map[string]*redis.StringCmd{}, map[string]*redis.IntCmd{}
				for _, inst := range pa.Instances {
					c.limits[inst] = p.HGet(ctx, q.Limits(), LimitInstanceField(inst))
					c.held[inst] = p.SCard(ctx, q.LimitPrefix()+"c:"+inst)
				}
			}
			for _, g := range pa.Grouped {
				c.pos = append(c.pos, p.LPos(ctx, q.GroupWaiting(g.Group), g.ID, redis.LPosArgs{}))
			}
			if pa.Levels {
				for l := range keys.MaxPriority {
					c.xlen[l] = p.XLen(ctx, q.LevelStream(l+1))
					c.groups[l] = p.XInfoGroups(ctx, q.LevelStream(l+1))
				}
			}
			if !pa.OverdueBy.IsZero() {
				c.overdue = p.ZCount(ctx, q.Scheduled(), "-inf", strconv.FormatInt(pa.OverdueBy.UnixMilli(), 10))
			}
			if len(pa.Workflows) > 0 {
				c.outcomes, c.wfFields = map[string]*redis.SliceCmd{}, map[string][]string{}
				for wf, names := range pa.Workflows {
					if len(names) == 0 {
						continue
					}
					fields := make([]string, len(names))
					for i, n := range names {
						fields[i] = keys.WorkflowTaskStatus + n
					}
					c.wfFields[wf] = names
					c.outcomes[wf] = p.HMGet(ctx, wf, fields...)
				}
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) && !rediserr.IsNoStream(err) {
		return nil, rediserr.Wrap("waiting reasons", err)
	}
	if err := clock.Err(); err != nil {
		return nil, rediserr.Wrap("waiting reasons", err)
	}
	out := &WaitFacts{Now: clock.Val(), Parts: make([]PartFacts, len(ask.Parts))}
	if settings != nil {
		if err := settings.Err(); err != nil {
			return nil, rediserr.Wrap("waiting reasons", err)
		}
		v := settings.Val()
		if rev, _ := v[0].(string); rev != "" {
			p, _ := v[1].(string)
			out.Paused = p == "1"
		} else {
			out.Paused = legacy.Val()
		}
	}
	for k := range ask.Parts {
		c, f := &all[k], &out.Parts[k]
		if c.limits != nil {
			f.Limits, f.Held = map[string]Limit{}, map[string]int64{}
			for inst, cmd := range c.limits {
				if v, err := cmd.Result(); err == nil {
					if l, err := DecodeLimit(LimitInstanceField(inst), v); err == nil {
						f.Limits[inst] = l
					}
				} else if !errors.Is(err, redis.Nil) {
					return nil, rediserr.Wrap("waiting reasons", err)
				}
				if err := c.held[inst].Err(); err != nil {
					return nil, rediserr.Wrap("waiting reasons", err)
				}
				f.Held[inst] = c.held[inst].Val()
			}
		}
		if len(c.pos) > 0 {
			f.Positions = map[string]int{}
			for i, cmd := range c.pos {
				n, err := cmd.Result()
				if errors.Is(err, redis.Nil) {
					continue
				}
				if err != nil {
					return nil, rediserr.Wrap("waiting reasons", err)
				}
				f.Positions[ask.Parts[k].Grouped[i].ID] = int(n) + 1
			}
		}
		if ask.Parts[k].Levels {
			for l := range keys.MaxPriority {
				if err := c.groups[l].Err(); err != nil && !rediserr.IsNoStream(err) {
					return nil, rediserr.Wrap("waiting reasons", err)
				}
				var pending int64
				for _, g := range c.groups[l].Val() {
					if g.Name == keys.Group {
						pending = g.Pending
					}
				}
				f.Undelivered[l] = max(0, c.xlen[l].Val()-pending)
			}
		}
		if c.overdue != nil {
			if err := c.overdue.Err(); err != nil {
				return nil, rediserr.Wrap("waiting reasons", err)
			}
			f.Overdue = c.overdue.Val()
		}
		for wf, cmd := range c.outcomes {
			if err := cmd.Err(); err != nil {
				return nil, rediserr.Wrap("waiting reasons", err)
			}
			if f.Outcomes == nil {
				f.Outcomes = map[string]map[string]string{}
			}
			m := map[string]string{}
			for i, v := range cmd.Val() {
				if s, ok := v.(string); ok {
					m[c.wfFields[wf][i]] = s
				}
			}
			f.Outcomes[wf] = m
		}
	}
	return out, nil
}
