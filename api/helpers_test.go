package api_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// apiEnv is the package's test bundle (river's maintenance tests' shape; setup makes it): one
// API server over the package's shared Redis, under a key prefix of its own, so that listings
// of every queue (GET /v1/queues, GET /v1/jobs/{id}, the throughput sampler) see only the
// test's queues, with the Client and Inspector it serves, the Redis client, a queue of the
// test's own and the server's log. The benchmarks keep benchEnv (bench_test.go): no request
// log and a wide connection pool, so that their figures (docs/API.md) measure the API alone.
type apiEnv struct {
	t      *testing.T
	http   *httptest.Server
	api    *api.Server
	rdb    redis.UniversalClient
	client *pipeline.Client
	insp   *pipeline.Inspector
	prefix string
	queue  string // a queue name of the test's own
	log    *logBuffer
}

// setupOpts changes what setup makes; the zero value is the usual test.
type setupOpts struct {
	cfg          api.Config
	maxSchedules int                   // the Inspector's bound on schedules (0: the default)
	rdb          redis.UniversalClient // default: a new client of the shared server
	clientRdb    redis.UniversalClient // the Client's, when not rdb (the Inspector keeps rdb)
	clientCfg    pipeline.ClientConfig
}

// setup returns the bundle of a test: the first of opts, if any, says how it differs.
func setup(t *testing.T, opts ...setupOpts) *apiEnv {
	t.Helper()
	var o setupOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	rdb := o.rdb
	if rdb == nil {
		rdb = redistest.Client(t)
	}
	prefix := redistest.UniqueName(t)
	o.clientCfg.Prefix = prefix
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix, MaxSchedules: o.maxSchedules})
	require.NoError(t, err)
	client, err := pipeline.NewClient(cmp.Or(o.clientRdb, rdb), o.clientCfg)
	require.NoError(t, err)
	e := &apiEnv{t: t, rdb: rdb, prefix: prefix, queue: redistest.UniqueName(t), log: &logBuffer{},
		client: client,
		insp:   insp}
	o.cfg.Logger = zerolog.New(e.log).Level(zerolog.DebugLevel)
	srv, err := api.New(e.client, e.insp, o.cfg)
	require.NoError(t, err)
	e.api = srv
	e.http = httptest.NewServer(srv)
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		e.http.Close()
		if t.Failed() {
			t.Logf("server log:\n%s", e.log)
		}
	})
	return e
}

// apiResp is an answer read whole.
type apiResp struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into v.
func (r apiResp) json(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.body, v), "%s", r.body)
}

// job decodes a job body.
func (r apiResp) job(t *testing.T) apiJob {
	t.Helper()
	var j apiJob
	r.json(t, &j)
	return j
}

// apiErr decodes an error body and checks its shape.
func (r apiResp) apiErr(t *testing.T) apiErrView {
	t.Helper()
	var b struct {
		Error *apiErrView `json:"error"`
	}
	r.json(t, &b)
	require.NotNil(t, b.Error, "%s", r.body)
	require.NotEmpty(t, b.Error.Code, "%s", r.body)
	require.NotEmpty(t, b.Error.Message, "%s", r.body)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	return *b.Error
}

type apiErrView struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Op      string `json:"op"`
}

// apiJob is the job JSON (the `status --json` contract).
type apiJob struct {
	ID          string            `json:"id"`
	Queue       string            `json:"queue"`
	Type        string            `json:"type"`
	Status      string            `json:"status"`
	Attempt     int               `json:"attempt"`
	MaxRetries  int               `json:"max_retries"`
	Priority    int               `json:"priority"`
	TimeoutMS   int64             `json:"timeout_ms"`
	Payload     json.RawMessage   `json:"payload"`
	Metadata    map[string]string `json:"metadata"`
	Result      json.RawMessage   `json:"result"`
	LastError   string            `json:"last_error"`
	Worker      string            `json:"worker"`
	CreatedAt   int64             `json:"created_at"`
	RunAt       int64             `json:"run_at"`
	EnqueuedAt  int64             `json:"enqueued_at"`
	StartedAt   int64             `json:"started_at"`
	CompletedAt int64             `json:"completed_at"`
	// Progress and ProgressMessage are absent (nil, "") when the attempt reported none.
	Progress        *int   `json:"progress"`
	ProgressMessage string `json:"progress_message"`
}

// request sends a request with the headers given as "Name: value" strings, and none other.
func (e *apiEnv) request(method, path, body string, headers ...string) apiResp {
	e.t.Helper()
	return e.send("", method, path, body, headers...)
}

// send is request with the Host header host (the URL's when empty).
func (e *apiEnv) send(host, method, path, body string, headers ...string) apiResp {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.http.URL+path, rd)
	require.NoError(e.t, err)
	if host != "" {
		req.Host = host
	}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ": ")
		require.True(e.t, ok, h)
		req.Header.Set(k, v)
	}
	r, err := e.roundTrip(req)
	require.NoError(e.t, err)
	return r
}

// roundTrip sends req and reads the answer whole.
func (e *apiEnv) roundTrip(req *http.Request) (apiResp, error) {
	res, err := e.http.Client().Do(req)
	if err != nil {
		return apiResp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return apiResp{status: res.StatusCode, header: res.Header, body: b}, err
}

// do sends a request as a well-behaved client does: JSON bodies with their Content-Type, and
// X-Conveyor-Request: 1 on mutating requests.
func (e *apiEnv) do(method, path, body string, headers ...string) apiResp {
	e.t.Helper()
	return e.hostRequest("", method, path, body, headers...)
}

// hostRequest is do with the Host header host (the URL's when empty).
func (e *apiEnv) hostRequest(host, method, path, body string, headers ...string) apiResp {
	e.t.Helper()
	if body != "" {
		headers = append(headers, "Content-Type: application/json")
	}
	if method != http.MethodGet {
		headers = append(headers, "X-Conveyor-Request: 1")
	}
	return e.send(host, method, path, body, headers...)
}

// post publishes a job body to the env's queue and requires want.
func (e *apiEnv) post(body string, want int, headers ...string) apiResp {
	e.t.Helper()
	r := e.do("POST", "/v1/queues/"+e.queue+"/jobs", body, headers...)
	require.Equal(e.t, want, r.status, "%s", r.body)
	return r
}

// jobs returns the path of the env's queue's jobs.
func (e *apiEnv) jobs() string { return "/v1/queues/" + e.queue + "/jobs" }

// worker runs a worker on the env's queue with an echo handler and a fail handler (which
// fails for good) until the test ends.
func (e *apiEnv) worker(queues ...string) {
	e.t.Helper()
	if len(queues) == 0 {
		queues = []string{e.queue}
	}
	rdb := redistest.Client(e.t)
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: queues, Prefix: e.prefix, HistoryInterval: 50 * time.Millisecond,
		Logger: zerolog.New(e.log).Level(zerolog.WarnLevel)})
	require.NoError(e.t, err)
	w.Handle("echo", func(_ context.Context, j *pipeline.Job) ([]byte, error) { return bytes.Clone(j.Payload), nil })
	w.Handle("fail", func(context.Context, *pipeline.Job) ([]byte, error) {
		return nil, pipeline.SkipRetry(io.ErrUnexpectedEOF)
	})
	jobtest.RunWorker(e.t, w)
}

// logBuffer is a log sink safe for concurrent writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
