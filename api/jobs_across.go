package api

import (
	"net/http"
)

// listAllJobs: GET /v1/jobs?status=S&cursor=C&limit=N, a page of the jobs in status S across
// every known queue (pipeline.Inspector.ListAllQueues). Its page is the per-queue list's
// (listJobs): {"jobs": [...], "next": "...", "leases": {...}}, each job naming its queue.
func (s *Server) listAllJobs(w http.ResponseWriter, r *http.Request) error {
	st, page, err := s.listArgs(r)
	if err != nil {
		return err
	}
	p, err := s.inspector.ListAllQueues(r.Context(), st, page)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}
