package faultproxy_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/faultproxy"
	"github.com/conveyorq/conveyor/internal/leaktest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestMain(m *testing.M) {
	leaktest.Main(m,
		// redistest's process spawner lives as long as the test binary.
		leaktest.IgnoreFunction("github.com/conveyorq/conveyor/internal/redisproc.StartCmd.func1.1"),
	)
}

// setup starts a private redis-server, a proxy in front of it, a client of
// the proxy with the given MaxRetries and one connection, and a direct
// client of the server (for checking what Redis really applied).
func setup(t *testing.T, maxRetries int) (p *faultproxy.Proxy, viaProxy, direct *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	p = faultproxy.Start(t, srv.Addr)
	require.NotEqual(t, srv.Addr, p.Addr())
	require.Equal(t, srv.Addr, p.Target())
	viaProxy = redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: maxRetries, PoolSize: 1})
	t.Cleanup(func() { _ = viaProxy.Close() })
	return p, viaProxy, srv.Client(t)
}

func TestPassThrough(t *testing.T) {
	t.Parallel()
	p, c, direct := setup(t, 0)
	ctx := context.Background()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	got, err := direct.Get(ctx, "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", got)
	big := string(make([]byte, 1<<20)) // larger than one read: many chunks each way
	require.NoError(t, c.Set(ctx, "big", big, 0).Err())
	got, err = c.Get(ctx, "big").Result()
	require.NoError(t, err)
	require.Equal(t, big, got)
	require.EqualValues(t, 1, p.Accepted())
	require.Zero(t, p.Dropped())
}

// A lost INCR reply: Redis applied the INCR, the client saw EOF and go-redis
// (default MaxRetries) sent it again, so one call advanced the counter by 2.
func TestDropReplyIsRetried(t *testing.T) {
	t.Parallel()
	p, c, direct := setup(t, 0)
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err()) // the connection's handshake replies are behind us
	p.DropNextReplies(1)

	n, err := c.Incr(ctx, "counter").Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	got, err := direct.Get(ctx, "counter").Int()
	require.NoError(t, err)
	require.Equal(t, 2, got)
	require.EqualValues(t, 1, p.Dropped())
	require.EqualValues(t, 2, p.Accepted()) // the client reconnected once

	n, err = c.Incr(ctx, "counter").Result() // disarmed after one drop
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	require.EqualValues(t, 1, p.Dropped())
}

// Without retries the caller gets the error although Redis applied the INCR.
func TestDropReplyWithoutRetries(t *testing.T) {
	t.Parallel()
	p, c, direct := setup(t, -1)
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err())
	p.DropNextReplies(1)

	require.Error(t, c.Incr(ctx, "counter").Err())
	got, err := direct.Get(ctx, "counter").Int()
	require.NoError(t, err)
	require.Equal(t, 1, got)
	require.EqualValues(t, 1, p.Dropped())

	n, err := c.Incr(ctx, "counter").Result() // a new connection, no more drops
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
}

// DropOnly loses only the replies to requests that match, here EVALSHA, even
// on a fresh connection whose handshake replies come first.
func TestDropOnlyScriptReplies(t *testing.T) {
	t.Parallel()
	p, c, direct := setup(t, 0)
	ctx := context.Background()
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	require.NoError(t, incr.Load(ctx, direct).Err())

	p.DropOnly(faultproxy.RequestContains("evalsha"))
	p.DropNextReplies(1)
	require.NoError(t, c.Set(ctx, "other", "x", 0).Err()) // handshake and SET replies pass
	require.NoError(t, c.Incr(ctx, "plain").Err())        // so does a plain INCR
	n, err := incr.Run(ctx, c, []string{"counter"}).Int()
	require.NoError(t, err)
	require.Equal(t, 2, n) // EVALSHA applied twice: its first reply was lost
	require.EqualValues(t, 1, p.Dropped())

	p.DropOnly(nil)
	require.NoError(t, c.Set(ctx, "other", "y", 0).Err())
	require.EqualValues(t, 1, p.Dropped())
}

