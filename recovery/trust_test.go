package recovery_test

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/faultproxy"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/recovery"
)

// holder renews the lease of one entry every period, as a live worker does, and counts the
// renewals that kept it.
type holder struct {
	rdb      *redis.Client
	stream   string
	consumer string
	entry    string
	period   time.Duration
	renewed  atomic.Int64
	failed   atomic.Int64
	lost     atomic.Bool
}

func (h *holder) run(ctx context.Context) {
	for {
		// A whole period after each try, failed or not (a ticker would fire at once after a
		// try that outlasted it).
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.period):
		}
		ids, err := h.rdb.Do(ctx, "XCLAIM", h.stream, keys.Group, h.consumer, 0, h.entry, "JUSTID").StringSlice()
		switch {
		case err != nil:
			h.failed.Add(1) // Redis is away; the next period tries again
		case len(ids) == 0:
			h.lost.Store(true)
			return
		default:
			h.renewed.Add(1)
		}
	}
}

// outage is one way for Redis to go away and come back.
type outage struct {
	name string
	args []string // of the private server
	// start begins the outage; end ends it (end runs once the outage lasted long enough).
	start func(t *testing.T, srv *redistest.Server, p *faultproxy.Proxy)
	end   func(t *testing.T, srv *redistest.Server, p *faultproxy.Proxy)
	// aligned: end the outage right after one of the worker's renewals failed, the worst phase
	// (its next try is a whole lease period away). Not for SIGSTOP: a renewal sent during the
	// stop waits in Redis's socket buffer and neither fails nor is lost.
	aligned bool
}

var outages = []outage{
	{
		name: "SIGSTOP",
		start: func(t *testing.T, srv *redistest.Server, _ *faultproxy.Proxy) {
			require.NoError(t, syscall.Kill(srv.PID(), syscall.SIGSTOP))
		},
		end: func(t *testing.T, srv *redistest.Server, _ *faultproxy.Proxy) {
			require.NoError(t, syscall.Kill(srv.PID(), syscall.SIGCONT))
		},
	},
	{
		// A partition that resets the connections: what was in flight is lost.
		name: "Partition",
		start: func(t *testing.T, _ *redistest.Server, p *faultproxy.Proxy) {
			p.Refuse(true)
			p.CutAll()
		},
		end:     func(t *testing.T, _ *redistest.Server, p *faultproxy.Proxy) { p.Refuse(false) },
		aligned: true,
	},
	{
		// A crash and a restart from the append-only file: the pending entries come back with
		// their delivery times, so they look idle for as long as Redis was down.
		name:    "RestartFromDisk",
		args:    []string{"--appendonly", "yes", "--appendfsync", "always"},
		start:   func(t *testing.T, srv *redistest.Server, _ *faultproxy.Proxy) { require.NoError(t, srv.Kill()) },
		end:     func(t *testing.T, srv *redistest.Server, _ *faultproxy.Proxy) { require.NoError(t, srv.Restart()) },
		aligned: true,
	},
}

// live is a job held by a live worker (a holder), on a queue watched by a running Recoverer.
type live struct {
	rdb   *redis.Client // the test's own view of Redis
	jobs  *pipeline.Client
	queue string
	q     keys.Queue
	job   *pipeline.Job
	h     *holder
	r     *recovery.Recoverer
	calls atomic.Int64 // the recoverer's answered calls

	stopHolder    context.CancelFunc
	holderDone    chan struct{}
	stopRecoverer context.CancelFunc
	runDone       chan error
}

// liveVT is the visibility timeout of the live tests: the holder renews every 500ms, the
// recoverer scans every 100ms.
const liveVT = 1500 * time.Millisecond

