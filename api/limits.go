package api

import (
	"io"
	"net/http"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
)

// limitBody is a limit as the API shows and takes it: the fields of 'conveyor limits list
// --json'. Queue is in answers only (the path names it in a PUT).
type limitBody struct {
	Queue       string `json:"queue,omitempty"`
	Type        string `json:"type"`
	PerKey      bool   `json:"per_key"`
	Rate        int    `json:"rate"`
	IntervalMS  int64  `json:"interval_ms"`
	Concurrency int    `json:"concurrency"`
}

func limitView(queue string, l pipeline.Limit) limitBody {
	return limitBody{Queue: queue, Type: l.Type, PerKey: l.PerKey, Rate: l.Rate,
		IntervalMS: l.Interval.Milliseconds(), Concurrency: l.Concurrency}
}

// maxLimitBody bounds a PUT's body: a limit is a few short fields.
const maxLimitBody = 4 << 10

// decodeLimit reads a PUT's limit: exactly one JSON object of limitBody's fields but queue,
// unknown fields refused. What the fields must hold together (a rate or a concurrency, an
// interval with a rate) Inspector.SetLimit checks.
func decodeLimit(r io.Reader) (pipeline.Limit, error) {
	var body struct {
		Type        string `json:"type"`
		PerKey      bool   `json:"per_key"`
		Rate        int    `json:"rate"`
		IntervalMS  int64  `json:"interval_ms"`
		Concurrency int    `json:"concurrency"`
	}
	if err := decodeJSON(r, &body); err != nil {
		return pipeline.Limit{}, err
	}
	// Checked before it is a Duration, which a large count of milliseconds would overflow.
	if body.IntervalMS < 0 || body.IntervalMS > maxLimitInterval.Milliseconds() {
		return pipeline.Limit{}, badArg("interval_ms %d: want 0 to %d", body.IntervalMS, maxLimitInterval.Milliseconds())
	}
	return pipeline.Limit{Type: body.Type, PerKey: body.PerKey, Rate: body.Rate,
		Interval: time.Duration(body.IntervalMS) * time.Millisecond, Concurrency: body.Concurrency}, nil
}

// listLimits: GET /v1/queues/{queue}/limits. A queue that does not exist is a 404.
func (s *Server) listLimits(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	ls, err := s.inspector.Limits(r.Context(), queue)
	if err != nil {
		return err
	}
	if len(ls) == 0 {
		ok, err := s.inspector.QueueExists(r.Context(), queue)
		if err != nil {
			return err
		}
		if !ok {
			return errorf(http.StatusNotFound, CodeNotFound, "queue %s not found", queue)
		}
	}
	body := struct {
		Limits []limitBody `json:"limits"`
	}{make([]limitBody, len(ls))}
	for k, l := range ls {
		body.Limits[k] = limitView(queue, l)
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// setLimit: PUT /v1/queues/{queue}/limits with a limit. It replaces the limit of the body's
// scope (type, per_key) and answers the limit stored.
func (s *Server) setLimit(w http.ResponseWriter, r *http.Request) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLimitBody)
	l, err := decodeLimit(r.Body)
	if err != nil {
		return err
	}
	queue := r.PathValue("queue")
	if err := s.inspector.SetLimit(r.Context(), queue, l); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, limitView(queue, l))
	return nil
}

// deleteLimit: DELETE /v1/queues/{queue}/limits[?type=T][&per_key=true]. 204, or 404 when the
// scope has no limit.
func (s *Server) deleteLimit(w http.ResponseWriter, r *http.Request) error {
	queue, typ := r.PathValue("queue"), r.URL.Query().Get("type")
	perKey, err := boolParam(r, "per_key")
	if err != nil {
		return err
	}
	deleted, err := s.inspector.DeleteLimit(r.Context(), queue, typ, perKey)
	if err != nil {
		return err
	}
	if !deleted {
		scope := "every job"
		if typ != "" {
			scope = "type " + typ
		}
		if perKey {
			scope += ", per limit key"
		}
		return errorf(http.StatusNotFound, CodeNotFound, "queue %s has no limit for %s", queue, scope)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
