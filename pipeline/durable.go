package pipeline

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

// Durable writes. Redis acknowledges a write once the master has it; its replicas get it a
// moment later. A master that dies in that moment takes the write with it, and Sentinel (or
// the cluster) promotes a replica that never saw it. Asking for replicas makes a write wait,
// with Redis's WAIT, until that many replicas have it, or the timeout passes.
//
// WAIT confirms a connection's writes up to its last one, and a pipeline may run on any pooled
// connection. So each waiting pipeline also writes a no-op (HINCRBY of the queue's stats by 0)
// after the scripts. The replicas that confirm it have every write the master took before it,
// whichever connection made them. This also covers a job that was there already (a duplicate
// publish), which the caller's own scripts did not write.

// DefaultReplicaTimeout is how long a write waits for its replicas (WithReplicas,
// ClientConfig.Replicas, WorkerConfig.Replicas) when no timeout is given.
const DefaultReplicaTimeout = time.Second

// MaxReplicas bounds the replicas a write may wait for.
const MaxReplicas = 100

// ErrNotReplicated is wrapped (by a *ReplicationError) by the error of a write that fewer
// replicas than asked confirmed in time. The write was applied on the master: the job exists
// and will run unless the master fails before a replica has it. Publishing it again with its
// id (WithID) is idempotent and waits again.
var ErrNotReplicated = errors.New("pipeline: write not confirmed by enough replicas")

// ReplicationError says how many replicas confirmed a write that waited for more.
type ReplicationError struct {
	Wanted    int           // replicas asked for
	Confirmed int           // replicas that confirmed in time
	Timeout   time.Duration // how long the write waited
	Err       error         // WAIT's own error when it failed (Confirmed is then 0)
}

func (e *ReplicationError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: waiting for %d replicas failed: %v", ErrNotReplicated, e.Wanted, e.Err)
	}
	return fmt.Sprintf("%s: %d of %d replicas confirmed within %s", ErrNotReplicated, e.Confirmed, e.Wanted, e.Timeout)
}

// Is makes errors.Is(err, ErrNotReplicated) true.
func (e *ReplicationError) Is(target error) bool { return target == ErrNotReplicated }

// Unwrap returns WAIT's own error, if any.
func (e *ReplicationError) Unwrap() error { return e.Err }

// replicas is a replica wait: n replicas within timeout; n == 0 waits for none.
type replicas struct {
	n       int
	timeout time.Duration
}

// check validates a replica setting, wrapping ErrInvalid; what names it in the message.
func (r replicas) check(what string) error {
	switch {
	case r.n < 0 || r.n > MaxReplicas:
		return invalid("%s: replicas %d outside 0..%d", what, r.n, MaxReplicas)
	case r.timeout < 0:
		return invalid("%s: replica timeout %s is negative", what, r.timeout)
	}
	return nil
}

func (r replicas) withDefaults() replicas {
	if r.n > 0 && r.timeout == 0 {
		r.timeout = DefaultReplicaTimeout
	}
	return r
}

// WithReplicas makes Enqueue or EnqueueBatch return only once n replicas have the jobs. When
// fewer confirmed within timeout (zero: DefaultReplicaTimeout), the call fails with an error
// wrapping ErrNotReplicated (a *ReplicationError). Such an error does not mean the jobs do not
// exist. They were written on the master and come back with the error. Publish them again
// with their ids (WithID) to wait again. With n = 0 it waits for none, overriding
// ClientConfig.Replicas. In EnqueueBatch the wait covers the whole call; a task's own
// WithReplicas raises it.
//
// The wait is Redis's WAIT, sent in the same round trip as the enqueue script. On a cluster it
// goes to the master of each node the jobs go to. A replica that confirmed has the jobs in
// memory; whether it also has them on disk is its appendfsync's matter. Throughput and the
// loss it prevents are measured in docs/OPERATIONS.md ("Durable publish").
func WithReplicas(n int, timeout time.Duration) Option {
	return func(o *enqueueOptions) {
		r := replicas{n: n, timeout: timeout}
		if err := r.check("WithReplicas"); err != nil {
			o.errs = append(o.errs, err)
		}
		o.replicas, o.hasReplicas = r, true
	}
}

