package api

import (
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/conveyorq/conveyor/pipeline"
)

// maxScheduleBody bounds a POST's body: a payload of the library's default limit and a few
// short fields.
const maxScheduleBody = maxPayloadBytes + 4<<10

// decodeSchedule reads a POST's schedule: exactly one JSON object, unknown fields refused.
// queue defaults to "default", missed to "skip"; the rest Inspector.CreateSchedule checks.
func decodeSchedule(r io.Reader) (pipeline.Periodic, error) {
	var body struct {
		Name    string          `json:"name"`
		Spec    string          `json:"spec"`
		Queue   string          `json:"queue"`
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload"`
		Missed  string          `json:"missed"`
	}
	if err := decodeJSON(r, &body); err != nil {
		return pipeline.Periodic{}, err
	}
	p := pipeline.Periodic{Name: body.Name, Spec: body.Spec, Queue: cmp.Or(body.Queue, pipeline.DefaultQueue), Type: body.Type,
		Missed: pipeline.MissedPolicy(cmp.Or(body.Missed, string(pipeline.MissedSkip)))}
	if len(body.Payload) > 0 && string(body.Payload) != "null" {
		p.Payload = body.Payload
	}
	return p, nil
}

// listSchedules: GET /v1/schedules?cursor=C&limit=N: a page of the schedules by name, as a
// job list's page ({"schedules":[...],"next":"..."}).
func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	page := pipeline.Page{Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageLimit {
			return badArg("limit %q: want 1 to %d", v, maxPageLimit)
		}
		page.Limit = n
	}
	p, err := s.inspector.SchedulesPage(r.Context(), page)
	if err != nil {
		return err
	}
	if p.Schedules == nil {
		p.Schedules = []pipeline.Schedule{}
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// createSchedule: POST /v1/schedules with a schedule. 201 with the schedule stored (a
// schedule of the name is replaced, keeping its last run and pause).
func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxScheduleBody)
	p, err := decodeSchedule(r.Body)
	if err != nil {
		return err
	}
	if err := s.inspector.CreateSchedule(r.Context(), p); err != nil {
		return err
	}
	return s.answerSchedule(w, r, p.Name, http.StatusCreated)
}

func (s *Server) answerSchedule(w http.ResponseWriter, r *http.Request, name string, status int) error {
	sc, err := s.inspector.GetSchedule(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, status, sc)
	return nil
}

// getSchedule: GET /v1/schedules/{name}.
func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) error {
	return s.answerSchedule(w, r, r.PathValue("name"), http.StatusOK)
}

// deleteSchedule: DELETE /v1/schedules/{name}. 204, or 404.
func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	if err := s.inspector.DeleteSchedule(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pauseSchedule: POST /v1/schedules/{name}/pause; resumeSchedule: .../resume. 200 with the
// schedule.
func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request) error {
	if err := s.inspector.PauseSchedule(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	return s.answerSchedule(w, r, r.PathValue("name"), http.StatusOK)
}

func (s *Server) resumeSchedule(w http.ResponseWriter, r *http.Request) error {
	if err := s.inspector.ResumeSchedule(r.Context(), r.PathValue("name")); err != nil {
		return err
	}
	return s.answerSchedule(w, r, r.PathValue("name"), http.StatusOK)
}
