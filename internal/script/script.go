// Package script runs Conveyor's Lua scripts, alone or in pipelines.
//
// It knows no job. It keeps the runner (EVALSHA, then EVAL after NOSCRIPT), the cluster guard
// and the reply codes. Its lib.lua holds the codes and a few helpers that know no job
// (chunked calls, stream entries, publishing).
//
// A Library joins shared Lua into a script: only the functions the script uses, each after
// those it uses. The job's own functions (the fence, the dead set, workflows, groups, limits)
// are internal/jobstate's library. So each script stays one self-contained EVALSHA on the
// server. Redis Functions would also do, but the embedded demo server (miniredis) does not
// run them.
package script

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/rediserr"
)

//go:embed lib.lua
var lib string

// New returns a script whose source is src behind the reply codes and the helpers of lib.lua
// that it uses, transitively. Only those: every `local function` runs (makes a closure) on
// every call of the script, a cost a single-job call notices (docs/BENCHMARKS.md). On a Redis
// Cluster the script runs behind clusterGuard (Script).
//
// The source sent drops the text of comment lines and keeps their line breaks, so that an
// error's line number still points into the file as written. A worker holds every script's
// source for the whole run (EVAL after NOSCRIPT needs it): the comments were half of it, and
// what the process holds for good raises its garbage collector's goal by as much again
// (docs/BENCHMARKS.md, "Issue 34").
func New(src string) *Script {
	full := blankComments(withLib(src))
	return &Script{src: full, plain: redis.NewScript(full)}
}

// Script is one of Conveyor's scripts in its two forms: as written, run on one server or
// through Sentinel, and behind clusterGuard, run on a Redis Cluster. Which one a call sends is
// chosen by the client it is given (IsCluster).
//
// Why the guard: the scripts build many key names from their arguments and from what they
// read, so Redis Cluster cannot check those keys when it routes the call. While a hash slot
// migrates between masters (CLUSTER SETSLOT MIGRATING/IMPORTING, then MIGRATE in batches), its
// keys are split between the two nodes. A script sent to the importing node (by ASK) read a
// hash still on the other node as missing, and dropped a delayed job (issue 22's torture suite
// found it). One on the migrating node stops at the first key already moved, its earlier
// writes applied. So the guard refuses the whole call, before anything is read, while this
// node migrates or imports the slot of the script's first key. It answers Redis's own
// TRYAGAIN, which the caller retries (Run, Pipelined) until the move ends.
type Script struct {
	src   string
	plain *redis.Script
	// guarded is made on first use: most processes never talk to a cluster.
	guardOnce sync.Once
	guarded   *redis.Script
}

// guard returns the form behind clusterGuard.
func (s *Script) guard() *redis.Script {
	s.guardOnce.Do(func() { s.guarded = redis.NewScript(clusterGuard + s.src) })
	return s.guarded
}

// clusterGuard refuses a script, before it touches anything, while this node is migrating
// or importing the slot of its first key. It asks for two keys that never exist in that slot
// (named after its hash tag) in one command. Redis Cluster itself refuses that while the slot
// is in migration. On the migrating node a missing key is the importing node's (ASK). On the
// importing node a multi-key command with missing keys is TRYAGAIN. A script's command
// meeting either fails instead of running. On a stable slot the two lookups are all it costs
// (docs/BENCHMARKS.md, "Issue 22: the cluster guard"). A script's keys are in one slot (Redis
// Cluster refuses the call otherwise), so the first key's slot is the script's. CLUSTER NODES
// shows the migration too, but costs Redis ten times the script's own work.
const clusterGuard = `if #KEYS > 0 then
  local k, tag = KEYS[1], KEYS[1]
  local s = string.find(k, '{', 1, true)
  if s then
    local e = string.find(k, '}', s + 1, true)
    if e and e > s + 1 then tag = string.sub(k, s + 1, e - 1) end
  end
  local r = redis.pcall('EXISTS', '{' .. tag .. '}:cv-guard-a', '{' .. tag .. '}:cv-guard-b')
  if type(r) == 'table' and r.err then
    return redis.error_reply('TRYAGAIN Conveyor: the hash slot of ' .. k .. ' is migrating between cluster nodes (' .. r.err .. '); retry when it is done')
  end
end
`

// Clustered is implemented by a client that wraps another and can say whether that one is a
// cluster client (the durable publisher's waiting writer).
type Clustered interface {
	IsCluster() bool
}

// IsCluster reports whether c sends to a Redis Cluster.
func IsCluster(c any) bool {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return true
	case Clustered:
		return c.IsCluster()
	}
	return false
}

