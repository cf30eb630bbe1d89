//go:build whystub

package dashboard_test

// A stand-in for issue 33's API parts while they are on other branches: it wraps the real API
// and adds what they will answer (waiting_for on jobs, the new gauges and latency on queues,
// GET /v1/jobs, the waiting list, the limit wait lists in the scheduled list), made up from the
// fixture's known cases. It lets TestDashboardWhyBrowser's pages run before the merge:
//
//	go test -tags whystub -run TestDashboardWhyStub -count=1 ./dashboard/
//
// Drop this file once the API parts are merged: TestDashboardWhyBrowser runs the same pages
// against the real answers.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestDashboardWhyStub(t *testing.T) {
	chrome := chromiumPath(t)
	var f *whyFixture
	began := time.Now()
	f = newWhyFixture(t, func(h http.Handler) http.Handler { return &whyStub{h: h, f: &f, began: began} })
	whyBrowser(t, chrome, f, 3, 3, map[string]int64{whyTypo: 1, whyHeld: 1})
}

type whyStub struct {
	h     http.Handler
	f     **whyFixture
	began time.Time
}

func (s *whyStub) inner(r *http.Request, path string) (int, []byte, http.Header) {
	req := r.Clone(r.Context())
	req.URL.Path, req.URL.RawQuery, _ = strings.Cut(path, "?")
	req.RequestURI = ""
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, req)
	return w.Code, w.Body.Bytes(), w.Header()
}

func (s *whyStub) json(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *whyStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	parts := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case strings.HasPrefix(p, "/ui/statuses.js"):
		_, body, hdr := s.inner(r, p+"?"+r.URL.RawQuery)
		body = bytes.Replace(body, []byte(`"listable":[`), []byte(`"listable":["waiting",`), 1)
		body = bytes.Replace(body, []byte(`{"status":"waiting","word":"waiting","final":false,"listable":false,"gauge":false`),
			[]byte(`{"status":"waiting","word":"waiting","final":false,"listable":true,"gauge":true`), 1)
		w.Header().Set("Content-Type", hdr.Get("Content-Type"))
		_, _ = w.Write(body)
	case p == "/v1/queues" && r.Method == "GET":
		code, body, _ := s.inner(r, p)
		if code != 200 {
			w.WriteHeader(code)
			_, _ = w.Write(body)
			return
		}
		var v struct {
			Queues []map[string]any `json:"queues"`
		}
		_ = json.Unmarshal(body, &v)
		for _, q := range v.Queues {
			s.queue(q)
		}
		s.json(w, v)
	case len(parts) == 3 && parts[0] == "v1" && parts[1] == "queues" && r.Method == "GET":
		code, body, _ := s.inner(r, p)
		var q map[string]any
		if code != 200 || json.Unmarshal(body, &q) != nil {
			w.WriteHeader(code)
			_, _ = w.Write(body)
			return
		}
		s.queue(q)
		s.json(w, q)
	case len(parts) == 5 && parts[1] == "queues" && parts[3] == "jobs" && r.Method == "GET":
		code, body, _ := s.inner(r, p)
		var j map[string]any
		if code != 200 || json.Unmarshal(body, &j) != nil {
			w.WriteHeader(code)
			_, _ = w.Write(body)
			return
		}
		s.why(j)
		s.json(w, j)
	case len(parts) == 4 && parts[1] == "queues" && parts[3] == "jobs" && r.Method == "GET":
		s.json(w, map[string]any{"jobs": s.list(r, parts[2], r.URL.Query().Get("status")), "next": ""})
	case p == "/v1/jobs" && r.Method == "GET":
		_, body, _ := s.inner(r, "/v1/queues")
		var v struct {
			Queues []map[string]any `json:"queues"`
		}
		_ = json.Unmarshal(body, &v)
		all := []map[string]any{}
		for _, q := range v.Queues {
			all = append(all, s.list(r, q["queue"].(string), r.URL.Query().Get("status"))...)
		}
		s.json(w, map[string]any{"jobs": all, "next": ""})
	default:
		s.h.ServeHTTP(w, r)
	}
}

