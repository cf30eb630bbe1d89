package api_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/hostile"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// hostileAPI is an API over a private server with a queued job, and a request against it that
// must be answered 400 with the code and phrases given, writing nothing.
func hostileAPI(t *testing.T) (*apiEnv, func(t *testing.T, code string, wants []string, method, path, body string)) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	e := setup(t, setupOpts{rdb: rdb})
	_, err := e.client.Enqueue(t.Context(), "hostile", pipeline.Task{Type: "echo"}, pipeline.WithID("queued"))
	require.NoError(t, err)
	return e, func(t *testing.T, code string, wants []string, method, path, body string) {
		t.Helper()
		hostile.NothingWritten(t, rdb, func() {
			r := e.do(method, path, body)
			require.Equal(t, 400, r.status, "%s", r.body)
			ae := r.apiErr(t)
			if code == "" {
				code = "invalid_argument"
			}
			require.Equal(t, code, ae.Code, ae.Message)
			for _, w := range wants {
				require.Contains(t, strings.ToLower(ae.Message), strings.ToLower(w))
			}
		})
	}
}

// TestHostileAPIPublish posts the shared table of hostile publishes, alone and as the second
// job of a batch.
func TestHostileAPIPublish(t *testing.T) {
	t.Parallel()
	_, refused := hostileAPI(t)
	for _, tc := range hostile.Cases("hostile") {
		t.Run(tc.Name, func(t *testing.T) {
			tc.SkipAt(t, hostile.HTTP)
			wants := tc.Wants(hostile.HTTP)
			base := "/v1/queues/" + url.PathEscape(tc.Job.Queue) + "/jobs"
			body := tc.Job.HTTPBody()
			refused(t, tc.HTTPCode, wants, "POST", base, body)
			batch := `{"jobs":[{"type":"echo"},` + body + `]}`
			if tc.HTTPCode == "invalid_body" || strings.HasPrefix(tc.Name, "Queue/") {
				// The whole body, or the path, is refused: no job's index to name.
				refused(t, tc.HTTPCode, wants, "POST", base+":batch", batch)
				return
			}
			refused(t, tc.HTTPCode, append([]string{"jobs[1]"}, wants...), "POST", base+":batch", batch)
		})
	}
}

// TestHostileAPINames sends every hostile queue name and job id to each route that takes one.
func TestHostileAPINames(t *testing.T) {
	t.Parallel()
	_, refused := hostileAPI(t)
	type route struct{ method, path, body string }
	byQueue := map[string]route{
		"stats":      {"GET", "/v1/queues/{q}", ""},
		"create":     {"PUT", "/v1/queues/{q}", `{"partitions":2}`},
		"delete":     {"DELETE", "/v1/queues/{q}?force=true", ""},
		"list":       {"GET", "/v1/queues/{q}/jobs?status=queued", ""},
		"get":        {"GET", "/v1/queues/{q}/jobs/queued", ""},
		"cancel":     {"DELETE", "/v1/queues/{q}/jobs/queued", ""},
		"replay":     {"POST", "/v1/queues/{q}/dead/queued/replay", ""},
		"purge":      {"DELETE", "/v1/queues/{q}/dead/queued", ""},
		"replay all": {"POST", "/v1/queues/{q}/dead:replay", ""},
		"purge all":  {"DELETE", "/v1/queues/{q}/dead", ""},
		"limits":     {"GET", "/v1/queues/{q}/limits", ""},
		"set limit":  {"PUT", "/v1/queues/{q}/limits", `{"concurrency":1}`},
		"del limit":  {"DELETE", "/v1/queues/{q}/limits", ""},
		"workflows":  {"GET", "/v1/queues/{q}/workflows", ""},
		"workflow":   {"GET", "/v1/queues/{q}/workflows/wf", ""},
		"publish wf": {"POST", "/v1/queues/{q}/workflows", `{"tasks":[{"name":"a","type":"echo"}]}`},
		"batch":      {"POST", "/v1/queues/{q}/batches", `{"jobs":[{"type":"echo"}]}`},
	}
	byID := map[string]route{
		"get":      {"GET", "/v1/queues/hostile/jobs/{id}", ""},
		"cancel":   {"DELETE", "/v1/queues/hostile/jobs/{id}", ""},
		"replay":   {"POST", "/v1/queues/hostile/dead/{id}/replay", ""},
		"purge":    {"DELETE", "/v1/queues/hostile/dead/{id}", ""},
		"find":     {"GET", "/v1/jobs/{id}", ""},
		"workflow": {"GET", "/v1/queues/hostile/workflows/{id}", ""},
	}
	for _, n := range hostile.BadQueues() {
		for name, rt := range byQueue {
			t.Run("Queue/"+n.Name+"/"+name, func(t *testing.T) {
				if n.Value == "" {
					t.Skip("an empty path segment is another route")
				}
				refused(t, "", []string{"queue name", n.Want}, rt.method, strings.Replace(rt.path, "{q}", url.PathEscape(n.Value), 1), rt.body)
			})
		}
	}
	for _, n := range hostile.BadIDs() {
		for name, rt := range byID {
			t.Run("ID/"+n.Name+"/"+name, func(t *testing.T) {
				if n.Value == "" {
					t.Skip("an empty path segment is another route")
				}
				refused(t, "", []string{"job id", n.Want}, rt.method, strings.Replace(rt.path, "{id}", url.PathEscape(n.Value), 1), rt.body)
			})
		}
	}
}

// TestHostileAPIExtremes posts the valid jobs at every limit: each is accepted as sent.
func TestHostileAPIExtremes(t *testing.T) {
	t.Parallel()
	e, _ := hostileAPI(t)
	for _, x := range hostile.Extremes("hostile") {
		t.Run(x.Name, func(t *testing.T) {
			x.SkipAt(t, hostile.HTTP)
			r := e.do("POST", "/v1/queues/"+url.PathEscape(x.Job.Queue)+"/jobs", x.Job.HTTPBody())
			require.Equal(t, 202, r.status, "%s", r.body)
			j := r.job(t)
			require.Equal(t, x.Job.Type, j.Type)
			if len(x.Job.Metadata) > 0 {
				require.Equal(t, x.Job.Metadata, j.Metadata)
			}
		})
	}
}
