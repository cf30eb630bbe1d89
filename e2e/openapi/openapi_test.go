// Package openapi_test checks the HTTP API against its OpenAPI document with validators
// nobody here wrote: kin-openapi's openapi3filter, on the document's 3.0 copy
// (api/openapi-3.0.json, generated from api/openapi.json), and pb33f's libopenapi-validator,
// on the 3.1 document itself. The real api.Server runs on a
// private Redis with a worker; every operation of the document is called (its success and its
// main errors), and each request and response is validated. An operation of the document that
// no case calls fails the test: a new route needs its rows in cases.
package openapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const token = "openapi-test-token"

// fixture is the server under test and the resources the cases act on.
type fixture struct {
	url   string
	queue string
	// seed makes a job of queue (which no worker reads) in st and returns its id.
	seed func(t *testing.T, st status.Status) string
	// publish publishes a job to the worker's queue, live, and returns its id.
	publish func(t *testing.T) string
	// fill makes the queue "full", bounded to one waiting job and holding it.
	fill func(t *testing.T) string
	// sealed publishes a job to queue with its payload encrypted under the server's older key
	// (its JSON has the placeholder and "encrypted": the API token does not see it opened) and
	// returns its id.
	sealed func(t *testing.T) string
	// logged publishes a job to live and waits until the worker completed it, having logged a
	// line (Job.Logf); it returns its id.
	logged func(t *testing.T) string
	// v31 validates against the 3.1 document, api/openapi.json.
	v31 validator.Validator
}

// tc is one call: the operation it is a case of (as the document writes it, "GET
// /v1/queues/{queue}"), the request and the status it must answer. Adding a case is one row.
type tc struct {
	op     string
	url    string // the path and query; {queue} is the fixture's queue
	body   string // JSON; a request with a body gets Content-Type: application/json
	status int
	// invalid marks a request the document refuses (a bad body or parameter): the case is of
	// the answer, so only the response is validated.
	invalid bool
	noToken bool                              // send no Authorization header
	prep    func(*testing.T, *fixture) string // run first; its result replaces {id} in url
}

