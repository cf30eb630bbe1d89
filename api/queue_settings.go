package api

import (
	"net/http"

	"github.com/conveyorq/conveyor/pipeline"
)

// queueSettings: GET /v1/queues/{queue}/settings. A queue that does not exist is a 404.
func (s *Server) queueSettings(w http.ResponseWriter, r *http.Request) error {
	st, err := s.inspector.QueueSettings(r.Context(), r.PathValue("queue"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// updateQueue: PATCH /v1/queues/{queue}/settings with a pipeline.QueuePatch (absent fields
// change nothing). It answers the settings after the change.
func (s *Server) updateQueue(w http.ResponseWriter, r *http.Request) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	// A patch is a few short fields and at most 1,000 weights (Inspector.SetGroups).
	r.Body = http.MaxBytesReader(w, r.Body, maxGroupsBody)
	var patch pipeline.QueuePatch
	if err := decodeJSON(r.Body, &patch); err != nil {
		return err
	}
	st, err := s.inspector.UpdateQueue(r.Context(), r.PathValue("queue"), patch)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}
