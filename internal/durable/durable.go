// Package durable makes writes wait for Redis replicas (WAIT) in the same round trip.
//
// Redis acknowledges a write once the master has it; its replicas get it a moment later. A
// master that dies in that moment takes the write with it. WAIT makes a write wait until
// enough replicas have it. The Client's enqueues and the worker's outcome writes both use it,
// so it lives apart from either. The public settings and errors stay in package pipeline.
//
// WAIT confirms a connection's writes up to its last one, and a pipeline may run on any pooled
// connection. So each waiting pipeline also writes a no-op (HINCRBY of the queue's stats by 0)
// after the scripts. The replicas that confirm it have every write the master took before it,
// whichever connection made them. This also covers a job that was there already (a duplicate
// publish), which the caller's own scripts did not write.
package durable

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/script"
)

// DefaultTimeout is how long a write waits for its replicas when no timeout is given.
const DefaultTimeout = time.Second

// Want is a replica wait: N replicas within Timeout; N == 0 waits for none.
type Want struct {
	N       int
	Timeout time.Duration
}

// WithDefaults fills in the timeout of a wait that asks for replicas.
func (r Want) WithDefaults() Want {
	if r.N > 0 && r.Timeout == 0 {
		r.Timeout = DefaultTimeout
	}
	return r
}

// NotReplicated is the text of every Shortfall; package pipeline's ErrNotReplicated says it too.
const NotReplicated = "pipeline: write not confirmed by enough replicas"

// Shortfall says how many replicas confirmed a write that waited for more. Its fields are
// pipeline.ReplicationError's, which converts from it.
type Shortfall struct {
	Wanted    int           // replicas asked for
	Confirmed int           // replicas that confirmed in time
	Timeout   time.Duration // how long the write waited
	Err       error         // WAIT's own error when it failed (Confirmed is then 0)
}

func (e *Shortfall) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: waiting for %d replicas failed: %v", NotReplicated, e.Wanted, e.Err)
	}
	return fmt.Sprintf("%s: %d of %d replicas confirmed within %s", NotReplicated, e.Confirmed, e.Wanted, e.Timeout)
}

// NewWriter returns what a call writes through when it waits for want: nil (no wait) when want
// asks for no replica.
func NewWriter(rdb redis.UniversalClient, want Want) *Writer {
	if want.N <= 0 {
		return nil
	}
	return &Writer{UniversalClient: rdb, want: want}
}

// Writer is a Redis client for one call's writes. Each pipeline it runs (and each
// EVAL/EVALSHA, which Script.Run sends) ends with a no-op write and WAIT per node, in the same
// round trip. Then Shortfall says whether enough replicas confirmed. Every command it runs must
// have a queue key (keys.Queue) first, as the scripts do. A nil *Writer waits for
// nothing. It is not safe for concurrent use: make one per call.
type Writer struct {
	redis.UniversalClient
	want Want

	waited    bool
	confirmed int   // the least any node's WAIT answered, over the last pipeline
	waitErr   error // a WAIT that failed in the last pipeline
}

// IsCluster says whether the client w wraps is a cluster client, so that scripts sent
// through w take their cluster form (script.Script).
func (w *Writer) IsCluster() bool { return script.IsCluster(w.UniversalClient) }

// Scripter returns what to send scripts through: w, or rdb when w is nil.
func (w *Writer) Scripter(rdb redis.UniversalClient) redis.UniversalClient {
	if w == nil {
		return rdb
	}
	return w
}

// Shortfall returns what fell short when fewer replicas than wanted confirmed the last
// pipeline's writes, or nil. A nil *Writer, or one that waited for nothing, has none.
func (w *Writer) Shortfall() *Shortfall {
	if w == nil || !w.waited {
		return nil
	}
	if w.waitErr == nil && w.confirmed >= w.want.N {
		return nil
	}
	s := &Shortfall{Wanted: w.want.N, Confirmed: w.confirmed, Timeout: w.want.Timeout, Err: w.waitErr}
	if w.waitErr != nil {
		s.Confirmed = 0
	}
	return s
}

// Eval runs through a waiting pipeline (Script.Run falls back to it after NOSCRIPT).
func (w *Writer) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	_, err := w.Pipelined(ctx, func(p redis.Pipeliner) error { cmd = p.Eval(ctx, script, keys, args...); return nil })
	CarryErr(err, cmd)
	return cmd
}