// replicasFor returns the replica wait of an enqueue call: the client's, or the strongest
// WithReplicas among the call's and the tasks' options.
func (c *Client) replicasFor(common []Option, tasks []Task) replicas {
	r := replicas{n: c.cfg.Replicas, timeout: c.cfg.ReplicaTimeout}
	given := false
	take := func(opts []Option) {
		if len(opts) == 0 {
			return
		}
		var o enqueueOptions
		for _, opt := range opts {
			opt(&o)
		}
		if !o.hasReplicas {
			return
		}
		if !given {
			r, given = o.replicas, true
			return
		}
		r.n, r.timeout = max(r.n, o.replicas.n), max(r.timeout, o.replicas.timeout)
	}
	take(common)
	for i := range tasks {
		take(tasks[i].Opts)
	}
	return r.withDefaults()
}

// writer returns what an enqueue writes through: rdb itself, or a replicaWriter when r asks
// for replicas.
func (r replicas) writer(rdb redis.UniversalClient) *replicaWriter {
	if r.n <= 0 {
		return nil
	}
	return &replicaWriter{UniversalClient: rdb, want: r}
}

// replicaWriter is a Redis client for one call's writes. Each pipeline it runs (and each
// EVAL/EVALSHA, which Script.Run sends) ends with a no-op write and WAIT per node, in the same
// round trip. Then check says whether enough replicas confirmed. Every command it runs must
// have a queue key (keys.Queue) first, as the scripts do. A nil *replicaWriter waits for
// nothing. It is not safe for concurrent use: make one per call.
type replicaWriter struct {
	redis.UniversalClient
	want replicas

	waited    bool
	confirmed int   // the least any node's WAIT answered, over the last pipeline
	waitErr   error // a WAIT that failed in the last pipeline
}

// IsCluster says whether the client w wraps is a cluster client, so that scripts sent
// through w take their cluster form (script.Script).
func (w *replicaWriter) IsCluster() bool { return script.IsCluster(w.UniversalClient) }

// scripter returns what to send scripts through: w, or rdb when w is nil.
func (w *replicaWriter) scripter(rdb redis.UniversalClient) redis.UniversalClient {
	if w == nil {
		return rdb
	}
	return w
}

// check returns err, joined with a *ReplicationError when fewer replicas than wanted
// confirmed the call's writes. A Redis error (other than ErrConflict, which refuses single
// jobs of a batch that was written) comes back alone: the writes may not have happened.
func (w *replicaWriter) check(err error) error {
	if w == nil || !w.waited || err != nil && !errors.Is(err, ErrConflict) {
		return err
	}
	if w.waitErr == nil && w.confirmed >= w.want.n {
		return err
	}
	rerr := &ReplicationError{Wanted: w.want.n, Confirmed: w.confirmed, Timeout: w.want.timeout, Err: w.waitErr}
	if w.waitErr != nil {
		rerr.Confirmed = 0
	}
	return errors.Join(err, rerr)
}

// Eval runs through a waiting pipeline (Script.Run falls back to it after NOSCRIPT).
func (w *replicaWriter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	_, err := w.Pipelined(ctx, func(p redis.Pipeliner) error { cmd = p.Eval(ctx, script, keys, args...); return nil })
	carryErr(err, cmd)
	return cmd
}

// EvalSha runs through a waiting pipeline (Script.Run sends it first).
func (w *replicaWriter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	_, err := w.Pipelined(ctx, func(p redis.Pipeliner) error { cmd = p.EvalSha(ctx, sha, keys, args...); return nil })
	carryErr(err, cmd)
	return cmd
}

