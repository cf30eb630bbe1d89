package api_test

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components map[string]map[string]json.RawMessage `json:"components"`
}

type openAPIOp struct {
	OperationID string `json:"operationId"`
	Parameters  []struct {
		Ref      string `json:"$ref"`
		Name     string `json:"name"`
		In       string `json:"in"`
		Required bool   `json:"required"`
		Schema   struct {
			Enum []string `json:"enum"`
		} `json:"schema"`
	} `json:"parameters"`
	RequestBody json.RawMessage            `json:"requestBody"`
	Responses   map[string]json.RawMessage `json:"responses"`
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// The OpenAPI document (GET /v1/openapi.json) matches the routes: every route is documented,
// every documented operation is served (answers neither 404 nor 405 on real resources, with a
// status that the document lists), and every $ref resolves.
func TestOpenAPI(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{cfg: api.Config{Metrics: okHandler("# metrics\n")}})
	r := e.do("GET", "/v1/openapi.json", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	var doc openAPIDoc
	r.json(t, &doc)
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."), doc.OpenAPI)

	// Every $ref names a component.
	var refs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				refs = append(refs, ref)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var raw any
	r.json(t, &raw)
	walk(raw)
	require.NotEmpty(t, refs)
	for _, ref := range refs {
		parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
		require.Len(t, parts, 2, ref)
		require.Contains(t, doc.Components[parts[0]], parts[1], "unresolved %s", ref)
	}

	// The documented operations are exactly the routes.
	var documented []string
	ops := map[string]openAPIOp{}
	for path, item := range doc.Paths {
		for method, rawOp := range item {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			var op openAPIOp
			require.NoError(t, json.Unmarshal(rawOp, &op))
			require.NotEmpty(t, op.OperationID, "%s %s", method, path)
			require.NotEmpty(t, op.Responses, "%s %s", method, path)
			key := strings.ToUpper(method) + " " + path
			documented = append(documented, key)
			ops[key] = op
		}
	}
	require.ElementsMatch(t, e.api.Routes(), documented)

	// Real resources for the operations to act on.
	queued := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID
	ids := map[string]string{
		"POST /v1/queues/{queue}/dead/{id}/replay": e.seed(status.Failed),
		"DELETE /v1/queues/{queue}/dead/{id}":      e.seed(status.Failed),
		// A finished job's stream ends at once, after its status event.
		"GET /v1/queues/{queue}/jobs/{id}/events": e.seed(status.Completed),
		"GET /v1/queues/{queue}/workflows/{id}":   e.workflow(),
	}
	bodies := map[string]string{
		"POST /v1/queues/{queue}/jobs":       `{"type":"echo"}`,
		"POST /v1/queues/{queue}/jobs:batch": `{"jobs":[{"type":"echo"}]}`,
		"PUT /v1/queues/{queue}":             `{"partitions":3}`,
		"PUT /v1/queues/{queue}/limits":      `{"concurrency":1}`,
		"PUT /v1/queues/{queue}/groups":      `{"window":5,"weights":{"tenant-42":2}}`,
		"PATCH /v1/queues/{queue}/settings":  `{"concurrency":2,"group_window":7}`,
		"POST /v1/schedules":                 `{"name":"nightly","spec":"0 0 3 * * *","type":"echo"}`,
		"POST /v1/queues/{queue}/workflows":  `{"tasks":[{"name":"a","type":"echo"},{"name":"b","type":"echo","after":["a"]}]}`,
		"POST /v1/queues/{queue}/batches":    `{"jobs":[{"type":"echo"}],"callback":{"type":"echo"}}`,
		"POST /v1/keys/rotate":               `{"max":100}`,
	}
	require.NoError(t, e.insp.CreateSchedule(t.Context(), pipeline.Periodic{Name: "nightly", Spec: "@daily", Queue: e.queue, Type: "echo"}))
	// Whole-queue deletions last, so that the others still find their jobs; the limit's
	// deletion after the PUT that sets it.
	last := func(k string) int {
		switch k {
		case "DELETE /v1/queues/{queue}/limits", "DELETE /v1/schedules/{name}":
			return 1
		case "DELETE /v1/queues/{queue}/dead", "DELETE /v1/queues/{queue}":
			return 2
		}
		return 0
	}
	slices.SortFunc(documented, func(a, b string) int {
		if last(a) != last(b) {
			return last(a) - last(b)
		}
		return strings.Compare(a, b)
	})
	for _, key := range documented {
		method, path, _ := strings.Cut(key, " ")
		op := ops[key]
		id := ids[key]
		if id == "" {
			id = queued
		}
		url := strings.NewReplacer("{queue}", e.queue, "{id}", id, "{name}", "nightly").Replace(path)
		var query []string
		for _, p := range op.Parameters {
			if p.In == "query" && p.Required {
				require.NotEmpty(t, p.Schema.Enum, "%s: required %s needs an example", key, p.Name)
				query = append(query, p.Name+"="+p.Schema.Enum[0])
			}
		}
		if len(query) > 0 {
			url += "?" + strings.Join(query, "&")
		}
		body := bodies[key]
		require.Equal(t, op.RequestBody != nil, body != "", "%s: request body documented iff sent", key)
		r := e.do(method, url, body)
		require.NotContains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, r.status, "%s: %s", key, r.body)
		require.Contains(t, op.Responses, strconv.Itoa(r.status), "%s answered %d, which the document does not list: %s", key, r.status, r.body)
	}
}

