package jobstate_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/jobstate/storetest"
	"github.com/conveyorq/conveyor/internal/redistest"
)

// The Redis store keeps the Backend contract on a standalone server and on a cluster, where
// every call must stay within one slot.
func TestStoreConformance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.client(t)
			storetest.Run(t, func(t *testing.T) jobstate.Backend {
				return jobstate.NewStore(rdb, redistest.UniqueName(t))
			})
		})
	}
}
