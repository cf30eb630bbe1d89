package api_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/leaktest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

func TestRouting(t *testing.T) {
	t.Parallel()
	e := setup(t)

	for _, path := range []string{"/v1/nope", "/v1/queues/q/jobs/x/y", "/nope", "/"} {
		r := e.do("GET", path, "")
		require.Equal(t, http.StatusNotFound, r.status, "%s: %s", path, r.body)
		require.Equal(t, api.CodeNotFound, r.apiErr(t).Code)
	}
	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/v1/queues/q/jobs", "GET, HEAD, POST"},
		{"PATCH", "/v1/queues/q/jobs/x", "DELETE, GET, HEAD"},
		{"GET", "/v1/queues/q/jobs:batch", "POST"},
		{"POST", "/v1/queues", "GET, HEAD"},
		{"GET", "/v1/queues/q/dead:replay", "POST"},
		{"DELETE", "/healthz", "GET, HEAD"},
	} {
		r := e.do(tc.method, tc.path, "")
		require.Equal(t, http.StatusMethodNotAllowed, r.status, "%s %s: %s", tc.method, tc.path, r.body)
		require.Equal(t, tc.allow, r.header.Get("Allow"))
		require.Equal(t, api.CodeMethodNotAllowed, r.apiErr(t).Code)
	}
	// A write method no route takes is a 405 even without the cross-site header a write needs:
	// the fallback changes nothing (PATCH on a queue answered 403, the cross-site refusal).
	for _, tc := range []struct{ method, path, allow string }{
		{"PATCH", "/v1/queues/q", "DELETE, GET, HEAD, PUT"},
		{"PATCH", "/v1/queues/q/limits", "DELETE, GET, HEAD, PUT"},
		{"POST", "/v1/queues", "GET, HEAD"},
	} {
		r := e.send("", tc.method, tc.path, "")
		require.Equal(t, http.StatusMethodNotAllowed, r.status, "%s %s: %s", tc.method, tc.path, r.body)
		require.Equal(t, tc.allow, r.header.Get("Allow"))
	}
	r := e.do("HEAD", "/healthz", "")
	require.Equal(t, http.StatusOK, r.status)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	e := setup(t, setupOpts{cfg: api.Config{AuthToken: token, Metrics: okHandler("metrics"),
		Dashboard: okHandler("dashboard")}})
	for _, path := range []string{"/v1/queues", "/v1/jobs/x", e.jobs() + "/x", "/v1/throughput", "/metrics", "/v1/nope"} {
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Basic " + token, token} {
			var hdr []string
			if auth != "" {
				hdr = append(hdr, "Authorization: "+auth)
			}
			r := e.do("GET", path, "", hdr...)
			require.Equal(t, http.StatusUnauthorized, r.status, "%s with %q: %s", path, auth, r.body)
			ae := r.apiErr(t)
			require.Equal(t, api.CodeUnauthorized, ae.Code)
			require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer")
			// A bearer token that is not the API's is told apart from none (no more than that),
			// and the message is one clean sentence.
			if strings.HasPrefix(auth, "Bearer ") {
				require.True(t, strings.HasPrefix(ae.Message, "invalid token"), "%s with %q: %s", path, auth, ae.Message)
				require.Contains(t, r.header.Get("WWW-Authenticate"), `error="invalid_token"`)
			} else {
				require.True(t, strings.HasPrefix(ae.Message, "missing token"), "%s with %q: %s", path, auth, ae.Message)
				require.NotContains(t, r.header.Get("WWW-Authenticate"), "error=")
			}
			require.NotRegexp(t, `[.;:,]\s*[.;:,]|[;,]$`, ae.Message)
		}
	}
	// A POST without the token writes nothing.
	r := e.do("POST", e.jobs(), `{"type":"echo"}`)
	require.Equal(t, http.StatusUnauthorized, r.status)
	st, err := e.insp.Stats(t.Context(), e.queue)
	require.NoError(t, err)
	require.Zero(t, st.Enqueued)

	bearer := "Authorization: Bearer " + token
	r = e.do("POST", e.jobs(), `{"type":"echo"}`, bearer)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	r = e.do("GET", "/v1/queues", "", bearer)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = e.do("GET", "/metrics", "", bearer)
	require.Equal(t, "metrics", string(r.body))

	// Open without a token: health, the document, the dashboard's files.
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/v1/openapi.json": 200, "/": 200, "/ui/app.js": 200} {
		r := e.do("GET", path, "")
		require.Equal(t, want, r.status, "%s: %s", path, r.body)
	}
}