// list is a queue's list of a status, with what the accounting adds: the waiting tasks, the
// jobs waiting for a slot among the scheduled, the group's waiting job among the queued.
func (s *whyStub) list(r *http.Request, queue, st string) []map[string]any {
	f := *s.f
	var ids []string
	switch {
	case st == "waiting" && queue == whyFlows:
		ids = []string{f.waiting.ID}
	case st == "waiting":
		return []map[string]any{}
	case st == "scheduled" && queue == whyPrio:
		ids = f.limited
	case st == "queued" && queue == whyTenants:
		ids = []string{f.grouped}
	}
	var out []map[string]any
	if ids != nil {
		for _, id := range ids {
			_, body, _ := s.inner(r, "/v1/queues/"+queue+"/jobs/"+id)
			var j map[string]any
			_ = json.Unmarshal(body, &j)
			out = append(out, j)
		}
	} else {
		_, body, _ := s.inner(r, "/v1/queues/"+queue+"/jobs?status="+st+"&limit=100")
		var v struct {
			Jobs []map[string]any `json:"jobs"`
		}
		_ = json.Unmarshal(body, &v)
		out = v.Jobs
	}
	for _, j := range out {
		s.why(j)
	}
	if out == nil {
		out = []map[string]any{}
	}
	return out
}

func (s *whyStub) queue(q map[string]any) {
	name, _ := q["queue"].(string)
	ms := time.Since(s.began).Milliseconds()
	switch name {
	case whyPrio:
		q["scheduled"] = q["scheduled"].(float64) + 2
		q["limit_waiting"] = 2
		q["waiting_for"] = map[string]int{"concurrency_limit": 2}
	case whyTenants:
		q["waiting_for"] = map[string]int{"group_window": 1}
	case whyHeld:
		q["waiting_for"] = map[string]int{"paused": 1}
		q["latency_ms"] = ms
	case whyFlows:
		q["waiting"] = 1
		q["waiting_for"] = map[string]int{"dependencies": 1, "no_worker_queue": 1}
		q["latency_ms"] = ms
	case whyTypo:
		q["waiting_for"] = map[string]int{"no_worker_queue": 1}
		q["latency_ms"] = ms
	case whyBilling:
		q["waiting_for"] = map[string]int{"due": 1}
	}
}

func (s *whyStub) why(j map[string]any) {
	f := *s.f
	queue, _ := j["queue"].(string)
	st, _ := j["status"].(string)
	var w map[string]any
	switch {
	case queue == whyPrio && st == "scheduled":
		w = map[string]any{"kind": "concurrency_limit", "detail": "concurrency limit of queue: 1 of 1 slots held", "scope": "queue", "held": 1, "slots": 1}
	case queue == whyHeld && st == "queued":
		w = map[string]any{"kind": "paused", "detail": "queue held is paused"}
	case queue == whyTenants && st == "queued":
		w = map[string]any{"kind": "group_window", "detail": "group acme's window is full (1 of 1): position 1", "group": "acme", "position": 1}
	case queue == whyFlows && st == "waiting":
		w = map[string]any{"kind": "dependencies", "detail": "waiting for task " + f.firstOf, "tasks": []string{f.firstOf}}
	case (queue == whyFlows || queue == whyTypo) && st == "queued":
		w = map[string]any{"kind": "no_worker_queue", "detail": "no live worker reads queue " + queue}
	case queue == whyBilling && st == "scheduled":
		at, _ := j["run_at"].(float64)
		w = map[string]any{"kind": "due", "cause": "retry", "until": at,
			"detail": fmt.Sprintf("due at %s (retry backoff)", time.UnixMilli(int64(at)).UTC().Format(time.RFC3339))}
	}
	if w != nil {
		j["waiting_for"] = w
	}
}