// For returns the form of the script to send through c.
func (s *Script) For(c any) *redis.Script {
	if IsCluster(c) {
		return s.guard()
	}
	return s.plain
}

// Hash is the SHA1 of the script as written.
func (s *Script) Hash() string { return s.plain.Hash() }

// Is reports whether sha is either form's SHA1.
func (s *Script) Is(sha any) bool { return sha == s.plain.Hash() || sha == s.guard().Hash() }

// Run runs the script through c (EVALSHA, then EVAL after NOSCRIPT). On a cluster, a call
// refused while its slot migrates (TRYAGAIN, CLUSTERDOWN: it did not run) is sent again. It
// backs off, for up to RetryFor or until ctx ends.
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	r := s.For(c)
	cmd := r.Run(ctx, c, keys, args...)
	if !IsCluster(c) {
		return cmd
	}
	for b := newBackoff(); refusedForNow(cmd.Err()) && b.wait(ctx); {
		cmd = r.Run(ctx, c, keys, args...)
	}
	return cmd
}

// Load loads the script into Redis (each master of a cluster), in the form c sends.
func (s *Script) Load(ctx context.Context, c redis.Scripter) *redis.StringCmd {
	return s.For(c).Load(ctx, c)
}

// RetryFor is how long a cluster call refused while its slot migrates is retried. A move of
// a slot holding a busy queue takes a few seconds (docs/OPERATIONS.md, "Resharding a queue").
// A longer one hands the caller the TRYAGAIN error. The caller treats it as any passing Redis
// fault: a worker keeps its outcome and writes it again, a publisher publishes again.
const RetryFor = 10 * time.Second

// refusedForNow reports an error that says the call did not run and may run soon: TRYAGAIN
// (a slot in migration, by the guard or by Redis itself for split multi-key calls) or
// CLUSTERDOWN.
func refusedForNow(err error) bool {
	return err != nil && rediserr.Classify(err) == rediserr.ClusterDown
}

// backoff spaces retries: 5 ms doubling to 250 ms, for RetryFor in all.
type backoff struct {
	next time.Duration
	end  time.Time
}

func newBackoff() *backoff {
	return &backoff{next: 5 * time.Millisecond, end: time.Now().Add(RetryFor)}
}

// wait sleeps the next interval and reports whether to try again.
func (b *backoff) wait(ctx context.Context) bool {
	if !time.Now().Add(b.next).Before(b.end) {
		return false
	}
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	b.next = min(2*b.next, 250*time.Millisecond)
	return true
}

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
	Full       Code = 11 // the queue holds its bound of waiting jobs (enqueue.lua): not written
)

// codeNames maps each Code to its name in lib.lua.
var codeNames = map[Code]string{OK: "CV_OK", NotFound: "CV_NOT_FOUND", Exists: "CV_EXISTS",
	UniqueHeld: "CV_UNIQUE_HELD", Refused: "CV_REFUSED", WrongState: "CV_WRONG_STATE",
	NoType: "CV_NO_TYPE", LockLost: "CV_LOCK_LOST", Died: "CV_DIED", Conflict: "CV_CONFLICT",
	Deferred: "CV_DEFERRED", Full: "CV_FULL"}

func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return "CV_" + strconv.FormatInt(int64(c), 10)
}

// base is lib.lua's helpers.
var base = newLibrary(nil, lib)

// Library is Lua functions that scripts share. Each starts `local function cv_<name>(` at the
// start of a line and ends at the first `end` line. The comment lines right above it are its.
type Library struct {
	names  []string          // in the order of the sources
	bodies map[string]string // by name
}

// NewLibrary cuts the functions out of srcs. It panics on a function with no end, or a name
// defined twice or also in lib.lua. The sources are embedded, so each is a build error.
func NewLibrary(srcs ...string) *Library { return newLibrary(base, srcs...) }

// newLibrary is NewLibrary, with the helpers its names must not shadow.
func newLibrary(helpers *Library, srcs ...string) *Library {
	l := &Library{bodies: map[string]string{}}
	for _, src := range srcs {
		prevEnd := 0
		for _, f := range funcStarts(src) {
			name := f.name
			end := strings.Index(src[f.at:], "\nend\n")
			if end < 0 {
				panic("script: unterminated Lua function " + name)
			}
			if _, dup := l.bodies[name]; dup || (helpers != nil && helpers.bodies[name] != "") {
				panic("script: Lua function " + name + " defined twice")
			}
			end += f.at + len("\nend\n")
			// The comment block right above the function belongs to it.
			head := f.at
			for head > prevEnd {
				lineStart := strings.LastIndex(src[:head-1], "\n") + 1
				if !strings.HasPrefix(src[lineStart:head], "--") {
					break
				}
				head = lineStart
			}
			l.names = append(l.names, name)
			l.bodies[name] = src[head:end]
			prevEnd = end
		}
	}
	return l
}