// okHandler answers 200 with body.
func okHandler(body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) })
}

func TestCrossSite(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.seed(status.Failed)
	host := strings.TrimPrefix(e.http.URL, "http://")

	// Bodiless mutating requests need X-Conveyor-Request: 1.
	for _, tc := range []struct{ method, path string }{
		{"DELETE", e.jobs() + "/" + id},
		{"POST", "/v1/queues/" + e.queue + "/dead/" + id + "/replay"},
		{"POST", "/v1/queues/" + e.queue + "/dead:replay"},
		{"DELETE", "/v1/queues/" + e.queue + "/dead/" + id},
		{"DELETE", "/v1/queues/" + e.queue + "?force=true"},
	} {
		for _, hdr := range [][]string{nil, {"X-Conveyor-Request: yes"}} {
			r := e.request(tc.method, tc.path, "", hdr...)
			require.Equal(t, http.StatusForbidden, r.status, "%s %s %v: %s", tc.method, tc.path, hdr, r.body)
			require.Equal(t, api.CodeForbidden, r.apiErr(t).Code)
		}
	}
	// A form post from a page is not JSON: refused, nothing written.
	r := e.request("POST", e.jobs(), "type=echo", "Content-Type: application/x-www-form-urlencoded", "Origin: http://evil.example")
	require.Equal(t, http.StatusUnsupportedMediaType, r.status, "%s", r.body)
	// Another site's Origin is refused even with the right headers.
	for _, origin := range []string{"http://evil.example", "null", "http://" + host + ".evil.example"} {
		r = e.do("POST", e.jobs(), `{"type":"echo"}`, "Origin: "+origin)
		require.Equal(t, http.StatusForbidden, r.status, "%s: %s", origin, r.body)
		r = e.do("DELETE", e.jobs()+"/"+id, "", "Origin: "+origin)
		require.Equal(t, http.StatusForbidden, r.status, "%s: %s", origin, r.body)
	}
	st, err := e.insp.Stats(t.Context(), e.queue)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Dead, "nothing changed")
	require.EqualValues(t, 1, st.Enqueued)

	// The same origin passes; a JSON body needs no extra header.
	r = e.request("POST", e.jobs(), `{"type":"echo"}`, "Content-Type: application/json", "Origin: http://"+host)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	r = e.request("POST", "/v1/queues/"+e.queue+"/dead/"+id+"/replay", "", "X-Conveyor-Request: 1", "Origin: http://"+host)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	// GETs need nothing.
	r = e.request("GET", e.jobs()+"/"+id, "", "Origin: http://evil.example")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Empty(t, r.header.Get("Access-Control-Allow-Origin"), "no CORS")
}

// Every mutating method is held to the cross-site rule, PUT and PATCH as well as POST and
// DELETE: a PUT of a limit or of group weights with a JSON body from another site's Origin is
// refused, and nothing is stored.
func TestCrossSiteEveryMutatingMethod(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.post(`{"type":"echo"}`, http.StatusAccepted)
	for _, tc := range []struct{ path, body string }{
		{"/v1/queues/" + e.queue + "/limits", `{"concurrency":1}`},
		{"/v1/queues/" + e.queue + "/groups", `{"weights":{"tenant":3}}`},
	} {
		for _, origin := range []string{"http://evil.example", "null"} {
			r := e.do("PUT", tc.path, tc.body, "Origin: "+origin)
			require.Equal(t, http.StatusForbidden, r.status, "PUT %s from %s: %s", tc.path, origin, r.body)
			require.Equal(t, api.CodeForbidden, r.apiErr(t).Code)
		}
		// Without the JSON type or the header: refused as a write a page could send.
		r := e.request("PUT", tc.path, tc.body, "Content-Type: text/plain")
		require.Equal(t, http.StatusForbidden, r.status, "PUT %s as text/plain: %s", tc.path, r.body)
	}
	ls, err := e.insp.Limits(t.Context(), e.queue)
	require.NoError(t, err)
	require.Empty(t, ls, "no limit stored")
	gs, err := e.insp.Groups(t.Context(), e.queue)
	require.NoError(t, err)
	require.Empty(t, gs.Groups, "no weight stored")
}

