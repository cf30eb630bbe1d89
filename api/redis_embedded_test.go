package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/doctor"
)

// GET /v1/redis on the embedded Redis of `conveyor demo --serve` (miniredis), which supports
// neither INFO with several sections, CONFIG nor MEMORY USAGE: the page shows what it could
// read and says what the server does not support (it answered 500, "Could not read Redis"),
// and the doctor's advice names the missing support, not an ACL (ACL SETUSER +info does not
// apply to a command the server lacks).
func TestRedisInfoEmbedded(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	e := setup(t, setupOpts{rdb: rdb})
	e.post(`{"type":"echo"}`, http.StatusAccepted)

	r := e.do("GET", "/v1/redis", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var body struct {
		doctor.Info
		Doctor doctor.Report `json:"doctor"`
	}
	r.json(t, &body)
	require.Len(t, body.Nodes, 1, "%s", r.body)
	n := body.Nodes[0]
	require.Positive(t, n.ConnectedClients, "what the server reports is shown: %s", r.body)
	require.Contains(t, n.Unsupported, "CONFIG GET", "%s", r.body)
	require.NotContains(t, n.Error, "refused", "nothing was refused: it is not supported")
	require.Contains(t, body.MemoryError, "MEMORY USAGE", "%s", r.body)
	require.Len(t, body.Queues, 1, "%s", r.body)
	q := body.Queues[0]
	require.Equal(t, e.queue, q.Queue)
	require.EqualValues(t, 1, q.Jobs, "the jobs are counted though memory is not measured")
	require.True(t, q.Unmeasured)

	require.NotEmpty(t, body.Doctor.Findings)
	for _, f := range body.Doctor.Findings {
		require.NotContains(t, f.Fix, "ACL SETUSER", "%s: %s / %s", f.Check, f.Detail, f.Fix)
		if strings.Contains(f.Detail, "cannot check") {
			require.Contains(t, f.Detail, "does not support", "%s: %s", f.Check, f.Detail)
		}
	}
}
