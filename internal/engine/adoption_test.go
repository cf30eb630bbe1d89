package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An adoption survives its trip through MetaForeign, a unique key's spaces included; a value
// that is not one reads as no adoption.
func TestAdoptionRoundTrip(t *testing.T) {
	t.Parallel()
	for _, a := range []Adoption{{}, {RunAt: 1800000000000}, {RunAt: 1, UniqueTTL: 90_000, UniqueKey: "report of may"}} {
		require.Equal(t, a, ParseAdoption(a.String()))
	}
	require.Equal(t, Adoption{}, ParseAdoption("garbage"))
}