// With Redis gone, /readyz and every Redis-backed route answer 503 "Redis is unreachable",
// without Redis's own error text but with the operation that failed (op); /healthz stays 200.
func TestRedisUnreachable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	e := setup(t, setupOpts{rdb: rdb})
	id := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID
	require.Equal(t, http.StatusOK, e.do("GET", "/readyz", "").status)
	require.NoError(t, srv.Stop())

	r := e.do("GET", "/healthz", "")
	require.Equal(t, http.StatusOK, r.status)
	for _, tc := range []struct{ method, path, body, op string }{
		{"GET", "/readyz", "", "ping"},
		{"POST", e.jobs(), `{"type":"echo"}`, "enqueue"},
		{"POST", e.jobs() + ":batch", `{"jobs":[{"type":"echo"},{"type":"echo"}]}`, "enqueue"},
		// The Client's route cache (5 s) may have expired on a loaded machine: then the
		// partition count is read first, as below.
		{"GET", e.jobs() + "/" + id + "?wait=1s", "", "get|queues"},
		// Which partitions the queue has is read first (a GET without wait is the
		// Inspector's, with the job's waiting_for).
		{"GET", e.jobs() + "/" + id, "", "queues"},
		{"DELETE", e.jobs() + "/" + id, "", "queues"},
		{"GET", "/v1/jobs/" + id, "", "queues"},
		{"GET", "/v1/queues", "", "queues"},
		{"GET", e.jobs() + "?status=queued", "", "queues"},
	} {
		r := e.do(tc.method, tc.path, tc.body)
		require.Equal(t, http.StatusServiceUnavailable, r.status, "%s %s: %s", tc.method, tc.path, r.body)
		ae := r.apiErr(t)
		require.Equal(t, api.CodeUnavailable, ae.Code)
		require.Contains(t, ae.Message, "Redis is unreachable")
		require.Contains(t, strings.Split(tc.op, "|"), ae.Op, "%s %s: %s", tc.method, tc.path, r.body)
		for _, leak := range []string{"dial", "refused", "127.0.0.1", "tcp", "goroutine"} {
			require.NotContains(t, string(r.body), leak)
		}
	}
	require.Contains(t, e.log.String(), `"level":"error"`, "the cause is logged")
	require.Contains(t, e.log.String(), "connection refused")
}

// A Redis that refuses writes (out of memory) answers a publish 503 with the operation it
// refused (op "enqueue"), by the error's kind and op, not its text; reads still go through.
func TestRedisRefusingCarriesOp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	e := setup(t, setupOpts{rdb: srv.Client(t)})
	id := e.post(`{"type":"echo"}`, http.StatusAccepted).job(t).ID // the queue is known
	restore := srv.RefuseWrites(t)
	defer restore()

	r := e.do("POST", e.jobs(), `{"type":"echo"}`)
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.body)
	ae := r.apiErr(t)
	require.Equal(t, api.CodeUnavailable, ae.Code)
	require.Equal(t, "enqueue", ae.Op)
	require.Contains(t, ae.Message, "out of memory")
	require.NotContains(t, string(r.body), "maxmemory", "Redis's own text stays in the log")
	require.Equal(t, http.StatusOK, e.do("GET", e.jobs()+"/"+id, "").status)
}

