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

// GET /v1/schedules is paged as the job lists are (cursor, limit; next, "" on the last page),
// and a new schedule past the bound is a 409 too_many_schedules.
func TestSchedulesPagedAndBounded(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{maxSchedules: 3})
	for _, n := range []string{"c", "a", "b"} {
		r := e.do("POST", "/v1/schedules", `{"name":"`+n+`","spec":"@daily","type":"t"}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	}
	r := e.do("POST", "/v1/schedules", `{"name":"d","spec":"@daily","type":"t"}`)
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"reason":"too_many_schedules"`)
	require.Contains(t, string(r.body), `schedule \"d\" is new and 3 are stored`)

	type page struct {
		Schedules []struct {
			Name string `json:"name"`
		} `json:"schedules"`
		Next *string `json:"next"`
	}
	var names []string
	cursor := ""
	for pages := 1; ; pages++ {
		r := e.do("GET", "/v1/schedules?limit=2&cursor="+cursor, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var p page
		r.json(t, &p)
		require.NotNil(t, p.Next, "next is always there: %s", r.body)
		for _, s := range p.Schedules {
			names = append(names, s.Name)
		}
		if *p.Next == "" {
			require.Equal(t, 2, pages)
			break
		}
		cursor = *p.Next
	}
	require.Equal(t, []string{"a", "b", "c"}, names)
	for _, bad := range []string{"limit=0", "limit=1001", "limit=x", "cursor=a:b"} {
		r := e.do("GET", "/v1/schedules?"+bad, "")
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", bad, r.body)
	}
}