// cases are run in order: those that delete come after those that read.
var cases = []tc{
	{op: "GET /healthz", url: "/healthz", status: 200},
	{op: "GET /readyz", url: "/readyz", status: 200},
	{op: "GET /metrics", url: "/metrics", status: 200},
	{op: "GET /metrics", url: "/metrics", status: 401, noToken: true},
	{op: "GET /v1/openapi.json", url: "/v1/openapi.json", status: 200},
	{op: "GET /v1/openapi-3.0.json", url: "/v1/openapi-3.0.json", status: 200},

	// Publishing.
	{op: "POST /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs", status: 202,
		body: `{"type":"echo","payload":{"to":"ada"},"max_retries":2,"metadata":{"k":"v"},"priority":2}`},
	{op: "POST /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs", status: 202,
		body: `{"type":"echo","run_at":"2126-01-01T00:00:00Z","unique":{"key":"u1","ttl":"1h"}}`},
	{op: "POST /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs", status: 202, body: `{"type":"echo","id":"fixed","delay":"1h"}`},
	{op: "POST /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs", status: 200, body: `{"type":"echo","id":"fixed","delay":"1h"}`},
	{op: "POST /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs", status: 409, body: `{"type":"other","id":"fixed"}`},
	{op: "POST /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs", status: 400, body: `{"payload":{}}`, invalid: true},
	{op: "POST /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs", status: 401, body: `{"type":"echo"}`, noToken: true},
	{op: "POST /v1/queues/{queue}/jobs:batch", url: "/v1/queues/{queue}/jobs:batch", status: 202,
		body: `{"jobs":[{"type":"echo","payload":1},{"type":"echo","delay":"1h"}]}`},
	{op: "POST /v1/queues/{queue}/jobs:batch", url: "/v1/queues/{queue}/jobs:batch", status: 400, body: `{"jobs":[]}`, invalid: true},
	{op: "POST /v1/queues/{queue}/jobs", url: "/v1/queues/full/jobs", status: 429, body: `{"type":"echo"}`, prep: filled},
	{op: "POST /v1/queues/{queue}/jobs:batch", url: "/v1/queues/full/jobs:batch", status: 429,
		body: `{"jobs":[{"type":"echo","id":"full-1"},{"type":"echo"}]}`, prep: filled},

	// Jobs.
	{op: "GET /v1/queues/{queue}/jobs/{id}", url: "/v1/queues/{queue}/jobs/{id}", status: 200, prep: seeded(status.Completed)},
	{op: "GET /v1/queues/{queue}/jobs/{id}", url: "/v1/queues/{queue}/jobs/{id}", status: 200, prep: seeded(status.Failed)},
	{op: "GET /v1/queues/{queue}/jobs/{id}", url: "/v1/queues/live/jobs/{id}?wait=10s&until=final", status: 200, prep: published},
	{op: "GET /v1/queues/{queue}/jobs/{id}", url: "/v1/queues/{queue}/jobs/{id}", status: 200,
		prep: func(t *testing.T, f *fixture) string { return f.sealed(t) }},
	{op: "GET /v1/queues/{queue}/jobs/{id}", url: "/v1/queues/{queue}/jobs/nosuch", status: 404},
	{op: "GET /v1/queues/{queue}/jobs/{id}", url: "/v1/queues/{queue}/jobs/{id}?wait=forever", status: 400, invalid: true, prep: seeded(status.Queued)},
	{op: "GET /v1/queues/{queue}/jobs/{id}/events", url: "/v1/queues/{queue}/jobs/{id}/events", status: 200, prep: seeded(status.Completed)},
	{op: "GET /v1/queues/{queue}/jobs/{id}/events", url: "/v1/queues/{queue}/jobs/nosuch/events", status: 404},
	{op: "GET /v1/queues/{queue}/jobs/{id}/logs", url: "/v1/queues/live/jobs/{id}/logs", status: 200, prep: logged},
	{op: "GET /v1/queues/{queue}/jobs/{id}/logs", url: "/v1/queues/{queue}/jobs/{id}/logs", status: 200, prep: seeded(status.Completed)},
	{op: "GET /v1/queues/{queue}/jobs/{id}/logs", url: "/v1/queues/{queue}/jobs/nosuch/logs", status: 404},
	{op: "GET /v1/jobs/{id}", url: "/v1/jobs/{id}", status: 200, prep: seeded(status.Scheduled)},
	{op: "GET /v1/jobs/{id}", url: "/v1/jobs/nosuch", status: 404},
	{op: "GET /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs?status=scheduled&limit=2", status: 200},
	{op: "GET /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs?status=queued", status: 200},
	{op: "GET /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs?status=in_progress", status: 200, prep: seeded(status.InProgress)},
	{op: "GET /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs?status=failed", status: 200, prep: seeded(status.Failed)},
	{op: "GET /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs?status=dead", status: 200, prep: seeded(status.Failed)},
	{op: "GET /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs?status=completed", status: 200, prep: seeded(status.Completed)},
	{op: "GET /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs?status=canceled", status: 200},
	{op: "GET /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs?status=nosuch", status: 400, invalid: true},
	{op: "GET /v1/queues/{queue}/jobs", url: "/v1/queues/nosuch/jobs?status=queued", status: 404},
	{op: "GET /v1/queues/{queue}/jobs", url: "/v1/queues/{queue}/jobs?status=waiting", status: 200, prep: seeded(status.Waiting)},
	{op: "GET /v1/jobs", url: "/v1/jobs?status=scheduled&limit=2", status: 200},
	{op: "GET /v1/jobs", url: "/v1/jobs?status=queued", status: 200},
	{op: "GET /v1/jobs", url: "/v1/jobs?status=waiting", status: 200, prep: seeded(status.Waiting)},
	{op: "GET /v1/jobs", url: "/v1/jobs?status=in_progress", status: 200, prep: seeded(status.InProgress)},
	{op: "GET /v1/jobs", url: "/v1/jobs?status=dead", status: 200, prep: seeded(status.Failed)},
	{op: "GET /v1/jobs", url: "/v1/jobs?status=nosuch", status: 400, invalid: true},
	{op: "POST /v1/queues/{queue}/jobs/{id}/run", url: "/v1/queues/{queue}/jobs/{id}/run", status: 200, prep: seeded(status.Scheduled)},
	{op: "POST /v1/queues/{queue}/jobs/{id}/run", url: "/v1/queues/{queue}/jobs/{id}/run", status: 409, prep: seeded(status.Queued)},
	{op: "POST /v1/queues/{queue}/jobs/{id}/run", url: "/v1/queues/{queue}/jobs/nosuch/run", status: 404},
	{op: "POST /v1/queues/{queue}/jobs/{id}/delete", url: "/v1/queues/{queue}/jobs/{id}/delete", status: 200, prep: seeded(status.Queued)},
	{op: "POST /v1/queues/{queue}/jobs/{id}/delete", url: "/v1/queues/{queue}/jobs/{id}/delete", status: 409, prep: seeded(status.InProgress)},
	{op: "POST /v1/queues/{queue}/jobs/{id}/delete", url: "/v1/queues/{queue}/jobs/nosuch/delete", status: 404},
	{op: "DELETE /v1/queues/{queue}/jobs/{id}", url: "/v1/queues/{queue}/jobs/{id}", status: 200, prep: seeded(status.Scheduled)},
	{op: "DELETE /v1/queues/{queue}/jobs/{id}", url: "/v1/queues/{queue}/jobs/{id}", status: 409, prep: seeded(status.Completed)},
	{op: "DELETE /v1/queues/{queue}/jobs/{id}", url: "/v1/queues/{queue}/jobs/nosuch", status: 404},

	// Queues.
	{op: "GET /v1/queues", url: "/v1/queues", status: 200},
	{op: "GET /v1/queues", url: "/v1/queues", status: 401, noToken: true},
	{op: "GET /v1/queues/{queue}", url: "/v1/queues/{queue}", status: 200},
	{op: "GET /v1/queues/{queue}", url: "/v1/queues/nosuch", status: 404},
	{op: "PUT /v1/queues/{queue}", url: "/v1/queues/partitioned", status: 200, body: `{"partitions":3}`},
	{op: "PUT /v1/queues/{queue}", url: "/v1/queues/partitioned", status: 400, body: `{"partitions":2000}`, invalid: true},
	{op: "POST /v1/queues/{queue}/pause", url: "/v1/queues/{queue}/pause", status: 200},
	{op: "POST /v1/queues/{queue}/resume", url: "/v1/queues/{queue}/resume", status: 200},
	{op: "POST /v1/queues/{queue}/pause", url: "/v1/queues/nosuch/pause", status: 404},
	{op: "POST /v1/queues/{queue}/resume", url: "/v1/queues/nosuch/resume", status: 404},
	{op: "GET /v1/throughput", url: "/v1/throughput", status: 200},
	{op: "GET /v1/throughput", url: "/v1/throughput?queue=nosuch", status: 404},
	{op: "GET /v1/doctor", url: "/v1/doctor", status: 200},
	{op: "GET /v1/redis", url: "/v1/redis", status: 200},
	{op: "GET /v1/workers", url: "/v1/workers", status: 200},
	{op: "GET /v1/workers", url: "/v1/workers", status: 401, noToken: true},
	{op: "GET /v1/throughput", url: "/v1/throughput?queue={queue}&resolution=1m&window=1h", status: 200},
	{op: "GET /v1/throughput", url: "/v1/throughput?resolution=1s", status: 400, invalid: true},

	// Limits and groups.
	{op: "PUT /v1/queues/{queue}/limits", url: "/v1/queues/{queue}/limits", status: 200, body: `{"type":"echo","rate":10,"interval_ms":1000,"concurrency":2}`},
	{op: "PUT /v1/queues/{queue}/limits", url: "/v1/queues/{queue}/limits", status: 400, body: `{"concurrency":-1}`, invalid: true},
	{op: "GET /v1/queues/{queue}/limits", url: "/v1/queues/{queue}/limits", status: 200},
	{op: "GET /v1/queues/{queue}/limits", url: "/v1/queues/nosuch/limits", status: 404},
	{op: "DELETE /v1/queues/{queue}/limits", url: "/v1/queues/{queue}/limits?type=echo", status: 204},
	{op: "DELETE /v1/queues/{queue}/limits", url: "/v1/queues/{queue}/limits?type=echo", status: 404},
	{op: "PUT /v1/queues/{queue}/groups", url: "/v1/queues/{queue}/groups", status: 200, body: `{"window":5,"weights":{"tenant-42":2}}`},
	{op: "GET /v1/queues/{queue}/groups", url: "/v1/queues/{queue}/groups", status: 200},
	{op: "GET /v1/queues/{queue}/groups", url: "/v1/queues/nosuch/groups", status: 404},
	{op: "PATCH /v1/queues/{queue}/settings", url: "/v1/queues/{queue}/settings", status: 200,
		body: `{"group_window":6,"max_retries":4,"timeout_ms":30000}`},
	{op: "PATCH /v1/queues/{queue}/settings", url: "/v1/queues/{queue}/settings", status: 200,
		body: `{"max_waiting_per_key":1000}`},
	{op: "PATCH /v1/queues/{queue}/settings", url: "/v1/queues/{queue}/settings", status: 400, body: `{"max_retries":-2}`, invalid: true},
	{op: "PATCH /v1/queues/{queue}/settings", url: "/v1/queues/{queue}/settings", status: 400, body: `{"max_waiting_per_key":-1}`, invalid: true},
	{op: "PATCH /v1/queues/{queue}/settings", url: "/v1/queues/nosuch/settings", status: 404, body: `{"group_window":6}`},
	{op: "GET /v1/queues/{queue}/settings", url: "/v1/queues/{queue}/settings", status: 200},
	{op: "GET /v1/queues/{queue}/settings", url: "/v1/queues/nosuch/settings", status: 404},

	// Workflows and batches.
	{op: "POST /v1/queues/{queue}/workflows", url: "/v1/queues/{queue}/workflows", status: 201,
		body: `{"id":"wf-1","name":"diamond","tasks":[{"name":"a","type":"echo","payload":{"n":1}},{"name":"b","type":"echo","after":["a"],"max_retries":2},{"name":"c","type":"echo","after":["a"]},{"name":"d","type":"echo","after":["b","c"],"finally":true}]}`},
	{op: "POST /v1/queues/{queue}/workflows", url: "/v1/queues/{queue}/workflows", status: 200,
		body: `{"id":"wf-1","name":"diamond","tasks":[{"name":"a","type":"echo","payload":{"n":1}},{"name":"b","type":"echo","after":["a"],"max_retries":2},{"name":"c","type":"echo","after":["a"]},{"name":"d","type":"echo","after":["b","c"],"finally":true}]}`},
	{op: "POST /v1/queues/{queue}/workflows", url: "/v1/queues/{queue}/workflows", status: 409, body: `{"id":"wf-1","tasks":[{"name":"x","type":"echo"}]}`},
	{op: "POST /v1/queues/{queue}/workflows", url: "/v1/queues/{queue}/workflows", status: 400,
		body: `{"tasks":[{"name":"a","type":"echo","after":["b"]},{"name":"b","type":"echo","after":["a"]}]}`},
	{op: "POST /v1/queues/{queue}/workflows", url: "/v1/queues/{queue}/workflows", status: 400, body: `{"tasks":[]}`, invalid: true},
	{op: "POST /v1/queues/{queue}/batches", url: "/v1/queues/{queue}/batches", status: 201,
		body: `{"id":"b-1","jobs":[{"type":"echo","payload":1},{"type":"echo"}],"callback":{"type":"echo"}}`},
	{op: "POST /v1/queues/{queue}/batches", url: "/v1/queues/{queue}/batches", status: 400, body: `{"jobs":[{"type":"echo","delay":"1h"}]}`},
	{op: "GET /v1/queues/{queue}/workflows", url: "/v1/queues/{queue}/workflows?limit=10", status: 200},
	{op: "GET /v1/queues/{queue}/workflows", url: "/v1/queues/{queue}/workflows?limit=0", status: 400, invalid: true},
	{op: "GET /v1/queues/{queue}/workflows/{id}", url: "/v1/queues/{queue}/workflows/wf-1", status: 200},
	{op: "GET /v1/queues/{queue}/workflows/{id}", url: "/v1/queues/{queue}/workflows/b-1", status: 200},
	{op: "GET /v1/queues/{queue}/workflows/{id}", url: "/v1/queues/{queue}/workflows/nosuch", status: 404},

	// Schedules.
	{op: "POST /v1/schedules", url: "/v1/schedules", status: 201, body: `{"name":"nightly","spec":"0 0 3 * * *","queue":"{queue}","type":"echo","payload":{"a":1}}`},
	{op: "POST /v1/schedules", url: "/v1/schedules", status: 400, body: `{"name":"bad","spec":"every day","type":"echo"}`},
	{op: "GET /v1/schedules", url: "/v1/schedules", status: 200},
	{op: "GET /v1/schedules", url: "/v1/schedules?limit=1", status: 200},
	{op: "GET /v1/schedules", url: "/v1/schedules?limit=0", status: 400, invalid: true},
	{op: "GET /v1/schedules/{name}", url: "/v1/schedules/nightly", status: 200},
	{op: "GET /v1/schedules/{name}", url: "/v1/schedules/nosuch", status: 404},
	{op: "POST /v1/schedules/{name}/pause", url: "/v1/schedules/nightly/pause", status: 200},
	{op: "GET /v1/schedules/{name}", url: "/v1/schedules/nightly", status: 200},
	{op: "POST /v1/schedules/{name}/resume", url: "/v1/schedules/nightly/resume", status: 200},
	{op: "POST /v1/schedules/{name}/pause", url: "/v1/schedules/nosuch/pause", status: 404},
	{op: "POST /v1/schedules/{name}/resume", url: "/v1/schedules/nosuch/resume", status: 404},
	{op: "DELETE /v1/schedules/{name}", url: "/v1/schedules/nightly", status: 204},
	{op: "DELETE /v1/schedules/{name}", url: "/v1/schedules/nightly", status: 404},

	// Dead jobs.
	{op: "POST /v1/queues/{queue}/dead/{id}/replay", url: "/v1/queues/{queue}/dead/{id}/replay", status: 200, prep: seeded(status.Failed)},
	{op: "POST /v1/queues/{queue}/dead/{id}/replay", url: "/v1/queues/{queue}/dead/{id}/replay", status: 409, prep: seeded(status.Scheduled)},
	{op: "POST /v1/queues/{queue}/dead/{id}/replay", url: "/v1/queues/{queue}/dead/nosuch/replay", status: 404},
	{op: "DELETE /v1/queues/{queue}/dead/{id}", url: "/v1/queues/{queue}/dead/{id}?dry_run=true", status: 200, prep: seeded(status.Failed)},
	{op: "DELETE /v1/queues/{queue}/dead/{id}", url: "/v1/queues/{queue}/dead/{id}", status: 200, prep: seeded(status.Failed)},
	{op: "DELETE /v1/queues/{queue}/dead/{id}", url: "/v1/queues/{queue}/dead/{id}", status: 409, prep: seeded(status.Scheduled)},
	{op: "POST /v1/queues/{queue}/dead:replay", url: "/v1/queues/{queue}/dead:replay", status: 200, prep: seeded(status.Failed)},
	{op: "DELETE /v1/queues/{queue}/dead", url: "/v1/queues/{queue}/dead?older_than=1h&dry_run=true", status: 200, prep: seeded(status.Failed)},
	{op: "DELETE /v1/queues/{queue}/dead", url: "/v1/queues/{queue}/dead", status: 200},
	{op: "DELETE /v1/queues/{queue}/dead", url: "/v1/queues/{queue}/dead?older_than=soon", status: 400, invalid: true},

	// Encryption at rest: the server's key ids, and re-sealing (the server's keys are "k2"
	// then the sealed fixture's "k1"; without a payload token the API token may rotate).
	{op: "GET /v1/keys", url: "/v1/keys", status: 200},
	{op: "POST /v1/keys/rotate", url: "/v1/keys/rotate", status: 200, body: `{"queue":"{queue}","max":1,"batch":1}`,
		prep: func(t *testing.T, f *fixture) string { return f.sealed(t) }},
	{op: "POST /v1/keys/rotate", url: "/v1/keys/rotate", status: 200, body: `{}`},
	{op: "POST /v1/keys/rotate", url: "/v1/keys/rotate", status: 400, body: `{"batch":0}`, invalid: true},
	{op: "POST /v1/keys/rotate", url: "/v1/keys/rotate", status: 404, body: `{"queue":"nosuch"}`},
	{op: "POST /v1/keys/rotate", url: "/v1/keys/rotate", status: 401, body: `{}`, noToken: true},

	// Deleting a queue: refused while it has jobs, then forced.
	{op: "DELETE /v1/queues/{queue}", url: "/v1/queues/{queue}", status: 409},
	{op: "DELETE /v1/queues/{queue}", url: "/v1/queues/{queue}?force=true", status: 200},
	{op: "DELETE /v1/queues/{queue}", url: "/v1/queues/nosuch", status: 404},
}

