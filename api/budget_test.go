package api_test

import (
	"encoding/json"
	"flag"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
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
		dead = append(dead, jobtest.Seed(t, rdb, e.queue, status.Failed, jobtest.Opts{Prefix: e.prefix,
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

// measureBigListing runs TestMeasureBigListing: the case, measured (docs/RELIABILITY.md).
var measureBigListing = flag.Int("measure-big-listing", 0, "dead jobs of 1 MB for TestMeasureBigListing (0: skip)")

// TestMeasureBigListing lists and dry-runs the purge of N dead jobs of 1 MB with the defaults,
// and logs each answer's size and what the server allocated for it: 300 jobs once made one
// 300 MB page (a 2.13 GB peak) and a dry run that read every record.
func TestMeasureBigListing(t *testing.T) {
	n := *measureBigListing
	if n == 0 {
		t.Skip("-measure-big-listing N measures it")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	e := setup(t, setupOpts{rdb: rdb})
	payload := []byte(`"` + strings.Repeat("x", 1_000_000-2) + `"`)
	for range n {
		jobtest.Seed(t, rdb, e.queue, status.Failed, jobtest.Opts{Prefix: e.prefix,
			Task: pipeline.Task{Type: "echo", Payload: payload}})
	}
	alloc := func(f func() apiResp) (apiResp, uint64) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := f()
		runtime.ReadMemStats(&after)
		return r, after.TotalAlloc - before.TotalAlloc
	}
	pages, cursor := 0, ""
	for {
		r, b := alloc(func() apiResp { return e.do("GET", e.jobs()+"?status=failed&limit=1000&cursor="+cursor, "") })
		require.Equal(t, http.StatusOK, r.status)
		var page struct {
			Jobs []json.RawMessage `json:"jobs"`
			Next string            `json:"next"`
		}
		require.NoError(t, json.Unmarshal(r.body, &page))
		pages++
		if pages == 1 {
			t.Logf("%d dead jobs of 1 MB, limit=1000: first page %d jobs, %.1f MB answer, %.1f MB allocated (client and server)",
				n, len(page.Jobs), float64(len(r.body))/1e6, float64(b)/1e6)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	t.Logf("the whole listing: %d pages", pages)
	r, b := alloc(func() apiResp { return e.do("DELETE", "/v1/queues/"+e.queue+"/dead?dry_run=true", "") })
	require.Equal(t, http.StatusOK, r.status)
	t.Logf("DELETE .../dead?dry_run=true: %.1f KB answer, %.1f MB allocated", float64(len(r.body))/1e3, float64(b)/1e6)
}