// Every operation of the OpenAPI document that does not declare itself open (security: [])
// answers 401 to a well-formed request without the token, and changes nothing in Redis: a
// route mounted without the token check (DELETE /v1/queues/{queue}/jobs/{id} was, in a mutant
// that no test killed) fails here, whatever route it is.
func TestEveryAuthedRouteNeedsToken(t *testing.T) {
	t.Parallel()
	const token = "route-token"
	e := setup(t, setupOpts{cfg: api.Config{AuthToken: token, Metrics: okHandler("# metrics\n"),
		Dashboard: okHandler("dashboard")}})
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	raw, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &doc))
	queued := e.seed(status.Queued)
	dead := e.seed(status.Failed)
	before := redisContents(t, e)
	require.NotEmpty(t, before)

	bodies := map[string]string{
		"POST /v1/queues/{queue}/jobs":       `{"type":"echo"}`,
		"POST /v1/queues/{queue}/jobs:batch": `{"jobs":[{"type":"echo"}]}`,
		"PUT /v1/queues/{queue}":             `{"partitions":3}`,
		"PUT /v1/queues/{queue}/limits":      `{"concurrency":1}`,
		"PUT /v1/queues/{queue}/groups":      `{"window":5,"weights":{"tenant-42":2}}`,
		"PATCH /v1/queues/{queue}/settings":  `{"concurrency":2,"group_window":7}`,
		"POST /v1/schedules":                 `{"name":"nightly","spec":"0 0 3 * * *","type":"echo"}`,
		"POST /v1/queues/{queue}/workflows":  `{"tasks":[{"name":"a","type":"echo"},{"name":"b","type":"echo","after":["a"]}]}`,
		"POST /v1/queues/{queue}/batches":    `{"jobs":[{"type":"echo"}],"callback":{"type":"echo"}}`,
		"POST /v1/keys/rotate":               `{"max":100}`,
	}
	authed := 0
	for path, item := range doc.Paths {
		for method, raw := range item {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			var op struct {
				Security *[]map[string][]string `json:"security"`
			}
			require.NoError(t, json.Unmarshal(raw, &op))
			if op.Security != nil && len(*op.Security) == 0 {
				continue // documented as open
			}
			authed++
			key := strings.ToUpper(method) + " " + path
			id := queued
			if strings.Contains(path, "/dead") {
				id = dead
			}
			url := strings.NewReplacer("{queue}", e.queue, "{id}", id, "{name}", "nightly").Replace(path)
			if method == "get" && strings.HasSuffix(path, "/jobs") {
				url += "?status=queued"
			}
			if method == "delete" && path == "/v1/queues/{queue}" {
				url += "?force=true"
			}
			for _, auth := range []string{"", "Authorization: Bearer wrong", "Authorization: " + token} {
				var hdr []string
				if auth != "" {
					hdr = append(hdr, auth)
				}
				r := e.do(strings.ToUpper(method), url, bodies[key], hdr...)
				require.Equal(t, http.StatusUnauthorized, r.status, "%s without the token (%q): %s", key, auth, r.body)
				require.Equal(t, api.CodeUnauthorized, r.apiErr(t).Code, key)
			}
			require.Equal(t, before, redisContents(t, e), "%s without the token changed Redis", key)
		}
	}
	require.GreaterOrEqual(t, authed, 15, "the document's authenticated operations")
}

// No object of the documents names a key twice. encoding/json keeps the last and says nothing,
// but the validators of e2e/openapi refuse such a schema: two branches that each added a field
// to QueueStats merged into one with "waiting" and "latency_ms" twice.
func TestOpenAPINoDuplicateKeys(t *testing.T) {
	for _, name := range []string{"openapi.json", "openapi-3.0.json"} {
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		require.Empty(t, duplicateKeys(t, json.NewDecoder(strings.NewReader(string(b))), "$"), name)
	}
}

// duplicateKeys reads one JSON value from d and returns the paths of the keys named twice in
// one object.
func duplicateKeys(t *testing.T, d *json.Decoder, path string) []string {
	tok, err := d.Token()
	require.NoError(t, err)
	var dups []string
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for d.More() {
			k, err := d.Token()
			require.NoError(t, err)
			key := k.(string)
			if seen[key] {
				dups = append(dups, path+"."+key)
			}
			seen[key] = true
			dups = append(dups, duplicateKeys(t, d, path+"."+key)...)
		}
		_, err = d.Token()
		require.NoError(t, err)
	case json.Delim('['):
		for i := 0; d.More(); i++ {
			dups = append(dups, duplicateKeys(t, d, path+"["+strconv.Itoa(i)+"]")...)
		}
		_, err = d.Token()
		require.NoError(t, err)
	}
	return dups
}