func TestDropRepliesRandomly(t *testing.T) {
	t.Parallel()
	p, c, direct := setup(t, -1)
	ctx := context.Background()
	// Only INCR replies: a new connection's handshake replies are not lost,
	// so each failed call below is exactly one dropped INCR reply.
	p.DropOnly(faultproxy.RequestContains("INCR"))
	p.DropRepliesRandomly(0.3)

	const calls = 200
	failed := 0
	for range calls {
		if c.Incr(ctx, "counter").Err() != nil {
			failed++
		}
	}
	t.Logf("%d of %d replies dropped", failed, calls)
	require.Positive(t, failed)
	require.Less(t, failed, calls)
	require.EqualValues(t, failed, p.Dropped())
	got, err := direct.Get(ctx, "counter").Int()
	require.NoError(t, err)
	require.Equal(t, calls, got) // every INCR was applied, lost reply or not

	p.DropRepliesRandomly(0)
	for range 20 {
		require.NoError(t, c.Incr(ctx, "counter").Err())
	}
	require.EqualValues(t, failed, p.Dropped())
}

func TestDelayReplies(t *testing.T) {
	t.Parallel()
	p, c, _ := setup(t, -1)
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err())

	const d = 200 * time.Millisecond
	p.DelayReplies(d)
	start := time.Now()
	require.NoError(t, c.Ping(ctx).Err())
	require.GreaterOrEqual(t, time.Since(start), d) // a lower bound only: never flaky

	// A delay longer than the client's read timeout makes the call fail. The delay is far
	// longer (a minute: the proxy ends it when the connection closes), and the timeout wide
	// enough for a ping on a machine ten times slower, so that neither is a race.
	p.DelayReplies(time.Minute)
	impatient := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = impatient.Close() })
	require.Error(t, impatient.Ping(ctx).Err())

	p.DelayReplies(0)
	require.NoError(t, impatient.Ping(ctx).Err())
}

func TestCutAll(t *testing.T) {
	t.Parallel()
	p, c, direct := setup(t, -1)
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err())

	// A blocked BLPOP is cut in the middle of its call.
	res := make(chan error, 1)
	go func() { res <- c.BLPop(ctx, 0, "nothing").Err() }()
	require.Eventually(t, func() bool {
		info, err := direct.Info(ctx, "clients").Result()
		return err == nil && strings.Contains(info, "blocked_clients:1\r\n")
	}, 10*time.Second, 10*time.Millisecond)
	p.CutAll()
	err := <-res
	require.Error(t, err)
	require.NotErrorIs(t, err, redis.Nil)

	// CutAll is not a mode: the next call connects again.
	require.NoError(t, c.Ping(ctx).Err())
	require.EqualValues(t, 2, p.Accepted())
}

func TestRefuse(t *testing.T) {
	t.Parallel()
	p, c, _ := setup(t, -1)
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err())

	p.Refuse(true)
	require.NoError(t, c.Ping(ctx).Err()) // open connections are not affected
	p.CutAll()
	accepted := p.Accepted()
	require.Error(t, c.Ping(ctx).Err())
	require.Error(t, c.Ping(ctx).Err())
	require.Greater(t, p.Accepted(), accepted) // the client did connect, and was hung up on

	// With retries, go-redis gives up too.
	retrying := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 2})
	t.Cleanup(func() { _ = retrying.Close() })
	require.Error(t, retrying.Ping(ctx).Err())

	p.Refuse(false)
	require.NoError(t, c.Ping(ctx).Err())
	require.NoError(t, retrying.Ping(ctx).Err())
}

func TestClose(t *testing.T) {
	t.Parallel()
	p, c, direct := setup(t, -1)
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err())
	p.DelayReplies(time.Hour) // Close must not wait for a delayed reply
	res := make(chan error, 1)
	go func() { res <- c.Incr(ctx, "counter").Err() }()
	require.Eventually(t, func() bool { // Redis has replied: the proxy holds the reply
		n, err := direct.Get(ctx, "counter").Int()
		return err == nil && n == 1
	}, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, p.Close())
	require.NoError(t, p.Close()) // idempotent
	require.Error(t, <-res)
	// Nobody listens any more. (Checked with a raw dial: a go-redis client
	// would start a background redial loop that outlives the test.)
	conn, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_ = conn.Close()
	}
	require.Error(t, err)
}

func TestNewBadTarget(t *testing.T) {
	t.Parallel()
	// A target nobody listens on: the proxy accepts, fails to dial and hangs up.
	p, err := faultproxy.New("127.0.0.1:1")
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer c.Close()
	require.Error(t, c.Ping(context.Background()).Err())
}