// EvalSha runs through a waiting pipeline (Script.Run sends it first).
func (w *Writer) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	_, err := w.Pipelined(ctx, func(p redis.Pipeliner) error { cmd = p.EvalSha(ctx, sha, keys, args...); return nil })
	CarryErr(err, cmd)
	return cmd
}

// Pipelined runs fn's commands and, in the same round trip, a no-op write per queue they
// touch and WAIT, on each node they go to. It returns fn's commands and the first error among
// them; WAIT's outcome is for check.
func (w *Writer) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	p := w.UniversalClient.Pipeline()
	if err := fn(p); err != nil {
		return nil, err
	}
	cmds := slices.Clone(p.Cmds())
	p.Discard()
	if len(cmds) == 0 {
		return nil, nil
	}
	w.waited, w.confirmed, w.waitErr = true, w.want.N, nil
	cc, ok := w.UniversalClient.(*redis.ClusterClient)
	if !ok {
		w.runOn(ctx, w.UniversalClient, cmds, cmds)
		return cmds, firstCmdErr(cmds)
	}
	// On a cluster WAIT must reach the node that took the writes. So group the commands by
	// the master of their key's slot, and send each group to its node directly, in parallel.
	groups := map[*redis.Client][]redis.Cmder{}
	var nodes []*redis.Client
	for _, cmd := range cmds {
		node, err := cc.MasterForKey(ctx, firstKey(cmd))
		if err != nil {
			setErr(cmds, err)
			w.waitErr = err
			return cmds, err
		}
		if _, seen := groups[node]; !seen {
			nodes = append(nodes, node)
		}
		groups[node] = append(groups[node], cmd)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, node := range nodes {
		wg.Go(func() {
			ww := &Writer{want: w.want}
			ww.runOn(ctx, node, groups[node], groups[node])
			if redirected(groups[node]) {
				// The slot moved (resharding, a cluster failover): let the cluster client
				// follow the redirect, then wait on the slot's master as it knows it now.
				for _, cmd := range groups[node] {
					cmd.SetErr(nil)
				}
				_, _ = cc.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, cmd := range groups[node] {
						_ = p.Process(ctx, cmd)
					}
					return nil
				})
				ww = &Writer{want: w.want}
				if now, err := cc.MasterForKey(ctx, firstKey(groups[node][0])); err != nil {
					ww.waitErr = err
				} else {
					ww.runOn(ctx, now, nil, groups[node])
				}
			}
			mu.Lock()
			defer mu.Unlock()
			w.confirmed = min(w.confirmed, ww.confirmed)
			if ww.waitErr != nil && w.waitErr == nil {
				w.waitErr = ww.waitErr
			}
		})
	}
	wg.Wait()
	return cmds, firstCmdErr(cmds)
}

// runOn sends cmds, a no-op write on the stats key of each queue that anchors touch, and WAIT
// to rdb in one pipeline. It records WAIT's answer. The anchors are cmds, or the commands of
// writes already made elsewhere (after a redirect) when it waits for those.
func (w *Writer) runOn(ctx context.Context, rdb redis.UniversalClient, cmds, anchors []redis.Cmder) {
	if c, ok := rdb.(*redis.Client); ok {
		rdb = withWaitTimeout(c, w.want.Timeout)
	}
	var wait *redis.IntCmd
	_, perr := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, cmd := range cmds {
			_ = p.Process(ctx, cmd)
		}
		stats := map[string]bool{}
		for _, cmd := range anchors {
			if k := statsKeyOf(firstKey(cmd)); k != "" {
				stats[k] = true
			}
		}
		for _, k := range slices.Sorted(maps.Keys(stats)) {
			p.HIncrBy(ctx, k, keys.StatEnqueued, 0)
		}
		wait = redis.NewIntCmd(ctx, "wait", w.want.N, w.want.Timeout.Milliseconds())
		_ = p.Process(ctx, wait)
		return nil
	})
	CarryErr(perr, append(slices.Clip(cmds), wait)...)
	n, err := wait.Result()
	w.waited = true
	if err != nil {
		w.confirmed, w.waitErr = 0, err
		return
	}
	w.confirmed = int(n)
}

// withWaitTimeout returns c, or a copy of c sharing its connections with a read timeout long
// enough for WAIT. The go-redis client reads a pipeline's replies within its ReadTimeout, and
// a WAIT may take its whole timeout.
func withWaitTimeout(c *redis.Client, wait time.Duration) *redis.Client {
	rt := c.Options().ReadTimeout
	if rt <= 0 || rt >= wait+time.Second {
		return c
	}
	return c.WithTimeout(rt + wait)
}