// Names returns the library's functions, in the order of its sources.
func (l *Library) Names() []string { return slices.Clone(l.names) }

// Join returns src behind the library's functions it uses, transitively, each one after the
// functions its code calls (a Lua local is unknown above its definition). A function named only
// in a comment comes too, harmless; a comment never orders.
func (l *Library) Join(src string) string {
	need := map[string]bool{}
	var find func(code string)
	find = func(code string) {
		for _, ref := range refs(code) {
			if body, ok := l.bodies[ref]; ok && !need[ref] {
				need[ref] = true
				find(body)
			}
		}
	}
	find(src)
	var b strings.Builder
	done := map[string]bool{}
	var emit func(name string)
	emit = func(name string) {
		if done[name] {
			return
		}
		done[name] = true
		for _, ref := range refs(stripComments(l.bodies[name])) {
			if need[ref] {
				emit(ref)
			}
		}
		b.WriteString(l.bodies[name])
		b.WriteString("\n")
	}
	for _, name := range l.names { // the sources' order, where calls leave a choice
		if need[name] {
			emit(name)
		}
	}
	b.WriteString(src)
	return b.String()
}

// withLib joins lib.lua's helpers that src uses, then puts the reply codes the whole names in
// front of everything.
func withLib(src string) string {
	joined := base.Join(src)
	var b strings.Builder
	for _, c := range codes(lib) {
		if hasWord(joined, c.name) {
			b.WriteString(c.line)
			b.WriteString("\n")
		}
	}
	b.WriteString(joined)
	return b.String()
}

// Call is one script invocation in a pipeline.
type Call struct {
	Script *Script
	Keys   []string
	Args   []any
}

// IsNoScript reports whether err says Redis does not have the script (its cache was flushed or
// the server restarted).
func IsNoScript(err error) bool {
	return rediserr.IsNoScript(err)
}

// Load loads scripts into Redis (every master of a cluster), so pipelined EVALSHA finds them.
func Load(ctx context.Context, rdb redis.Scripter, scripts ...*Script) error {
	for _, s := range scripts {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("load script: %w", err)
		}
	}
	return nil
}

// Pipelined runs calls in one round trip with EVALSHA. A pipelined EVALSHA does not fall back
// to EVAL by itself. So when Redis answers NOSCRIPT, the calls that failed run again with EVAL,
// which also caches the script for the next time. On a cluster, the calls refused
// while their slot migrates are sent again as Script.Run does. The returned commands are in
// the order of calls; the error is the first command error, if any.
func Pipelined(ctx context.Context, rdb redis.UniversalClient, calls []Call) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	err := pipelined(ctx, rdb, calls, cmds, all)
	if err == nil || !IsCluster(rdb) {
		return cmds, err
	}
	for b := newBackoff(); ; {
		var again []int
		for i, cmd := range cmds {
			if refusedForNow(cmd.Err()) {
				again = append(again, i)
			}
		}
		if len(again) == 0 || !b.wait(ctx) {
			return cmds, firstErr(cmds, err)
		}
		err = pipelined(ctx, rdb, calls, cmds, again)
	}
}

// pipelined runs the calls at idx, storing their commands in cmds at the same places.
func pipelined(ctx context.Context, rdb redis.UniversalClient, calls []Call, cmds []*redis.Cmd, idx []int) error {
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range idx {
			c := calls[i]
			cmds[i] = c.Script.For(rdb).EvalSha(ctx, p, c.Keys, c.Args...)
		}
		return nil
	})
	if err == nil {
		return nil
	}
	var retry []int
	for _, i := range idx {
		if IsNoScript(cmds[i].Err()) {
			retry = append(retry, i)
		}
	}
	if len(retry) == 0 {
		return firstErr(cmds, err)
	}
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range retry {
			c := calls[i]
			cmds[i] = c.Script.For(rdb).Eval(ctx, p, c.Keys, c.Args...)
		}
		return nil
	})
	if err != nil {
		return firstErr(cmds, err)
	}
	return nil
}

func firstErr(cmds []*redis.Cmd, err error) error {
	for _, c := range cmds {
		if c != nil && c.Err() != nil {
			return c.Err()
		}
	}
	return err
}
