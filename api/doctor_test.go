package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/doctor"
	"github.com/conveyorq/conveyor/status"
)

// GET /v1/doctor answers the doctor's report: every check, and how many failed.
func TestDoctor(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("GET", "/v1/doctor", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var report doctor.Report
	r.json(t, &report)
	checks := map[string]bool{}
	failed := 0
	for _, f := range report.Findings {
		checks[f.Check] = true
		if f.Status == doctor.Fail {
			failed++
		}
	}
	require.Equal(t, map[string]bool{"version": true, "eviction": true, "memory": true, "persistence": true,
		"cluster": true, "clock": true, "acl": true}, checks)
	require.Equal(t, failed, report.Failed)
}

// dry_run on the purge routes answers what a purge would delete and deletes nothing.
func TestPurgeDryRun(t *testing.T) {
	t.Parallel()
	e := setup(t)
	dead := e.seed(status.Failed)
	live := e.seed(status.Queued)
	base := "/v1/queues/" + e.queue + "/dead"

	r := e.do("DELETE", base+"/"+dead+"?dry_run=true", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"would_purge":1,"ids":["`+dead+`"]}`, string(r.body))
	r = e.do("DELETE", base+"/"+live+"?dry_run=true", "")
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Equal(t, api.ReasonNotDead, r.apiErr(t).Reason)
	r = e.do("DELETE", base+"/01JUNKNOWN0000000000000000?dry_run=true", "")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)

	r = e.do("DELETE", base+"?older_than=1h&dry_run=true", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"would_purge":0,"ids":[]}`, string(r.body))
	r = e.do("DELETE", base+"?dry_run=true", "")
	require.JSONEq(t, `{"would_purge":1,"ids":["`+dead+`"]}`, string(r.body))
	r = e.do("DELETE", base+"?dry_run=maybe", "")
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)

	r = e.do("DELETE", base, "")
	require.JSONEq(t, `{"purged":1}`, string(r.body), "the dry runs deleted nothing")
}
