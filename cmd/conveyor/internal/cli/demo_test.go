package cli

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestDemoEmbeddedRedisExpires: keys with a TTL expire in the demo's embedded Redis as on a
// real server. The demo kills a worker, and when that worker held a queue's recovery lock, the
// lock it could not release must expire for another worker to recover the queue; miniredis
// expires nothing on its own unless told to follow the clock.
func TestDemoEmbeddedRedisExpires(t *testing.T) {
	t.Parallel()
	m, err := startEmbeddedRedis()
	require.NoError(t, err)
	t.Cleanup(m.Close)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()
	ok, err := rdb.SetNX(ctx, "lock", "token", 50*time.Millisecond).Result()
	require.NoError(t, err)
	require.True(t, ok)
	require.Eventually(t, func() bool {
		n, err := rdb.Exists(ctx, "lock").Result()
		return err == nil && n == 0
	}, 10*time.Second, 10*time.Millisecond, "a key with a 50ms TTL still exists")
	ok, err = rdb.SetNX(ctx, "lock", "other", time.Minute).Result()
	require.NoError(t, err)
	require.True(t, ok, "the expired lock can be taken again")
}

// The demo's closing hint names the command the person ran: a binary that go run built (in
// the go-build cache) is not on PATH as conveyor. (Before, it always said conveyor.)
func TestSelfCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ argv0, version, want string }{
		{"conveyor", "v1.2.0", "conveyor"},
		{"/usr/local/bin/conveyor", "(devel)", "conveyor"},
		{"./conveyor", "", "conveyor"},
		{"/tmp/go-build3218/b001/exe/conveyor", "(devel)", "go run ./cmd/conveyor"},
		{"/tmp/go-build3218/b001/exe/conveyor", "", "go run ./cmd/conveyor"},
		{"/home/u/.cache/go-build/tmp/go-build77/b001/exe/conveyor", "v1.2.0", "go run github.com/conveyorq/conveyor/cmd/conveyor@v1.2.0"},
		{"/tmp/go-build3218/b001/cli.test", "(devel)", "conveyor"},
	} {
		require.Equal(t, tc.want, selfCommand(tc.argv0, tc.version), "%s %s", tc.argv0, tc.version)
	}
}
