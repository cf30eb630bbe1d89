package publish

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/keys"
)

// byPartition keeps the jobs of a partition in their order, and routes a job by its debounce
// key, else its unique key, else its id.
func TestByPartition(t *testing.T) {
	t.Parallel()
	njs := []jobstate.NewJob{{ID: "a"}, {ID: "b", UniqueKey: "u"}, {ID: "c", Debounce: "d"}, {ID: "e"}, {ID: "f"}}
	const n = 3
	order, sorted, part := byPartition(njs, n)
	require.Len(t, sorted, len(njs))
	for k, i := range order {
		require.Equal(t, njs[i], sorted[k])
		require.Equal(t, keys.PartitionOf(routeKey(&njs[i]), n), part[k])
		if k > 0 {
			require.LessOrEqual(t, part[k-1], part[k], "grouped by partition")
			if part[k-1] == part[k] {
				require.Less(t, order[k-1], i, "in their order within a partition")
			}
		}
	}
	require.Equal(t, "d", routeKey(&njs[2]))
	require.Equal(t, "u", routeKey(&njs[1]))
	require.Equal(t, "a", routeKey(&njs[0]))
}
