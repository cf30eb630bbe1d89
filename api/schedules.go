package api

import (
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// scheduleBody is a schedule as the API shows it: the fields of 'conveyor schedules list
// --json'. Times are RFC 3339, null for none.
type scheduleBody struct {
	Name      string          `json:"name"`
	Spec      string          `json:"spec"`
	Queue     string          `json:"queue"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	Missed    string          `json:"missed"`
	Source    string          `json:"source"`
	Paused    bool            `json:"paused"`
	LastRunAt *time.Time      `json:"last_run_at"`
	LastTick  *time.Time      `json:"last_tick"`
	LastJob   string          `json:"last_job"`
	NextRunAt *time.Time      `json:"next_run_at"`
}

func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func scheduleView(s pipeline.Schedule) scheduleBody {
	b := scheduleBody{Name: s.Name, Spec: s.Spec, Queue: s.Queue, Type: s.Type, Missed: string(s.Missed), Source: s.Source,
		Paused: s.Paused, LastRunAt: timeOrNull(s.LastRunAt), LastTick: timeOrNull(s.LastTick), LastJob: s.LastJob,
		NextRunAt: timeOrNull(s.NextRunAt)}
	if json.Valid(s.Payload) {
		b.Payload = s.Payload
	} else if len(s.Payload) > 0 {
		// A schedule registered in code may carry a payload that is not JSON: shown as a string.
		b.Payload, _ = json.Marshal(string(s.Payload))
	}
	return b
}

// maxScheduleBody bounds a POST's body: a payload of the library's default limit and a few
// short fields.
const maxScheduleBody = pipeline.DefaultMaxPayloadBytes + 4<<10

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

// listSchedules: GET /v1/schedules.
func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) error {
	list, err := s.inspector.Schedules(r.Context())
	if err != nil {
		return err
	}
	body := struct {
		Schedules []scheduleBody `json:"schedules"`
	}{make([]scheduleBody, len(list))}
	for k, sc := range list {
		body.Schedules[k] = scheduleView(sc)
	}
	writeJSON(w, http.StatusOK, body)
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
	writeJSON(w, status, scheduleView(*sc))
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
