package redisproc

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// A Sentinel set survives a coordinated failover (Switchover) and a SIGKILL of its master: each time the
// sentinels agree on a new master, a write acknowledged by one replica before the fault is
// there, and the old master (the killed one restarted on its AOF) comes back as a replica of
// the new one, which WaitHealthy waits for.
func TestSentinelSet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five redis-server processes and fails over twice")
	}
	dir := t.TempDir()
	// down-after 5 s, not the torture's 1 s: the test claims which node is master at the end,
	// and on a loaded machine a master that answers no PING for 1 s (an fsync of its AOF or
	// config behind a busy disk) is failed over by the sentinels, as they are configured to.
	s, err := StartSentinel(dir, "torture", 1, 5*time.Second, 3*time.Second, "--appendonly", "yes", "--appendfsync", "always",
		"--min-replicas-to-write", "1", "--min-replicas-max-lag", "10")
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	t.Cleanup(func() { logsOnFailure(t, dir) }) // before the TempDir goes
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first, err := s.MasterAddr(ctx)
	require.NoError(t, err)
	require.Equal(t, s.Data[0].Addr, first)

	c := redis.NewFailoverClient(s.FailoverOptions())
	defer c.Close()
	write := func(key string) {
		t.Helper()
		require.NoError(t, c.Set(ctx, key, "1", 0).Err())
		n, err := c.Wait(ctx, 1, 5*time.Second).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
	}
	roleOf := func(addr string) string {
		t.Helper()
		n := redis.NewClient(&redis.Options{Addr: addr})
		defer n.Close()
		role, err := n.Do(ctx, "ROLE").Slice()
		require.NoError(t, err)
		return role[0].(string)
	}

	write("before-failover")
	old, promoted, err := s.Switchover(ctx)
	require.NoError(t, err)
	require.Equal(t, first, old)
	require.Equal(t, s.Data[1].Addr, promoted)
	require.NoError(t, s.WaitHealthy(ctx))
	require.Equal(t, "slave", roleOf(old))
	require.EqualValues(t, 1, c.Exists(ctx, "before-failover").Val())

	write("before-kill")
	victim := s.Node(promoted)
	victim.Kill()
	again, err := s.WaitNewMaster(ctx, promoted)
	require.NoError(t, err)
	require.Equal(t, first, again)
	require.NoError(t, victim.Restart())
	// It restarts a master on its AOF; only the sentinels make it a replica.
	require.NoError(t, s.WaitHealthy(ctx))
	require.Equal(t, "slave", roleOf(promoted))
	require.EqualValues(t, 2, c.Exists(ctx, "before-failover", "before-kill").Val())
}

// logsOnFailure prints the redis.log of every process under dir when t failed: what the
// sentinels saw and decided is the only account of a failover they made.
func logsOnFailure(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "redis.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		t.Logf("== %s\n%s", l, b)
	}
}
