// Package script builds Conveyor's Lua scripts and runs them in pipelines.
//
// Each script is a .lua file beside the Go code that calls it, embedded with go:embed. New joins
// the shared library (lib.lua: building a stream entry, moving a job to the dead set, ...) in
// front of a script's own source, so shared Lua is written once while each script stays one
// self-contained EVALSHA on the server. Redis Functions would also do, but the embedded demo
// server (miniredis) does not run them.
package script

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed lib.lua
var lib string

// New returns a script whose source is the shared library followed by src.
func New(src string) *redis.Script {
	return redis.NewScript(lib + "\n" + src)
}

// Call is one script invocation in a pipeline.
type Call struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// IsNoScript reports whether err says Redis does not have the script (its cache was flushed or
// the server restarted).
func IsNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// Load loads scripts into Redis (every master of a cluster), so pipelined EVALSHA finds them.
func Load(ctx context.Context, rdb redis.Scripter, scripts ...*redis.Script) error {
	for _, s := range scripts {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("load script: %w", err)
		}
	}
	return nil
}

// Pipelined runs calls in one round trip with EVALSHA. A pipelined EVALSHA does not fall back
// to EVAL by itself, so when Redis answers NOSCRIPT the calls that failed are run again with
// EVAL (which also caches the script for the next time). The returned commands are in the
// order of calls; the error is the first command error, if any.
func Pipelined(ctx context.Context, rdb redis.UniversalClient, calls []Call) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = c.Script.EvalSha(ctx, p, c.Keys, c.Args...)
		}
		return nil
	})
	if err == nil {
		return cmds, nil
	}
	var retry []int
	for i, cmd := range cmds {
		if IsNoScript(cmd.Err()) {
			retry = append(retry, i)
		}
	}
	if len(retry) == 0 {
		return cmds, firstErr(cmds, err)
	}
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range retry {
			c := calls[i]
			cmds[i] = c.Script.Eval(ctx, p, c.Keys, c.Args...)
		}
		return nil
	})
	if err != nil {
		return cmds, firstErr(cmds, err)
	}
	return cmds, nil
}

func firstErr(cmds []*redis.Cmd, err error) error {
	for _, c := range cmds {
		if c != nil && c.Err() != nil {
			return c.Err()
		}
	}
	return err
}