// Many long polls share one Client's waits: 200 requests waiting at once use at most
// DefaultPollConcurrency (the Client's bound on wait reads, 4) Redis connections plus the
// queue's events subscription, and each is answered with its job completed.
func TestManyWaitersShareConnections(t *testing.T) {
	t.Parallel()
	const waiters = 200
	// The Client (which long polls read through) gets a connection pool of its own, counted;
	// the Inspector (the throughput sampler's) another.
	srv := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	dials := redistest.CountCommands(rdb)
	e := setup(t, setupOpts{clientRdb: rdb})

	// Publish through another connection, so that the API's count only has the polls.
	ids := e.enqueueN(redistest.Client(t), waiters)
	answers := e.longPolls(ids, "60s")
	require.Eventually(t, func() bool { return e.api.Waiting() == waiters }, 30*time.Second, 10*time.Millisecond,
		"every request waits")
	waitingDials := dials.Dials()

	e.worker()
	results, _ := answers()
	for i := range ids {
		require.Equal(t, "completed", results[i].Status)
		require.Equal(t, ids[i], results[i].ID)
	}
	t.Logf("Redis connections opened by the API: %d while %d requests waited, %d in all (pool: %+v)",
		waitingDials, waiters, dials.Dials(), *rdb.PoolStats())
	require.LessOrEqual(t, dials.Dials(), int64(api.DefaultPollConcurrency)+1)
}

// Close answers every long poll at once with its job as it is; later polls do not wait.
func TestCloseEndsLongPolls(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID
	done := make(chan apiResp, 1)
	go func() {
		req, _ := http.NewRequest("GET", e.http.URL+e.jobs()+"/"+id+"?wait=60s", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- apiResp{status: -1}
			return
		}
		defer res.Body.Close()
		var r apiResp
		r.status = res.StatusCode
		r.body, _ = io.ReadAll(res.Body)
		done <- r
	}()
	require.Eventually(t, func() bool { return e.api.Waiting() == 1 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, e.api.Close())
	r := <-done
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, "scheduled", r.job(t).Status)

	r = e.do("GET", e.jobs()+"/"+id+"?wait=60s", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, "scheduled", r.job(t).Status)
}

// Every request is logged at debug with its method, path, status and duration (with a unit).
func TestRequestLog(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.do("GET", "/v1/queues/"+e.queue+"/jobs/nope", "")
	log := e.log.String()
	require.Regexp(t, `"level":"debug","method":"GET","path":"/v1/queues/[^"]+/jobs/nope","route":"/v1/queues/\{queue\}/jobs/\{id\}","status":404,"duration":"[0-9.]+(µs|ms|s)"`, log)
}

// A Server that served long polls and throughput leaves no goroutine once closed. Not
// parallel: IgnoreCurrent must see a quiet package.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	e := setup(t, setupOpts{rdb: rdb, cfg: api.Config{ThroughputInterval: 20 * time.Millisecond}})
	e.http.Config.SetKeepAlivesEnabled(false)
	before := leaktest.IgnoreCurrent()
	id := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID
	require.Equal(t, http.StatusOK, e.do("GET", e.jobs()+"/"+id+"?wait=100ms", "").status)
	require.Equal(t, http.StatusOK, e.do("GET", "/v1/throughput", "").status)
	require.NoError(t, e.api.Close())
	e.http.Client().CloseIdleConnections()
	e.http.Close()
	require.NoError(t, rdb.Close())
	leaktest.Verify(t, before)
}

// An unusable Config is refused with an error wrapping pipeline.ErrInvalid, the convention of
// every config in Conveyor, and one that names the field.
func TestNewRefusesInvalidConfig(t *testing.T) {
	rdb := redistest.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	for name, cfg := range map[string]api.Config{
		"MaxBodyBytes":     {MaxBodyBytes: -1},
		"PollConcurrency":  {PollConcurrency: -1},
		"ThroughputWindow": {ThroughputWindow: 2 * time.Hour},
		"AllowedHosts":     {AllowedHosts: []string{"http://proxy.example/"}},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := api.New(client, insp, cfg)
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			require.ErrorContains(t, err, name)
			require.Nil(t, s)
		})
	}
}

