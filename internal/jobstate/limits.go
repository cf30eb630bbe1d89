package jobstate

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
)

// A queue's flow-control limits are stored in its limits hash (keys.Queue.Limits). It has one
// field per scope, named by LimitField, whose value is the limit's JSON (LimitConfig). The
// scripts that enforce them read the same hash. So the format is shared with Lua: keep the two
// in step.
//
// Scope "q" counts every job of the queue. Scope "qk" counts each limit key's jobs of the
// queue; jobs without a key are not counted. Scope "t:<type>" counts every job of the type.
// Scope "tk:<type>" counts each limit key's jobs of the type.
//
// A job is held to every scope that applies to it. Type names may hold any printable
// character but a space, so the scope is read up to the first ':' only.

// Limit is one limit of a queue: a rate ("Rate jobs per Interval") and/or a concurrency ("at
// most Concurrency running at once") over one scope. Zero Rate means no rate limit, zero
// Concurrency no concurrency limit; at least one is set.
type Limit struct {
	Type        string        // "" for every type of the queue
	PerKey      bool          // each limit key (pipeline.WithLimitKey) separately
	Rate        int64         // jobs per Interval
	Interval    time.Duration // the rate's period, a whole number of milliseconds
	Concurrency int64         // jobs running at once
}

// LimitConfig is a limit's value in the limits hash.
type LimitConfig struct {
	Rate        int64 `json:"rate,omitempty"`
	IntervalMS  int64 `json:"interval_ms,omitempty"`
	Concurrency int64 `json:"concurrency,omitempty"`
}

// LimitField names a limit's field in the limits hash (see the scopes above).
func LimitField(typ string, perKey bool) string {
	switch {
	case typ == "" && !perKey:
		return "q"
	case typ == "":
		return "qk"
	case !perKey:
		return "t:" + typ
	default:
		return "tk:" + typ
	}
}

// ParseLimitField is LimitField's inverse.
func ParseLimitField(f string) (typ string, perKey bool, err error) {
	scope, typ, _ := strings.Cut(f, ":")
	switch {
	case scope == "q" && f == "q":
		return "", false, nil
	case scope == "qk" && f == "qk":
		return "", true, nil
	case scope == "t" && typ != "":
		return typ, false, nil
	case scope == "tk" && typ != "":
		return typ, true, nil
	}
	return "", false, fmt.Errorf("jobstate: unknown limit field %q", f)
}

// EncodeLimit is l's field and value in the limits hash.
func EncodeLimit(l Limit) (field, value string) {
	b, _ := json.Marshal(LimitConfig{Rate: l.Rate, IntervalMS: l.Interval.Milliseconds(), Concurrency: l.Concurrency})
	return LimitField(l.Type, l.PerKey), string(b)
}

// DecodeLimit reads one field and value of the limits hash.
func DecodeLimit(field, value string) (Limit, error) {
	typ, perKey, err := ParseLimitField(field)
	if err != nil {
		return Limit{}, err
	}
	var c LimitConfig
	if err := json.Unmarshal([]byte(value), &c); err != nil {
		return Limit{}, fmt.Errorf("jobstate: limit %q: %w", field, err)
	}
	return Limit{
		Type: typ, PerKey: perKey,
		Rate: c.Rate, Interval: time.Duration(c.IntervalMS) * time.Millisecond,
		Concurrency: c.Concurrency,
	}, nil
}

// ReadLimits returns q's limits, sorted by scope (the queue's first, then by type). A field
// that does not decode is an error naming it: limits are an operator's settings, and a worker
// that silently ignored one would break it.
func ReadLimits(ctx context.Context, rdb redis.Cmdable, q keys.Queue) ([]Limit, error) {
	m, err := rdb.HGetAll(ctx, q.Limits()).Result()
	if err != nil {
		return nil, rediserr.Wrap("limits", err)
	}
	return decodeLimits(m)
}

// CountLimits says how many limits q has, and whether the scope (typ, perKey) has one, in one
// round trip: for the bound on a queue's limits (pipeline's maxQueueLimits).
func CountLimits(ctx context.Context, rdb redis.Cmdable, q keys.Queue, typ string, perKey bool) (n int, has bool, err error) {
	var hlen *redis.IntCmd
	var exists *redis.BoolCmd
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		hlen = p.HLen(ctx, q.Limits())
		exists = p.HExists(ctx, q.Limits(), LimitField(typ, perKey))
		return nil
	})
	if err != nil {
		return 0, false, rediserr.Wrap("limits", err)
	}
	return int(hlen.Val()), exists.Val(), nil
}

//go:embed limitset.lua
var limitSetSrc string

var limitSetScript = newScript(limitSetSrc)

// SetLimit stores l in q's limits hash, replacing the limit of the same scope, and wakes the
// jobs waiting for a concurrency slot of that scope, to be admitted again under it
// (limitset.lua).
func SetLimit(ctx context.Context, rdb redis.Scripter, q keys.Queue, l Limit, now time.Time) error {
	f, v := EncodeLimit(l)
	_, err := setLimit(ctx, rdb, q, f, v, now)
	return err
}

// DeleteLimit removes the limit of one scope from q's limits hash and reports whether there
// was one; the jobs waiting for a slot of that scope are woken.
func DeleteLimit(ctx context.Context, rdb redis.Scripter, q keys.Queue, typ string, perKey bool, now time.Time) (bool, error) {
	return setLimit(ctx, rdb, q, LimitField(typ, perKey), "", now)
}

func setLimit(ctx context.Context, rdb redis.Scripter, q keys.Queue, field, value string, now time.Time) (bool, error) {
	cmd := limitSetScript.Run(ctx, rdb, []string{q.Limits(), q.Stream()}, field, value, q.LimitPrefix(),
		q.JobPrefix(), now.UnixMilli())
	r, err := decode("limits", cmd)
	if err == nil {
		err = r.want(2)
	}
	if err != nil {
		return false, rediserr.Wrap("limits", err)
	}
	return r.int(0) > 0, nil
}