// startLive sets up a live job on the server at addr (reached directly by rdb); hooks go on
// the recoverer's client.
func startLive(t *testing.T, rdb *redis.Client, addr string, hooks ...redis.Hook) *live {
	t.Helper()
	ctx := t.Context()
	client := func() *redis.Client {
		// A pool large enough that go-redis's dial circuit breaker (open after PoolSize failed
		// dials, probing once a second) does not keep a client blind after an outage.
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1000})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	jobs, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	l := &live{rdb: rdb, jobs: jobs, queue: redistest.UniqueName(t)}
	l.q = keys.New(keys.DefaultPrefix, l.queue)
	l.job, err = l.jobs.Enqueue(ctx, l.queue, pipeline.Task{Type: "test"})
	require.NoError(t, err)
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, l.q.Stream(), keys.Group, "0").Err())
	got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "live",
		Streams: []string{l.q.Stream(), ">"}, Count: 1, Block: -1}).Result()
	require.NoError(t, err)
	require.Equal(t, l.job.Entry, got[0].Messages[0].ID)

	hc := client()
	hc.Options().MaxRetries = -1 // a failed renewal is reported at once, not after retries
	l.h = &holder{rdb: hc, stream: l.q.Stream(), consumer: "live", entry: l.job.Entry, period: liveVT / 3}
	var hctx context.Context
	hctx, l.stopHolder = context.WithCancel(ctx)
	t.Cleanup(l.stopHolder)
	l.holderDone = make(chan struct{})
	go func() { defer close(l.holderDone); l.h.run(hctx) }()

	rc := client()
	redistest.CountCommands(rc).Observe(func(cmd redis.Cmder) {
		if err := cmd.Err(); err == nil || rediserr.IsNoStream(err) || err == redis.Nil {
			l.calls.Add(1)
		}
	})
	for _, h := range hooks {
		rc.AddHook(h)
	}
	l.r, err = recovery.NewRecoverer(rc, recovery.Config{Queue: l.queue, VisibilityTimeout: liveVT,
		Interval: 100 * time.Millisecond})
	require.NoError(t, err)
	var rctx context.Context
	rctx, l.stopRecoverer = context.WithCancel(ctx)
	t.Cleanup(l.stopRecoverer)
	l.runDone = make(chan error, 1)
	go func() { l.runDone <- l.r.Run(rctx) }()

	// Steady state: the recoverer trusts what it sees, and renewals keep the job where it is.
	require.Eventually(t, func() bool {
		trusted, _ := l.r.Watching()
		return trusted && l.h.renewed.Load() >= 4
	}, 30*time.Second, 10*time.Millisecond)
	l.requireUntouched(t)
	return l
}

func (l *live) requireUntouched(t *testing.T) {
	t.Helper()
	now, err := l.jobs.Get(t.Context(), l.queue, l.job.ID)
	require.NoError(t, err)
	require.Equal(t, l.job.Entry, now.Entry, "the live worker's job was put back: %s", now.LastError)
	require.Zero(t, now.Attempt)
	require.False(t, l.h.lost.Load(), "the live worker's entry was taken from it")
	requeued, dead := l.r.Totals()
	require.Zero(t, requeued+dead)
}

// requireKept gives the recoverer every chance to take the job (many of its calls answered,
// the lease renewed several times since), then checks that it did not.
func (l *live) requireKept(t *testing.T) {
	t.Helper()
	calls, renewed := l.calls.Load(), l.h.renewed.Load()
	require.Eventually(t, func() bool {
		return l.h.lost.Load() || (l.h.renewed.Load() >= renewed+4 && l.calls.Load() >= calls+40)
	}, 60*time.Second, 10*time.Millisecond)
	l.requireUntouched(t)
}

// requireRecoveredOnceDead stops the holder, as if its worker died: the job is recovered.
func (l *live) requireRecoveredOnceDead(t *testing.T) {
	t.Helper()
	l.stopHolder()
	<-l.holderDone
	require.Eventually(t, func() bool {
		now, err := l.jobs.Get(t.Context(), l.queue, l.job.ID)
		return err == nil && now.Entry != l.job.Entry && now.Attempt == 1
	}, 60*time.Second, 20*time.Millisecond)
	l.stopRecoverer()
	require.NoError(t, <-l.runDone)
}

// TestRecovererTrustsNoIdleTimeAcrossAnOutage: a worker renews its lease every third of the
// visibility timeout; Redis goes away for longer than the visibility timeout, so when it comes
// back every pending entry looks idle at once. The recoverer, scanning every 100ms, must leave
// the live worker's job alone: the worker renews within a lease period of Redis coming back.
// Once the worker really stops renewing, the job is recovered.
func TestRecovererTrustsNoIdleTimeAcrossAnOutage(t *testing.T) {
	t.Parallel()
	for _, o := range outages {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.WithArgs(o.args...))
			p := faultproxy.Start(t, srv.Addr)
			l := startLive(t, srv.Client(t), p.Addr())
			_, gaps := l.r.Watching()

			o.start(t, srv, p)
			ended := false
			defer func() {
				if !ended {
					o.end(t, srv, p)
				}
			}()
			time.Sleep(2 * liveVT) // the outage, not an assertion
			if o.aligned {
				failed := l.h.failed.Load()
				require.Eventually(t, func() bool { return l.h.failed.Load() > failed }, 30*time.Second, time.Millisecond)
			}
			o.end(t, srv, p)
			ended = true

			l.requireKept(t)
			_, after := l.r.Watching()
			require.Greater(t, after, gaps, "the recoverer saw no gap")
			l.requireRecoveredOnceDead(t)
		})
	}
}