// Pipelined runs fn's commands and, in the same round trip, a no-op write per queue they
// touch and WAIT, on each node they go to. It returns fn's commands and the first error among
// them; WAIT's outcome is for check.
func (w *replicaWriter) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	p := w.UniversalClient.Pipeline()
	if err := fn(p); err != nil {
		return nil, err
	}
	cmds := slices.Clone(p.Cmds())
	p.Discard()
	if len(cmds) == 0 {
		return nil, nil
	}
	w.waited, w.confirmed, w.waitErr = true, w.want.n, nil
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
			ww := &replicaWriter{want: w.want}
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
				ww = &replicaWriter{want: w.want}
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
func (w *replicaWriter) runOn(ctx context.Context, rdb redis.UniversalClient, cmds, anchors []redis.Cmder) {
	if c, ok := rdb.(*redis.Client); ok {
		rdb = withWaitTimeout(c, w.want.timeout)
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
		wait = redis.NewIntCmd(ctx, "wait", w.want.n, w.want.timeout.Milliseconds())
		_ = p.Process(ctx, wait)
		return nil
	})
	carryErr(perr, append(slices.Clip(cmds), wait)...)
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

// Worker side: WorkerConfig.Replicas makes the completer wait for replicas after writing job
// outcomes. An outcome that fewer replicas confirm is applied on the master already, so the
// write is not retried. It is counted (Worker.UnreplicatedWrites) and logged at most every
// unreplicatedLogEvery. The master may then fail before a replica has it. Then the promoted
// replica still holds the job as pending, and recovery runs it again. The loss is a second
// run, never a lost job.

// unreplicatedLogEvery bounds how often a worker logs outcome writes that its replicas did not
// confirm.
const unreplicatedLogEvery = 10 * time.Second

// outcomeReplicas is a completer's replica wait and what it observed.
type outcomeReplicas struct {
	want  replicas
	count atomic.Int64 // outcome writes fewer replicas confirmed than wanted
	// logged is the count at the last log line, and logAt its time.
	mu     sync.Mutex
	logged int64
	logAt  time.Time
}

// newOutcomeReplicas returns a worker's replica wait, or nil for none.
func newOutcomeReplicas(n int, timeout time.Duration) *outcomeReplicas {
	r := replicas{n: n, timeout: timeout}.withDefaults()
	if r.n <= 0 {
		return nil
	}
	return &outcomeReplicas{want: r}
}

// writer returns what a completer write goes through.
func (o *outcomeReplicas) writer(rdb redis.UniversalClient) redis.UniversalClient {
	if o == nil {
		return rdb
	}
	return o.want.writer(rdb).scripter(rdb)
}

// observe counts and logs a write whose replicas did not confirm. rdb is what writer returned.
func (o *outcomeReplicas) observe(rdb redis.UniversalClient, transitions int, log zerolog.Logger) {
	w, ok := rdb.(*replicaWriter)
	if o == nil || !ok {
		return
	}
	err := w.check(nil)
	if err == nil {
		return
	}
	n := o.count.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	if now := time.Now(); now.Sub(o.logAt) >= unreplicatedLogEvery {
		log.Warn().Err(err).Int("transitions", transitions).Int64("unreplicated_writes", n-o.logged).
			Msg("job outcomes written on the master but not confirmed by enough replicas; a failover now would run those jobs again")
		o.logged, o.logAt = n, now
	}
}

// UnreplicatedWrites returns how many of the worker's outcome writes fewer replicas confirmed
// than WorkerConfig.Replicas asks (0 without it).
func (w *Worker) UnreplicatedWrites() int64 {
	if w.replicas == nil {
		return 0
	}
	return w.replicas.count.Load()
}

// carryErr gives the commands of a pipeline that failed as a whole the pipeline's error. The
// connection may not have been set up (a refused AUTH, a SELECT of a database that does not
// exist). Then go-redis leaves every command without an error of its own. A command with
// neither an error nor a value would read as a write that went through. When any command
// carries an error, the others answered and keep their answers.
func carryErr(err error, cmds ...redis.Cmder) {
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
