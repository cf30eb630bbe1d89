package api

import (
	"net/http"

	"github.com/conveyorq/conveyor/pipeline"
)

// maxGroupsBody bounds a PUT's body: a window and a few hundred weights.
const maxGroupsBody = 64 << 10

// listGroups: GET /v1/queues/{queue}/groups: the queue's window and its groups with their
// weights and counts (pipeline.Groups). A queue that does not exist is a 404.
func (s *Server) listGroups(w http.ResponseWriter, r *http.Request) error {
	gs, err := s.inspector.Groups(r.Context(), r.PathValue("queue"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, gs)
	return nil
}

// setGroups: PUT /v1/queues/{queue}/groups with {"window": N, "reset_window": bool, "weights":
// {"group": W}} (each optional; a weight of 0 sets a group back to 1). It answers the groups as
// GET does, after the change. Inspector.SetGroups checks the values.
func (s *Server) setGroups(w http.ResponseWriter, r *http.Request) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxGroupsBody)
	var body struct {
		Window      int            `json:"window"`
		ResetWindow bool           `json:"reset_window"`
		Weights     map[string]int `json:"weights"`
	}
	if err := decodeJSON(r.Body, &body); err != nil {
		return err
	}
	queue := r.PathValue("queue")
	err := s.inspector.SetGroups(r.Context(), queue, pipeline.GroupChange{Window: body.Window,
		ResetWindow: body.ResetWindow, Weights: body.Weights})
	if err != nil {
		return err
	}
	return s.listGroups(w, r)
}
