package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/status"
)

// The dashboard's row actions: run now of a scheduled job, delete of a scheduled or queued one,
// and their refusals (409 with a reason; 404 for an unknown job).
func TestRowActions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	opts := jobtest.Opts{Prefix: e.prefix}
	scheduled := jobtest.Seed(t, e.rdb, e.queue, status.Scheduled, opts)
	queued := jobtest.Seed(t, e.rdb, e.queue, status.Queued, opts)
	running := jobtest.Seed(t, e.rdb, e.queue, status.InProgress, opts)

	r := e.do("POST", e.jobs()+"/"+scheduled.ID+"/run", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, "queued", r.job(t).Status)

	r = e.do("POST", e.jobs()+"/"+queued.ID+"/run", "")
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	ae := r.apiErr(t)
	require.Equal(t, "not_scheduled", ae.Reason)
	require.Contains(t, ae.Message, "it is queued")

	r = e.do("POST", e.jobs()+"/"+running.ID+"/delete", "")
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Equal(t, "not_deletable", r.apiErr(t).Reason)

	for _, id := range []string{scheduled.ID, queued.ID} {
		r = e.do("POST", e.jobs()+"/"+id+"/delete", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var body struct {
			ID      string `json:"id"`
			Deleted bool   `json:"deleted"`
		}
		r.json(t, &body)
		require.Equal(t, id, body.ID)
		require.True(t, body.Deleted)
		require.Equal(t, http.StatusNotFound, e.do("GET", e.jobs()+"/"+id, "").status, "no record is left")
	}
	for _, action := range []string{"run", "delete"} {
		r = e.do("POST", e.jobs()+"/01JUNKNOWN0000000000000000/"+action, "")
		require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
		require.Equal(t, "not_found", r.apiErr(t).Code)
	}
}

// "dead" is an alias of the failed status in a listing.
func TestListDeadAlias(t *testing.T) {
	t.Parallel()
	e := setup(t)
	dead := jobtest.Seed(t, e.rdb, e.queue, status.Failed, jobtest.Opts{Prefix: e.prefix})
	for _, s := range []string{"failed", "dead"} {
		r := e.do("GET", e.jobs()+"?status="+s, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var page struct {
			Jobs []apiJob `json:"jobs"`
		}
		r.json(t, &page)
		require.Len(t, page.Jobs, 1)
		require.Equal(t, dead.ID, page.Jobs[0].ID)
		require.Equal(t, "failed", page.Jobs[0].Status, "failed stays the wire name")
	}
}

// GET /v1/redis: the server, the queue's memory and the doctor's findings.
func TestRedisPage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	jobtest.Seed(t, e.rdb, e.queue, status.Failed, jobtest.Opts{Prefix: e.prefix})
	r := e.do("GET", "/v1/redis", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var body struct {
		Nodes []struct {
			Version    string `json:"version"`
			UsedMemory int64  `json:"used_memory"`
		} `json:"nodes"`
		Queues []struct {
			Queue string `json:"queue"`
			Bytes int64  `json:"bytes"`
			Jobs  int64  `json:"jobs"`
		} `json:"queues"`
		Doctor struct {
			Findings []struct {
				Check string `json:"check"`
			} `json:"findings"`
		} `json:"doctor"`
	}
	r.json(t, &body)
	require.Len(t, body.Nodes, 1)
	require.NotEmpty(t, body.Nodes[0].Version)
	require.Positive(t, body.Nodes[0].UsedMemory)
	require.Len(t, body.Queues, 1, "only the test's prefix's queues")
	require.Equal(t, e.queue, body.Queues[0].Queue)
	require.Positive(t, body.Queues[0].Bytes)
	require.Equal(t, int64(1), body.Queues[0].Jobs)
	require.NotEmpty(t, body.Doctor.Findings)
}
