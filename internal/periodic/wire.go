package periodic

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// scheduleJSON is the wire form of a schedule: `conveyor schedules list --json` and the HTTP
// API's. Times are RFC 3339 in UTC, null for none. A payload that is not JSON (one registered
// in code) is a JSON string, and no payload is left out.
type scheduleJSON struct {
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

// MarshalWire writes s in its wire form (pipeline.Schedule's JSON), with next as its next run:
// pipeline's Schedule carries the next run it was listed with.
func (s Schedule) MarshalWire(next time.Time) ([]byte, error) {
	utc := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	var payload json.RawMessage
	if len(s.Payload) > 0 {
		payload = s.Payload
		if !json.Valid(s.Payload) {
			payload, _ = json.Marshal(string(s.Payload))
		}
	}
	return json.Marshal(scheduleJSON{Name: s.Name, Spec: s.Spec, Queue: s.Queue, Type: s.Type, Payload: payload,
		Missed: s.Missed, Source: s.Source, Paused: s.Paused, LastRunAt: utc(s.State.LastRunAt),
		LastTick: utc(s.State.LastTick), LastJob: s.State.LastJob, NextRunAt: utc(next)})
}

// Errs are the caller's errors that MapErr gives the Store's refusals.
type Errs struct{ Invalid, NotFound, TooMany error }

// MapErr is the caller's error of a call about schedule name that the Store refused: a
// NameError wraps e.Invalid, ErrNotFound becomes e.NotFound, ErrTooMany e.TooMany with the
// way out.
func MapErr(err error, name string, e Errs) error {
	var bad *NameError
	switch {
	case errors.As(err, &bad):
		return fmt.Errorf("%w: %w", e.Invalid, bad.Err)
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("%w: %q", e.NotFound, name)
	case errors.Is(err, ErrTooMany):
		return fmt.Errorf("%w: schedule %q is new and %s: delete unused schedules (conveyor schedules delete) or raise the bound "+
			"(InspectorConfig.MaxSchedules, conveyor serve --max-schedules)", e.TooMany, name,
			strings.TrimPrefix(err.Error(), ErrTooMany.Error()+": "))
	}
	return err
}