// seeded returns a prep that seeds a job of the fixture's queue in st.
func seeded(st status.Status) func(*testing.T, *fixture) string {
	return func(t *testing.T, f *fixture) string { return f.seed(t, st) }
}

// filled is a prep that makes the queue "full" hold its bound (max_waiting 1).
func filled(t *testing.T, f *fixture) string { return f.fill(t) }

// logged is a prep that publishes a job for the worker and waits until it completed, with
// its handler's line kept.
func logged(t *testing.T, f *fixture) string { return f.logged(t) }

// published is a prep that publishes a job for the worker, which completes it.
func published(t *testing.T, f *fixture) string { return f.publish(t) }

func TestOperationsValidate(t *testing.T) {
	doc := loadDoc(t)
	f := newFixture(t)
	f.v31 = loadDoc31(t)
	doc.Servers = openapi3.Servers{{URL: f.url}}
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)

	// Every operation of the document has a case that succeeds.
	called := map[string]bool{}
	for _, c := range cases {
		if c.status < 300 {
			called[c.op] = true
		}
	}
	var missing []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if op := method + " " + path; !called[op] {
				missing = append(missing, op)
			}
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "operations of the document that no case calls with success: add rows to cases")

	for i, c := range cases {
		t.Run(fmt.Sprintf("%02d %s %d", i, c.op, c.status), func(t *testing.T) {
			f.call(t, router, c)
		})
	}
}

