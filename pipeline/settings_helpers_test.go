package pipeline_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// onStandaloneAndCluster runs test twice, in parallel subtests: "Standalone" on the package's
// shared server, "Cluster" on a private 3-master cluster. The settings tests use it: a
// queue's record and the keys it names must meet on a cluster's slots too.
func onStandaloneAndCluster(t *testing.T, test func(*testing.T, redis.UniversalClient)) {
	t.Helper()
	cl := redistest.StartCluster(t)
	for _, be := range []struct {
		name string
		rdb  redis.UniversalClient
	}{{"Standalone", redistest.Client(t)}, {"Cluster", cl.Client(t)}} {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			test(t, be.rdb)
		})
	}
}
