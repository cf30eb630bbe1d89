package redisproc

import (
	"context"
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
	s, err := StartSentinel(t.TempDir(), "torture", 1, time.Second, 3*time.Second, "--appendonly", "yes", "--appendfsync", "always",
		"--min-replicas-to-write", "1", "--min-replicas-max-lag", "10")
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
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