// call makes c's request, checks its status and validates the request and the response.
func (f *fixture) call(t *testing.T, router routers.Router, c tc) {
	method, _, _ := strings.Cut(c.op, " ")
	url := strings.ReplaceAll(c.url, "{queue}", f.queue)
	body := strings.ReplaceAll(c.body, "{queue}", f.queue)
	if c.prep != nil {
		url = strings.ReplaceAll(url, "{id}", c.prep(t, f))
	}
	newReq := func() *http.Request {
		var rb io.Reader
		if body != "" {
			rb = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(t.Context(), method, f.url+url, rb)
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		} else if method != "GET" {
			req.Header.Set("X-Conveyor-Request", "1")
		}
		if !c.noToken {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return req
	}
	req := newReq()
	route, params, err := router.FindRoute(req)
	require.NoError(t, err, "the document has no route for %s %s", method, url)
	require.Equal(t, c.op, route.Method+" "+route.Path, "the case's op is the route the document finds")
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if !c.invalid {
		require.NoError(t, openapi3filter.ValidateRequest(t.Context(), in), "the request of the case")
	}

	resp, err := http.DefaultClient.Do(newReq())
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, c.status, resp.StatusCode, "%s", got)
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	out.SetBodyBytes(got)
	require.NoError(t, openapi3filter.ValidateResponse(t.Context(), out), "the response: %s", got)

	// The same with libopenapi-validator, on the 3.1 document, which also checks the
	// security requirement: a case without the token is invalid there by design.
	if !c.invalid && !c.noToken {
		ok, errs := f.v31.ValidateHttpRequest(newReq())
		require.True(t, ok, "the request of the case, 3.1: %s", describe(errs))
	}
	resp31 := &http.Response{StatusCode: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(got))}
	ok, errs := f.v31.ValidateHttpResponse(newReq(), resp31)
	require.True(t, ok, "the response, 3.1: %s\n%s", describe(errs), got)
}

