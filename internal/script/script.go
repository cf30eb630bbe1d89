// Package script builds Conveyor's Lua scripts and runs them in pipelines.
//
// Each script is a .lua file beside the Go code that calls it, embedded with go:embed. New joins
// the functions of the shared library (lib.lua: building a stream entry, moving a job to the
// dead set, ...) that a script uses in front of its own source, so shared Lua is written once
// while each script stays one self-contained EVALSHA on the server. Redis Functions would also do, but the embedded demo
// server (miniredis) does not run them.
package script

import (
	"context"
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/rediserr"
)

//go:embed lib.lua
var lib string

// New returns a script whose source is the parts of the shared library that src uses
// (transitively), followed by src. Only those: every `local function` of the library runs (makes
// a closure) on every call of the script, a cost a single-job call notices (docs/BENCHMARKS.md).
func New(src string) *redis.Script {
	return redis.NewScript(withLib(src))
}

var (
	libFuncStart = regexp.MustCompile(`(?m)^local function (cv_\w+)\(`)
	libRef       = regexp.MustCompile(`\bcv_\w+\b`)
	libCode      = regexp.MustCompile(`(?m)^local (CV_[A-Z_]+) = (\d+)$`)
)

// Code is the first element of every script's reply (see lib.lua).
type Code int64

// The reply codes, as lib.lua names them.
const (
	OK         Code = 0  // done
	NotFound   Code = 1  // no such job
	Exists     Code = 2  // the job exists already (enqueue with a known id)
	UniqueHeld Code = 3  // another job holds the unique key; the reply names it
	Refused    Code = 4  // a fenced transition was refused: the job moved on
	WrongState Code = 5  // the job is not in a state the call applies to; the reply names it
	NoType     Code = 6  // a dead record with no type to run
	LockLost   Code = 7  // the caller's lock token no longer holds the lock
	Died       Code = 8  // a retry became dead: no retries left
	Conflict   Code = 9  // the id names a job with another type or payload; the reply says which
	Deferred   Code = 10 // a job over a flow-control limit was deferred (admit.lua): no attempt
)

// codeNames maps each Code to its name in lib.lua.
var codeNames = map[Code]string{OK: "CV_OK", NotFound: "CV_NOT_FOUND", Exists: "CV_EXISTS",
	UniqueHeld: "CV_UNIQUE_HELD", Refused: "CV_REFUSED", WrongState: "CV_WRONG_STATE",
	NoType: "CV_NO_TYPE", LockLost: "CV_LOCK_LOST", Died: "CV_DIED", Conflict: "CV_CONFLICT",
	Deferred: "CV_DEFERRED"}

func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return "CV_" + strconv.FormatInt(int64(c), 10)
}

// libFuncs splits lib.lua into its functions, each with the comment lines above it, in order.
func libFuncs() (names []string, bodies map[string]string) {
	bodies = map[string]string{}
	starts := libFuncStart.FindAllStringSubmatchIndex(lib, -1)
	prevEnd := 0
	for _, m := range starts {
		name := lib[m[2]:m[3]]
		end := strings.Index(lib[m[0]:], "\nend\n")
		if end < 0 {
			panic("script: unterminated function " + name + " in lib.lua")
		}
		end += m[0] + len("\nend\n")
		// The comment block right above the function belongs to it.
		head := m[0]
		for head > prevEnd {
			lineStart := strings.LastIndex(lib[:head-1], "\n") + 1
			if !strings.HasPrefix(lib[lineStart:head], "--") {
				break
			}
			head = lineStart
		}
		names = append(names, name)
		bodies[name] = lib[head:end]
		prevEnd = end
	}
	return names, bodies
}

func withLib(src string) string {
	names, bodies := libFuncs()
	need := map[string]bool{}
	var visit func(code string)
	visit = func(code string) {
		for _, ref := range libRef.FindAllString(code, -1) {
			if body, ok := bodies[ref]; ok && !need[ref] {
				need[ref] = true
				visit(body)
			}
		}
	}
	visit(src)
	var b strings.Builder
	// The reply codes the script or its library functions name, before any function.
	used := src
	for name := range need {
		used += bodies[name]
	}
	for _, m := range libCode.FindAllStringSubmatch(lib, -1) {
		if regexp.MustCompile(`\b` + m[1] + `\b`).MatchString(used) {
			b.WriteString(m[0])
			b.WriteString("\n")
		}
	}
	for _, name := range names { // library order: a function is defined before its users
		if need[name] {
			b.WriteString(bodies[name])
			b.WriteString("\n")
		}
	}
	b.WriteString(src)
	return b.String()
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
	return rediserr.IsNoScript(err)
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
