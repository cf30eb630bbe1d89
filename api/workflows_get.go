package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/conveyorq/conveyor/pipeline"
)

// The two workflow reads the dashboard's workflow pages call. The API's own workflow routes
// (with their OpenAPI operations) replace these on merge; the shapes are the same.

// workflowsDashBody is the JSON of a queue's workflow listing.
type workflowsDashBody struct {
	Workflows []*pipeline.WorkflowState `json:"workflows"`
}

// listWorkflowsDash: GET /v1/queues/{queue}/workflows?limit=N, newest first, without tasks.
func (s *Server) listWorkflowsDash(w http.ResponseWriter, r *http.Request) error {
	limit := 50
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > pipeline.MaxWorkflowList {
			return badArg("limit %q: want 1 to %d", v, pipeline.MaxWorkflowList)
		}
		limit = n
	}
	list, err := s.inspector.Workflows(r.Context(), r.PathValue("queue"), limit)
	if err != nil {
		return err
	}
	if list == nil {
		list = []*pipeline.WorkflowState{}
	}
	writeJSON(w, http.StatusOK, workflowsDashBody{Workflows: list})
	return nil
}

// getWorkflowDash: GET /v1/queues/{queue}/workflows/{id}, with its tasks in topological order.
func (s *Server) getWorkflowDash(w http.ResponseWriter, r *http.Request) error {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	st, err := s.inspector.Workflow(r.Context(), queue, id)
	if errors.Is(err, pipeline.ErrNotFound) {
		return errorf(http.StatusNotFound, CodeNotFound, "workflow %s not found in queue %s", id, queue)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}