// describe is libopenapi-validator's errors in words.
func describe(errs []*verrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n- %s: %s", e.Message, e.Reason)
		for _, se := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n    %s at %s", se.Reason, se.FieldPath)
		}
	}
	return b.String()
}

// loadDoc31 builds libopenapi-validator's validator of the 3.1 document.
func loadDoc31(t *testing.T) validator.Validator {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "api", "openapi.json"))
	require.NoError(t, err)
	doc, err := libopenapi.NewDocument(raw)
	require.NoError(t, err)
	v, errs := validator.NewValidator(doc)
	require.Empty(t, errs)
	ok, verrs := v.ValidateDocument()
	require.True(t, ok, "the 3.1 document itself: %s", describe(verrs))
	return v
}

// loadDoc reads and checks the 3.0 copy of the document.
func loadDoc(t *testing.T) *openapi3.T {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "api", "openapi-3.0.json"))
	require.NoError(t, err)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(t.Context()), "the document itself")
	// The events stream is text; its schema is a string.
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
	return doc
}

// newFixture starts the server on a private Redis, with a worker on the queue live whose echo
// handler returns its payload; the cases' own queue, orders, has no worker, so that the jobs
// seeded there stay as seeded.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	queue := "orders"
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{
		Queues: []string{"live"}, Name: "openapi-worker", Concurrency: 2, ShutdownTimeout: 2 * time.Second,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	require.NoError(t, err)
	w.Handle("echo", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		j.Logf("echo of %d bytes", len(j.Payload))
		return j.Payload, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("worker: %v", err)
		}
	})

	serverKeys, err := keyring.Parse("k2 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, keyring.KeySize)) +
		"\nk1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, keyring.KeySize)))
	require.NoError(t, err)
	s, err := api.New(client, insp, api.Config{
		AuthToken: token,
		Keys:      serverKeys,
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = io.Copy(w, bytes.NewBufferString("# HELP up 1\nup 1\n"))
		}),
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	require.NoError(t, err)
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		_ = s.Close()
	})
	f := &fixture{url: hs.URL, queue: queue}
	f.publish = func(t *testing.T) string {
		j, err := client.Enqueue(t.Context(), "live", pipeline.Task{Type: "echo", Payload: []byte(`{"to":"bob"}`)})
		require.NoError(t, err)
		return j.ID
	}
	f.fill = func(t *testing.T) string {
		_, err := insp.CreateQueue(t.Context(), "full", pipeline.QueueOptions{})
		require.NoError(t, err)
		one := 1
		_, err = insp.UpdateQueue(t.Context(), "full", pipeline.QueuePatch{MaxWaiting: &one})
		require.NoError(t, err)
		j, err := client.Enqueue(t.Context(), "full", pipeline.Task{Type: "echo"}, pipeline.WithID("full-1"))
		require.NoError(t, err)
		return j.ID
	}
	f.sealed = func(t *testing.T) string {
		k, err := keyring.Parse("k1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, keyring.KeySize)))
		require.NoError(t, err)
		kc, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Keys: k})
		require.NoError(t, err)
		j, err := kc.Enqueue(t.Context(), queue, pipeline.Task{Type: "echo", Payload: []byte(`{"card":"4111"}`)})
		require.NoError(t, err)
		return j.ID
	}
	f.logged = func(t *testing.T) string {
		id := f.publish(t)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		_, err := client.Wait(ctx, "live", id)
		require.NoError(t, err)
		return id
	}
	f.seed = func(t *testing.T, st status.Status) string {
		return jobtest.Seed(t, rdb, queue, st, jobtest.Opts{
			Task: pipeline.Task{Type: "echo", Payload: []byte(`{"seeded":true}`)}, Result: `{"ok":true}`,
		}).ID
	}
	return f
}