// xpendingHook runs fn (once) right before the first XPENDING after it is armed.
type xpendingHook struct {
	armed atomic.Bool
	fn    func()
}

func (h *xpendingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *xpendingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *xpendingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "xpending") && h.armed.CompareAndSwap(true, false) {
			h.fn()
		}
		return next(ctx, cmd)
	}
}

// TestRecovererTrustsNoIdleTimeAcrossAClockJump: Redis's clock jumps ahead by twice the
// visibility timeout (a failover to a master whose clock is ahead), so every pending entry
// looks idle at once. The jump is simulated: the recoverer's readings of Redis's clock move by
// the jump, and so does the live entry's idle time (its lease renewals then reset it, as they
// would on the new master). The recoverer must leave the live worker's job alone, whether the
// jump comes between two scans or inside one (after the scan read the clock).
func TestRecovererTrustsNoIdleTimeAcrossAClockJump(t *testing.T) {
	t.Parallel()
	const jump = 2 * liveVT
	for _, during := range []bool{false, true} {
		name := "BetweenScans"
		if during {
			name = "DuringAScan"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Shared(t)
			var l *live
			doJump := func() {
				l.r.SkewClock(jump)
				require.NoError(t, l.rdb.Do(context.Background(), "XCLAIM", l.q.Stream(), keys.Group, "live", 0,
					l.job.Entry, "IDLE", jump.Milliseconds(), "JUSTID").Err())
			}
			hook := &xpendingHook{fn: func() { doJump() }}
			l = startLive(t, srv.Client(t), srv.Addr, hook)
			_, gaps := l.r.Watching()
			if during {
				hook.armed.Store(true)
				require.Eventually(t, func() bool { return !hook.armed.Load() }, 30*time.Second, time.Millisecond)
			} else {
				doJump()
			}
			l.requireKept(t)
			_, after := l.r.Watching()
			require.Greater(t, after, gaps, "the recoverer saw no jump")
			l.requireRecoveredOnceDead(t)
		})
	}
}

// A new Recoverer defers what its first scans find, until it has watched Redis for a lease
// period; then the first scan recovers the entry its earlier scans listed.
func TestRecovererFirstScansDefer(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	const vt = 600 * time.Millisecond
	f := deliverOne(t, b, deadIdle)
	r, err := recovery.NewRecoverer(b.rdb, recovery.Config{Queue: b.queue, VisibilityTimeout: vt, Interval: 100 * time.Millisecond})
	require.NoError(t, err)
	begin := time.Now()
	res, ran, err := r.RunOnce(t.Context())
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, recovery.Result{Deferred: 1}, res)
	requireUntouched(t, b, f)
	for {
		time.Sleep(20 * time.Millisecond)
		res, ran, err = r.RunOnce(t.Context())
		require.NoError(t, err)
		require.True(t, ran)
		if res.Requeued > 0 {
			break
		}
		require.Equal(t, recovery.Result{Deferred: 1}, res)
	}
	require.GreaterOrEqual(t, time.Since(begin), vt/3, "recovered before a lease period of watching")
	require.Equal(t, recovery.Result{Requeued: 1}, res)
	requireRequeued(t, b, f, 1)
}

// Consumers' idle times are Redis's too: a Recoverer prunes none before it trusts what it sees.
func TestRecovererPrunesOnlyOnceTrusted(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	const vt = 300 * time.Millisecond // ConsumerTTL is raised to 3x this
	b.enqueue(t)
	b.deliver(t, "busy", 1)
	require.NoError(t, b.rdb.XGroupCreateConsumer(t.Context(), b.q.Stream(), keys.Group, "stopped").Err())
	time.Sleep(4 * vt) // "stopped" idles past ConsumerTTL
	r, err := recovery.NewRecoverer(b.rdb, recovery.Config{Queue: b.queue, VisibilityTimeout: vt,
		Interval: 100 * time.Millisecond, ConsumerTTL: time.Millisecond})
	require.NoError(t, err)
	res, ran, err := r.RunOnce(t.Context())
	require.NoError(t, err)
	require.True(t, ran)
	require.Zero(t, res.Pruned, "pruned before watching Redis for a lease period")
	require.Equal(t, 1, res.Deferred) // busy's entry
	for res.Pruned == 0 {
		time.Sleep(20 * time.Millisecond)
		res, _, err = r.RunOnce(t.Context())
		require.NoError(t, err)
	}
	// The same scan recovered busy's entry, which left busy with nothing pending too.
	require.Equal(t, recovery.Result{Requeued: 1, Pruned: 2}, res)
}
