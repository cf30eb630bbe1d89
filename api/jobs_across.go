package api

import (
	"net/http"
	"strconv"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// listAllJobs: GET /v1/jobs?status=S&cursor=C&limit=N, a page of the jobs in status S across
// every known queue (pipeline.Inspector.ListAllQueues). Its page is the per-queue list's
// (listJobs): {"jobs": [...], "next": "...", "leases": {...}}, each job naming its queue.
func (s *Server) listAllJobs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	want := q.Get("status")
	if want == "" {
		return badArg("status is required: scheduled, queued, in_progress, failed (dead), completed or canceled")
	}
	page := pipeline.Page{Cursor: q.Get("cursor"), MaxBytes: s.cfg.MaxPageBytes}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageLimit {
			return badArg("limit %q: want 1 to %d", v, maxPageLimit)
		}
		page.Limit = n
	}
	p, err := s.inspector.ListAllQueues(r.Context(), status.Parse(want), page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}
