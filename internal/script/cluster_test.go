package script_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/script"
)

// incr counts its runs in its first key: a run that happened shows.
var incr = script.New(`return redis.call('INCR', KEYS[1])`)

// tryAgains is how many TRYAGAIN errors node has answered.
func tryAgains(ctx context.Context, node *redis.Client) int {
	info, err := node.InfoMap(ctx, "errorstats").Result()
	if err != nil {
		return -1
	}
	v := info["Errorstats"]["errorstat_TRYAGAIN"] // count=N
	n, _ := strconv.Atoi(strings.TrimPrefix(v, "count="))
	return n
}

// TestClusterGuard: on a cluster, a script is refused (TRYAGAIN, before it does anything)
// while its node migrates or imports the slot of its first key, its caller retries (Pipelined
// and Run alike), and the call goes through once the slot is stable; through a plain client the script runs
// unguarded.
func TestClusterGuard(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	ctx := t.Context()
	cc := c.Client(t)
	const key = "{guard}:n"
	require.Equal(t, int64(1), incr.Run(ctx, cc, []string{key}).Val())
	own, other, slot := c.SlotNodes(t, cc, key)
	require.Equal(t, int64(2), incr.Run(ctx, own, []string{key}).Val(), "a plain client's call")
	require.True(t, script.IsCluster(cc))
	require.False(t, script.IsCluster(own))

	// The slot in migration from own to other, its keys still on own.
	require.NoError(t, other.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", own.ClusterMyID(ctx).Val()).Err())
	require.NoError(t, own.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", other.ClusterMyID(ctx).Val()).Err())

	// The migrating node refuses the call until the caller's deadline; it never ran.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := incr.Run(short, cc, []string{key}).Err()
	cancel()
	require.Error(t, err, "the call ran on a slot in migration")
	require.Equal(t, "2", own.Get(ctx, key).Val(), "a refused call ran")
	// Sent once, without retries, the refusal says why.
	err = incr.For(cc).Run(ctx, own, []string{key}).Err()
	require.Equal(t, rediserr.ClusterDown, rediserr.Classify(err), "%v", err)
	require.Contains(t, err.Error(), "is migrating between cluster nodes")

	// The importing node, asked directly under ASKING as a client sent there by ASK would:
	// the guarded form is refused; the plain one runs there, on a key that is not there yet
	// (what the guard is for).
	asking := func(s *redis.Script) *redis.Cmd {
		require.NoError(t, s.Load(ctx, other).Err())
		p := other.Pipeline()
		p.Do(ctx, "ASKING")
		cmd := s.EvalSha(ctx, p, []string{key})
		_, _ = p.Exec(ctx)
		return cmd
	}
	err = asking(incr.For(cc)).Err()
	require.Error(t, err)
	require.Equal(t, rediserr.ClusterDown, rediserr.Classify(err), "%v", err)
	require.Equal(t, int64(1), asking(incr.For(own)).Val(), "the unguarded script ran on the importing node")

	// A pipelined call waits: refused (the node counts it) until the slot is stable again,
	// then it runs once. Its client does not retry TRYAGAIN itself (go-redis's cluster client
	// does, a few times within about a second), so that the retries seen are the library's: at
	// least two refusals before the slot is let go.
	bare := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, MaxRedirects: -1})
	t.Cleanup(func() { _ = bare.Close() })
	seen := tryAgains(ctx, own)
	done := make(chan error, 1)
	go func() {
		cmds, err := script.Pipelined(ctx, bare, []script.Call{{Script: incr, Keys: []string{key}}})
		if err == nil {
			err = cmds[0].Err()
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return tryAgains(ctx, own) >= seen+2 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, "2", own.Get(ctx, key).Val(), "a refused call ran")
	for _, n := range []*redis.Client{own, other} {
		require.NoError(t, n.Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err())
	}
	require.NoError(t, <-done)
	require.Equal(t, "3", own.Get(ctx, key).Val(), "the call ran once after the move")

	// Run waits the same way: refused until the slot is stable again, then it runs once.
	require.NoError(t, other.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", own.ClusterMyID(ctx).Val()).Err())
	require.NoError(t, own.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", other.ClusterMyID(ctx).Val()).Err())
	seen = tryAgains(ctx, own)
	go func() { done <- incr.Run(ctx, bare, []string{key}).Err() }()
	require.Eventually(t, func() bool { return tryAgains(ctx, own) >= seen+2 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, "3", own.Get(ctx, key).Val(), "a refused call ran")
	for _, n := range []*redis.Client{own, other} {
		require.NoError(t, n.Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err())
	}
	require.NoError(t, <-done, "Run gave up while the slot moved")
	require.Equal(t, "4", own.Get(ctx, key).Val(), "the call ran once after the move")
}

// BenchmarkClusterGuard measures what the guard costs Redis: the server's microseconds per
// EVALSHA (INFO commandstats) of the same one-command script sent plainly and guarded to the
// same cluster node.
func BenchmarkClusterGuard(b *testing.B) {
	c := redistest.StartCluster(b)
	ctx := b.Context()
	cc := c.Client(b)
	const key = "{guard}:n"
	addr, err := redistest.MasterOf(ctx, cc, key)
	if err != nil {
		b.Fatal(err)
	}
	node := redis.NewClient(&redis.Options{Addr: addr})
	defer node.Close()
	get := script.New(`return redis.call('GET', KEYS[1])`)
	usec := func() float64 {
		info := node.InfoMap(ctx, "commandstats").Val()["Commandstats"]["cmdstat_evalsha"]
		for f := range strings.SplitSeq(info, ",") {
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
				x, _ := strconv.ParseFloat(v, 64)
				return x
			}
		}
		return 0
	}
	for _, bc := range []struct {
		name string
		via  redis.Scripter
	}{{"plain", node}, {"guarded", cc}} {
		b.Run(bc.name, func(b *testing.B) {
			node.ConfigResetStat(ctx)
			for b.Loop() {
				if err := get.Run(ctx, bc.via, []string{key}).Err(); err != nil && err != redis.Nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(usec(), "redis-us/call")
		})
	}
}