// DNS rebinding: a page of evil.example whose name the attacker re-points at 127.0.0.1 sends
// requests that carry Host and Origin of evil.example, which agree with each other. Without a
// token, a Host that is not loopback (nor allowed) is refused with 421 before anything is read
// or written.
func TestDNSRebinding(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(e.http.URL, "http://"))
	require.NoError(t, err)
	evil := "evil.example:" + port
	id := e.seed(status.Failed)
	before := redisContents(t, e)

	r := e.hostRequest(evil, "POST", e.jobs(), `{"type":"http","payload":{"url":"http://169.254.169.254/"}}`,
		"Origin: http://"+evil)
	require.Equal(t, http.StatusMisdirectedRequest, r.status, "%s", r.body)
	require.Equal(t, "misdirected_request", r.apiErr(t).Code)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/v1/queues"},
		{"GET", e.jobs() + "/" + id},
		{"GET", "/v1/jobs/" + id},
		{"DELETE", "/v1/queues/" + e.queue + "/dead/" + id},
		{"POST", "/v1/queues/" + e.queue + "/dead:replay"},
		{"PUT", "/v1/queues/made-up"},
		{"GET", "/v1/nope"},
	} {
		r := e.hostRequest(evil, tc.method, tc.path, "", "Origin: http://"+evil)
		require.Equal(t, http.StatusMisdirectedRequest, r.status, "%s %s: %s", tc.method, tc.path, r.body)
		require.NotContains(t, string(r.body), id, "%s %s", tc.method, tc.path)
	}
	require.Equal(t, before, redisContents(t, e), "the refused requests wrote nothing")

	// Loopback names and addresses pass, as do health checks from anywhere.
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "127.1.2.3:" + port, "[::1]:" + port, "localhost."} {
		r := e.hostRequest(host, "GET", "/v1/queues", "")
		require.Equal(t, http.StatusOK, r.status, "%s: %s", host, r.body)
	}
	for _, host := range []string{"localhost.evil.example", "127.0.0.1.evil.example", "[::2]:" + port, "0x7f000001"} {
		r := e.hostRequest(host, "GET", "/v1/queues", "")
		require.Equal(t, http.StatusMisdirectedRequest, r.status, "%q: %s", host, r.body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		r := e.hostRequest(evil, "GET", path, "")
		require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
	}

	t.Run("AllowedHosts", func(t *testing.T) {
		t.Parallel()
		e := setup(t, setupOpts{cfg: api.Config{AllowedHosts: []string{"Proxy.Example:443", "10.0.0.7"}}})
		for host, want := range map[string]int{"proxy.example": 200, "proxy.example.:8080": 200, "10.0.0.7:80": 200,
			"localhost:1": 200, "evil.example": 421, "sub.proxy.example": 421} {
			r := e.hostRequest(host, "GET", "/v1/queues", "")
			require.Equal(t, want, r.status, "%s: %s", host, r.body)
		}
		e = setup(t, setupOpts{cfg: api.Config{AllowedHosts: []string{"*"}}})
		require.Equal(t, http.StatusOK, e.hostRequest("evil.example", "GET", "/v1/queues", "").status)
	})
	// With a token the Host is not checked: the token is what a rebinding page cannot send.
	t.Run("Token", func(t *testing.T) {
		t.Parallel()
		e := setup(t, setupOpts{cfg: api.Config{AuthToken: "tok"}})
		require.Equal(t, http.StatusUnauthorized, e.hostRequest(evil, "GET", "/v1/queues", "").status)
		require.Equal(t, http.StatusOK, e.hostRequest(evil, "GET", "/v1/queues", "", "Authorization: Bearer tok").status)
	})
}

// redisContents is every key under the env's prefix with its DUMP, and the members of the
// known-queues set.
func redisContents(t *testing.T, e *apiEnv) map[string]string {
	t.Helper()
	out := map[string]string{}
	iter := e.rdb.Scan(t.Context(), 0, e.prefix+"*", 1000).Iterator()
	for iter.Next(t.Context()) {
		v, err := e.rdb.Dump(t.Context(), iter.Val()).Result()
		require.NoError(t, err, iter.Val())
		out[iter.Val()] = v
	}
	require.NoError(t, iter.Err())
	return out
}
