package jobstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// The one server of a plain client: its address, INFO, CONFIG GET and TIME.
func TestServerFacts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	s := jobstate.NewStore(rdb, keys.DefaultPrefix)
	require.NoError(t, s.Ping(ctx))
	var srvs []jobstate.Server
	require.NoError(t, s.EachServer(ctx, func(_ context.Context, srv jobstate.Server) error {
		srvs = append(srvs, srv)
		return nil
	}))
	require.Len(t, srvs, 1)
	srv := srvs[0]
	require.Equal(t, rdb.Options().Addr, srv.Addr)

	info, err := srv.Info(ctx, "server", "memory")
	require.NoError(t, err)
	require.NotEmpty(t, info["redis_version"])
	require.NotEmpty(t, info["maxmemory_policy"])
	require.NotContains(t, info, "# Server", "headers are not fields")
	all, err := srv.Info(ctx)
	require.NoError(t, err)
	require.Contains(t, all, "connected_clients", "the default set")

	fsync, err := srv.ConfigGet(ctx, "appendfsync")
	require.NoError(t, err)
	require.Contains(t, []string{"always", "everysec", "no"}, fsync)
	none, err := srv.ConfigGet(ctx, "no-such-parameter")
	require.NoError(t, err)
	require.Empty(t, none)

	now, err := srv.Time(ctx)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), now, time.Minute, "the test server runs on this host")
}

// A cluster client on a standalone server gets a store on its seed; a plain client has none.
func TestServerStandaloneSeed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	seed, closeSeed := jobstate.NewStore(rdb, keys.DefaultPrefix).StandaloneSeed(ctx)
	require.Nil(t, seed, "not a cluster client")
	require.Nil(t, closeSeed)

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{rdb.Options().Addr}, MaxRedirects: -1})
	t.Cleanup(func() { _ = cc.Close() })
	seed, closeSeed = jobstate.NewStore(cc, "pfx").StandaloneSeed(ctx)
	require.NotNil(t, seed)
	t.Cleanup(func() { require.NoError(t, closeSeed()) })
	require.False(t, seed.Cluster())
	require.Equal(t, "pfx", seed.Prefix())
	require.NoError(t, seed.Ping(ctx))
}

// An admin may run every command a worker sends; a user denied some sees them named, by ACL
// DRYRUN (asked by the admin) or by trying them (as the user), and may not run ACL DRYRUN.
func TestServerPermissions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb := redistest.Client(t)
	prefix := redistest.UniqueName(t)
	admin := jobstate.NewStore(rdb, prefix)
	user, err := admin.WhoAmI(ctx)
	require.NoError(t, err)
	require.Equal(t, "default", user)
	denied, err := admin.DryRunWorker(ctx, user)
	require.NoError(t, err)
	require.Empty(t, denied)
	require.Empty(t, admin.ProbeWorker(ctx))

	name := redistest.UniqueName(t)
	require.NoError(t, rdb.Do(ctx, "ACL", "SETUSER", name, "on", ">pw", "~*", "&*", "+@all", "-xadd", "-set", "-acl").Err())
	t.Cleanup(func() { _ = rdb.Do(context.Background(), "ACL", "DELUSER", name).Err() })
	denied, err = admin.DryRunWorker(ctx, name)
	require.NoError(t, err)
	var cmds []string
	for _, d := range denied {
		cmds = append(cmds, d.Command)
		require.NotEmpty(t, d.Reason)
	}
	require.Equal(t, []string{"XADD", "SET"}, cmds)

	limited := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, Username: name, Password: "pw"})
	t.Cleanup(func() { _ = limited.Close() })
	s := jobstate.NewStore(limited, prefix)
	_, err = s.WhoAmI(ctx)
	require.Error(t, err, "ACL WHOAMI is denied with -acl")
	_, err = s.DryRunWorker(ctx, name)
	require.Error(t, err, "so is ACL DRYRUN")
	denied = s.ProbeWorker(ctx)
	require.Len(t, denied, 1, "%+v", denied)
	require.Equal(t, "SET", denied[0].Command)
	require.Contains(t, denied[0].Reason, "NOPERM")
}
