package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// A listing of big jobs is cut by bytes (Config.MaxPageBytes) and its next cursor goes on from
// there; a dry run of a purge of every dead job reads their ids, no record (300 dead jobs of
// 1 MB made a 300 MB page, and the dry run loaded them all).
func TestListByteBudgetAndDryRunIDs(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	e := setup(t, setupOpts{rdb: rdb, cfg: api.Config{MaxPageBytes: 250_000}})
	payload := []byte(`"` + strings.Repeat("x", 100_000) + `"`)
	var dead []string
	for range 5 {
		dead = append(dead, jobtest.Seed(t, rdb, e.queue, pipeline.StatusFailed, jobtest.Opts{Prefix: e.prefix,
			Task: pipeline.Task{Type: "echo", Payload: payload}}).ID)
	}
	var page struct {
		Jobs []apiJob `json:"jobs"`
		Next string   `json:"next"`
	}
	var seen []string
	var sizes []int
	cursor := ""
	for {
		r := e.do("GET", e.jobs()+"?status=failed&limit=1000&cursor="+cursor, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		r.json(t, &page)
		sizes = append(sizes, len(page.Jobs))
		for _, j := range page.Jobs {
			seen = append(seen, j.ID)
			require.JSONEq(t, string(payload), string(j.Payload))
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	require.Equal(t, []int{3, 2}, sizes, "100 KB jobs under a 250 KB budget: the third passes it")
	require.ElementsMatch(t, dead, seen)

	cmds := redistest.CountCommands(rdb).Record()
	r := e.do("DELETE", "/v1/queues/"+e.queue+"/dead?dry_run=true", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var would struct {
		WouldPurge int      `json:"would_purge"`
		IDs        []string `json:"ids"`
	}
	require.NoError(t, json.Unmarshal(r.body, &would))
	require.Equal(t, 5, would.WouldPurge)
	require.ElementsMatch(t, dead, would.IDs)
	require.Zero(t, cmds.Named("hgetall"))
	// The partition count, the purge script's dry run (with its EVAL if the server had not
	// cached it): no read of any job.
	require.LessOrEqual(t, cmds.All(), int64(3), "%v", cmds.Take())
}
