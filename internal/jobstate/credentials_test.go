package jobstate_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// A refused connection (wrong password, a database that does not exist) is an error from the
// reads that pipeline their commands, not an empty system: go-redis leaves the commands of a
// pipeline whose connection could not be set up without an error of their own, and the
// pipeline's error was thrown away, so `conveyor queues` said "no queues yet" and exited 0.
func TestReadsRefusedConnection(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	require.NoError(t, srv.Client(t).Do(t.Context(), "ACL", "SETUSER", "u", "on", ">right", "~*", "+@all").Err())
	for _, tc := range []struct {
		name string
		opts redis.Options
	}{
		{"wrong password", redis.Options{Addr: srv.Addr, Username: "u", Password: "wrong"}},
		{"unknown user", redis.Options{Addr: srv.Addr, Username: "bob", Password: "right"}},
		{"no such database", redis.Options{Addr: srv.Addr, Username: "u", Password: "right", DB: 99}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.MaxRetries = -1
			rdb := redis.NewClient(&o)
			t.Cleanup(func() { _ = rdb.Close() })
			_, _, err := jobstate.NewStore(rdb, keys.DefaultPrefix).KnownQueues(t.Context())
			require.Error(t, err)
			_, _, err = jobstate.NewStore(rdb, "").StreamPage(t.Context(), keys.New(keys.DefaultPrefix, "q"), "-", 10)
			require.Error(t, err)
		})
	}
	// The right credentials read an empty system.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "u", Password: "right"})
	t.Cleanup(func() { _ = rdb.Close() })
	names, _, err := jobstate.NewStore(rdb, keys.DefaultPrefix).KnownQueues(t.Context())
	require.NoError(t, err)
	require.Empty(t, names)
}
