package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

func TestSchedulesAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	type schedule struct {
		Name      string         `json:"name"`
		Spec      string         `json:"spec"`
		Queue     string         `json:"queue"`
		Type      string         `json:"type"`
		Payload   map[string]any `json:"payload"`
		Missed    string         `json:"missed"`
		Source    string         `json:"source"`
		Paused    bool           `json:"paused"`
		LastRunAt *time.Time     `json:"last_run_at"`
		LastJob   string         `json:"last_job"`
		NextRunAt *time.Time     `json:"next_run_at"`
	}
	list := func() []schedule {
		t.Helper()
		r := e.do("GET", "/v1/schedules", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var body struct {
			Schedules []schedule `json:"schedules"`
		}
		r.json(t, &body)
		require.NotNil(t, body.Schedules, "an empty list is [], not null: %s", r.body)
		return body.Schedules
	}
	require.Empty(t, list())

	r := e.do("POST", "/v1/schedules", `{"name":"nightly","spec":"CRON_TZ=Europe/Berlin 0 0 3 * * *","queue":"`+e.queue+`","type":"report","payload":{"kind":"daily"},"missed":"once"}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	var got schedule
	r.json(t, &got)
	require.NotNil(t, got.NextRunAt)
	require.Nil(t, got.LastRunAt)
	got.NextRunAt = nil
	require.Equal(t, schedule{Name: "nightly", Spec: "CRON_TZ=Europe/Berlin 0 0 3 * * *", Queue: e.queue, Type: "report",
		Payload: map[string]any{"kind": "daily"}, Missed: "once", Source: "api"}, got)
	// Defaults: the default queue, skip.
	r = e.do("POST", "/v1/schedules", `{"name":"beat","spec":"@every 30s","type":"echo"}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	r.json(t, &got)
	require.Equal(t, pipeline.DefaultQueue, got.Queue)
	require.Equal(t, "skip", got.Missed)
	require.Len(t, list(), 2)

	r = e.do("POST", "/v1/schedules/beat/pause", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r.json(t, &got)
	require.True(t, got.Paused)
	require.Nil(t, got.NextRunAt)
	r = e.do("POST", "/v1/schedules/beat/resume", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r.json(t, &got)
	require.False(t, got.Paused)
	r = e.do("GET", "/v1/schedules/beat", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)

	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/schedules/beat", "").status)
	for _, tc := range []struct{ method, path string }{
		{"DELETE", "/v1/schedules/beat"}, {"GET", "/v1/schedules/beat"},
		{"POST", "/v1/schedules/beat/pause"}, {"POST", "/v1/schedules/beat/resume"},
	} {
		r := e.do(tc.method, tc.path, "")
		require.Equal(t, http.StatusNotFound, r.status, "%s %s: %s", tc.method, tc.path, r.body)
		require.Equal(t, "not_found", r.apiErr(t).Code)
		require.Equal(t, `schedule not found: "beat"`, r.apiErr(t).Message)
	}

	for _, bad := range []struct{ body, code string }{
		{`{"name":"x","spec":"@every 10ms","type":"t"}`, "invalid_argument"},
		{`{"name":"a:b","spec":"@daily","type":"t"}`, "invalid_argument"},
		{`{"name":"x","spec":"61 * * * *","type":"t"}`, "invalid_argument"},
		{`{"name":"x","spec":"TZ=","type":"t"}`, "invalid_argument"},
		{`{"name":"x","spec":"@daily","type":"t","missed":"twice"}`, "invalid_argument"},
		{`{"name":"x","spec":"@daily"}`, "invalid_argument"},
		{`{"name":"x","spec":"@daily","type":"t","queue":"a{b}"}`, "invalid_argument"},
		{`{"name":"x","spec":"@daily","type":"t","extra":1}`, "invalid_body"},
		{`[]`, "invalid_body"},
	} {
		r := e.do("POST", "/v1/schedules", bad.body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", bad.body, r.body)
		require.Equal(t, bad.code, r.apiErr(t).Code, bad.body)
		require.NotContains(t, r.body, "pipeline:", bad.body)
	}
	require.Equal(t, http.StatusBadRequest, e.do("GET", "/v1/schedules/a%20b", "").status)
	require.Len(t, list(), 1)
}