// firstKey returns a command's first key: for EVAL and EVALSHA the first of their keys.
func firstKey(cmd redis.Cmder) string {
	args := cmd.Args()
	pos := 1
	switch strings.ToLower(cmd.Name()) {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		pos = 3
	}
	if len(args) <= pos {
		return ""
	}
	return fmt.Sprint(args[pos])
}

// statsKeyOf returns the stats key of the queue that key belongs to (keys.Queue.Stats). It
// returns "" when key is no queue's. Every queue key is "PREFIX:{QUEUE}:...", and neither a
// prefix nor a queue name may hold a brace.
func statsKeyOf(key string) string {
	open := strings.IndexByte(key, '{')
	end := strings.Index(key, "}:")
	if open < 0 || end < open {
		return ""
	}
	return key[:end+2] + "stats"
}

// redirected reports whether a node answered MOVED or ASK to one of cmds.
func redirected(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		if rediserr.IsRedirect(cmd.Err()) {
			return true
		}
	}
	return false
}

func setErr(cmds []redis.Cmder, err error) {
	for _, cmd := range cmds {
		cmd.SetErr(err)
	}
}

func firstCmdErr(cmds []redis.Cmder) error {
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Worker side: the worker's replica setting makes the completer wait for replicas after writing job
// outcomes. An outcome that fewer replicas confirm is applied on the master already, so the
// write is not retried. It is counted (Outcomes.Unreplicated) and logged at most every
// unreplicatedLogEvery. The master may then fail before a replica has it. Then the promoted
// replica still holds the job as pending, and recovery runs it again. The loss is a second
// run, never a lost job.

// unreplicatedLogEvery bounds how often a worker logs outcome writes that its replicas did not
// confirm.
const unreplicatedLogEvery = 10 * time.Second

// Outcomes is a completer's replica wait and what it observed.
type Outcomes struct {
	want  Want
	count atomic.Int64 // outcome writes fewer replicas confirmed than wanted
	// logged is the count at the last log line, and logAt its time.
	mu     sync.Mutex
	logged int64
	logAt  time.Time
}

// NewOutcomes returns a worker's replica wait, or nil for none.
func NewOutcomes(n int, timeout time.Duration) *Outcomes {
	r := Want{N: n, Timeout: timeout}.WithDefaults()
	if r.N <= 0 {
		return nil
	}
	return &Outcomes{want: r}
}

// Writer returns what a completer write goes through.
func (o *Outcomes) Writer(rdb redis.UniversalClient) redis.UniversalClient {
	if o == nil {
		return rdb
	}
	return NewWriter(rdb, o.want).Scripter(rdb)
}

// Observe counts and logs a write whose replicas did not confirm. rdb is what Writer returned.
func (o *Outcomes) Observe(rdb redis.UniversalClient, transitions int, log zerolog.Logger) {
	w, ok := rdb.(*Writer)
	if o == nil || !ok {
		return
	}
	short := w.Shortfall()
	if short == nil {
		return
	}
	n := o.count.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	if now := time.Now(); now.Sub(o.logAt) >= unreplicatedLogEvery {
		log.Warn().Err(short).Int("transitions", transitions).Int64("unreplicated_writes", n-o.logged).
			Msg("job outcomes written on the master but not confirmed by enough replicas; a failover now would run those jobs again")
		o.logged, o.logAt = n, now
	}
}

// Unreplicated returns how many outcome writes fewer replicas confirmed than wanted (0 for a
// nil *Outcomes).
func (o *Outcomes) Unreplicated() int64 {
	if o == nil {
		return 0
	}
	return o.count.Load()
}

// CarryErr gives the commands of a pipeline that failed as a whole the pipeline's error. The
// connection may not have been set up (a refused AUTH, a SELECT of a database that does not
// exist). Then go-redis leaves every command without an error of its own. A command with
// neither an error nor a value would read as a write that went through. When any command
// carries an error, the others answered and keep their answers.
func CarryErr(err error, cmds ...redis.Cmder) {
	if err == nil || errors.Is(err, redis.Nil) {
		return
	}
	for _, c := range cmds {
		if c != nil && c.Err() != nil {
			return
		}
	}
	for _, c := range cmds {
		if c != nil {
			c.SetErr(err)
		}
	}
}
