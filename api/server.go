package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/doctor"
	"github.com/conveyorq/conveyor/pipeline"
)

// Server is the HTTP API: an http.Handler to mount in a server of your own, plus Close for its
// background work. It answers the paths it documents, from the root. It is safe for concurrent
// use.
type Server struct {
	client    *pipeline.Client
	inspector *pipeline.Inspector
	doc       *doctor.Doctor // over client's Redis and prefix: GET /v1/doctor and /v1/redis
	cfg       Config
	log       zerolog.Logger
	token     [sha256.Size]byte // of cfg.AuthToken
	payload   [sha256.Size]byte // of cfg.PayloadToken
	hosts     map[string]bool   // cfg.AllowedHosts, normalized (hostName); nil: every Host
	mux       *http.ServeMux
	routes    []route

	waits     *poller
	sightings sightingsCache // the workers' sightings, for publish warnings
	streams   atomic.Int64   // event streams open now (Config.MaxEventStreams)
	closed    atomic.Bool
}

// New returns the API over client (publishing, reading and cancelling jobs) and inspector
// (listing, replaying, purging, statistics). Both must use the same Redis and key prefix. It
// returns an error for a nil client or inspector and for an unusable config.
//
// Call Close when the server that mounts the handler shuts down: it ends the long polls at once
// (each answers with its job as it is).
func New(client *pipeline.Client, inspector *pipeline.Inspector, cfg Config) (*Server, error) {
	if client == nil || inspector == nil {
		return nil, errors.New("api: New needs a pipeline.Client and a pipeline.Inspector")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	doc, err := doctor.New(client.Redis(), doctor.Config{Prefix: client.Prefix()})
	if err != nil {
		return nil, err
	}
	s := &Server{client: client, inspector: inspector, doc: doc, cfg: cfg, log: cfg.Logger, mux: http.NewServeMux()}
	if cfg.AuthToken != "" {
		s.token = sha256.Sum256([]byte(cfg.AuthToken))
	}
	if cfg.PayloadToken != "" {
		s.payload = sha256.Sum256([]byte(cfg.PayloadToken))
	}
	if !slices.Contains(cfg.AllowedHosts, "*") {
		s.hosts = map[string]bool{}
		for _, h := range cfg.AllowedHosts {
			s.hosts[hostName(h)] = true
		}
	}
	s.waits = newPoller(client.NewWaiter(), s.log.With().Str("component", "long_poll").Logger())
	s.sightings = sightingsCache{read: inspector.Sightings, now: time.Now}
	s.routes = s.table()
	s.register()
	return s, nil
}

// Close ends every long poll at once, and waits for them. Each answers 200 with its job as it
// is, and later polls do not wait. Requests are still served after Close, without waiting. It is
// idempotent.
//
// With an http.Server, call it when shutting down, before or alongside Shutdown. For instance,
// use RegisterOnShutdown. Then Shutdown does not wait for long polls to end by themselves.
func (s *Server) Close() error {
	s.closed.Store(true)
	s.waits.close()
	return nil
}

// ServeHTTP answers a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// access says who may call a route.
type access uint8

const (
	open   access = iota // anyone: health checks, the dashboard's files
	authed               // the bearer token, when one is configured
)

// route is one method and path of the API; the OpenAPI document lists the same ones.
type route struct {
	method, pattern string
	access          access
	handle          func(http.ResponseWriter, *http.Request) error
}

// table lists every route. A route's handler returns an error to answer it with.
func (s *Server) table() []route {
	rs := []route{
		{"GET", "/healthz", open, s.healthz},
		{"GET", "/readyz", open, s.readyz},
		{"GET", "/v1/openapi.json", open, s.openapi},
		{"GET", "/v1/openapi-3.0.json", open, s.openapi30},
		{"GET", "/v1/queues", authed, s.listQueues},
		{"GET", "/v1/queues/{queue}", authed, s.queueStats},
		{"PUT", "/v1/queues/{queue}", authed, s.createQueue},
		{"DELETE", "/v1/queues/{queue}", authed, s.deleteQueue},
		{"POST", "/v1/queues/{queue}/pause", authed, s.pauseQueue},
		{"POST", "/v1/queues/{queue}/resume", authed, s.resumeQueue},
		{"GET", "/v1/queues/{queue}/limits", authed, s.listLimits},
		{"PUT", "/v1/queues/{queue}/limits", authed, s.setLimit},
		{"DELETE", "/v1/queues/{queue}/limits", authed, s.deleteLimit},
		{"GET", "/v1/queues/{queue}/groups", authed, s.listGroups},
		{"PUT", "/v1/queues/{queue}/groups", authed, s.setGroups},
		{"GET", "/v1/queues/{queue}/settings", authed, s.queueSettings},
		{"PATCH", "/v1/queues/{queue}/settings", authed, s.updateQueue},
		{"POST", "/v1/queues/{queue}/jobs", authed, s.enqueue},
		{"GET", "/v1/queues/{queue}/jobs", authed, s.listJobs},
		{"POST", "/v1/queues/{queue}/jobs:batch", authed, s.enqueueBatch},
		{"GET", "/v1/queues/{queue}/jobs/{id}", authed, s.getJob},
		{"GET", "/v1/queues/{queue}/jobs/{id}/events", authed, s.jobEvents},
		{"GET", "/v1/queues/{queue}/jobs/{id}/logs", authed, s.jobLogs},
		{"DELETE", "/v1/queues/{queue}/jobs/{id}", authed, s.cancel},
		{"POST", "/v1/queues/{queue}/jobs/{id}/run", authed, s.runNow},
		{"POST", "/v1/queues/{queue}/jobs/{id}/delete", authed, s.deleteJob},
		{"POST", "/v1/queues/{queue}/dead/{id}/replay", authed, s.replay},
		{"DELETE", "/v1/queues/{queue}/dead/{id}", authed, s.purge},
		{"POST", "/v1/queues/{queue}/dead:replay", authed, s.replayAll},
		{"DELETE", "/v1/queues/{queue}/dead", authed, s.purgeAll},
		{"GET", "/v1/jobs", authed, s.listAllJobs},
		{"GET", "/v1/jobs/{id}", authed, s.findJob},
		{"GET", "/v1/throughput", authed, s.throughput},
		{"GET", "/v1/doctor", authed, s.doctor},
		{"GET", "/v1/redis", authed, s.redisInfo},
		{"GET", "/v1/workers", authed, s.listWorkers},
		{"GET", "/v1/schedules", authed, s.listSchedules},
		{"POST", "/v1/schedules", authed, s.createSchedule},
		{"GET", "/v1/schedules/{name}", authed, s.getSchedule},
		{"DELETE", "/v1/schedules/{name}", authed, s.deleteSchedule},
		{"POST", "/v1/schedules/{name}/pause", authed, s.pauseSchedule},
		{"POST", "/v1/schedules/{name}/resume", authed, s.resumeSchedule},
		{"POST", "/v1/queues/{queue}/workflows", authed, s.publishWorkflow},
		{"GET", "/v1/queues/{queue}/workflows", authed, s.listWorkflows},
		{"GET", "/v1/queues/{queue}/workflows/{id}", authed, s.getWorkflow},
		{"POST", "/v1/queues/{queue}/batches", authed, s.publishBatch},
		{"GET", "/v1/keys", authed, s.listKeys},
		{"POST", "/v1/keys/rotate", authed, s.rotateKeys},
	}
	if s.cfg.Metrics != nil {
		rs = append(rs, route{"GET", "/metrics", authed, func(w http.ResponseWriter, r *http.Request) error {
			s.cfg.Metrics.ServeHTTP(w, r)
			return nil
		}})
	}
	return rs
}

// register mounts the routes on the mux. Other methods of each path get a 405 with its Allow
// header. Every other path gets a JSON 404, or the dashboard for GETs outside the API's own
// paths.
func (s *Server) register() {
	allow := map[string][]string{}
	var paths []string
	for _, rt := range s.routes {
		if _, ok := allow[rt.pattern]; !ok {
			paths = append(paths, rt.pattern)
		}
		allow[rt.pattern] = append(allow[rt.pattern], rt.method)
		if rt.method == "GET" {
			allow[rt.pattern] = append(allow[rt.pattern], "HEAD")
		}
		s.mux.Handle(rt.method+" "+rt.pattern, s.wrap(rt))
	}
	for _, p := range paths {
		methods := allow[p]
		slices.Sort(methods)
		header := strings.Join(methods, ", ")
		s.mux.Handle(p, s.wrap(route{"", p, open, func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Allow", header)
			return errorf(http.StatusMethodNotAllowed, CodeMethodNotAllowed,
				"%s is not allowed on %s: use %s", r.Method, r.URL.Path, header)
		}}))
	}
	notFound := func(w http.ResponseWriter, r *http.Request) error {
		return errorf(http.StatusNotFound, CodeNotFound, "no route %s %s: see /v1/openapi.json", r.Method, r.URL.Path)
	}
	s.mux.Handle("/v1/", s.wrap(route{"", "/v1/", authed, notFound}))
	s.mux.Handle("/", s.wrap(route{"", "/", open, func(w http.ResponseWriter, r *http.Request) error {
		if s.cfg.Dashboard != nil && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			s.cfg.Dashboard.ServeHTTP(w, r)
			return nil
		}
		return notFound(w, r)
	}}))
}

// wrap runs a route: it recovers a panic, logs the request, checks the token and the
// cross-site rule, and answers the handler's error.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error().Str("method", r.Method).Str("path", r.URL.Path).
					Str("panic", fmt.Sprint(v)).Bytes("stack", debug.Stack()).Msg("request panicked")
				if !rec.wrote {
					writeJSON(rec, http.StatusInternalServerError, errorBody{&apiError{Code: CodeInternal,
						Message: "internal error; the server's log has the details"}})
				}
			}
			status := rec.status
			if !rec.wrote {
				status = http.StatusOK
			}
			s.log.Debug().Str("method", r.Method).Str("path", r.URL.Path).Str("route", rt.pattern).
				Int("status", status).Str("duration", time.Since(start).Round(time.Microsecond).String()).
				Msg("request")
		}()
		payload, err := s.admit(rt, r)
		if err != nil {
			s.writeError(rec, r, err)
			return
		}
		if s.cfg.Keys != nil {
			rec.jobs, rec.payload = s.hideJob, payload
			if payload {
				rec.jobs = s.openJob
			}
		}
		if err := rt.handle(rec, r); err != nil {
			s.writeError(rec, r, err)
		}
	})
}

// admit checks the Host (without a token) or the token, and, for mutating requests, the
// cross-site rule. payload says the request sent the PayloadToken: it sees payloads opened.
func (s *Server) admit(rt route, r *http.Request) (payload bool, _ error) {
	if s.cfg.PayloadToken != "" && rt.access == authed {
		if got, ok := bearer(r); ok {
			sum := sha256.Sum256([]byte(got))
			payload = subtle.ConstantTimeCompare(sum[:], s.payload[:]) == 1
		}
	}
	return payload, s.admitToken(rt, r, payload)
}

// bearer is the request's bearer token, if it sends one.
func bearer(r *http.Request) (string, bool) {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	got = strings.TrimSpace(got)
	return got, ok && got != ""
}

// admitToken is admit's check of the Host or the token; payload says the PayloadToken was
// sent, which admits as AuthToken does.
func (s *Server) admitToken(rt route, r *http.Request, payload bool) error {
	if rt.access == authed && s.cfg.AuthToken == "" && !s.hostAllowed(r.Host) {
		return errorf(http.StatusMisdirectedRequest, CodeMisdirected,
			"this server does not answer for host %q: without an API token it answers only loopback names "+
				"(localhost, 127.0.0.1, [::1]) and its allowed hosts (conveyor serve --allowed-host), "+
				"which keeps web pages that rebind their own name to this address out", r.Host)
	}
	if rt.access == authed && s.cfg.AuthToken != "" && !payload {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		got = strings.TrimSpace(got)
		if !ok || got == "" {
			return errorf(http.StatusUnauthorized, CodeUnauthorized,
				"missing token: send the API token as the header Authorization: Bearer <token>")
		}
		sum := sha256.Sum256([]byte(got))
		// Hashes first: ConstantTimeCompare leaks the length of what it compares.
		if subtle.ConstantTimeCompare(sum[:], s.token[:]) != 1 {
			// Only "wrong" against "missing" is told: nothing of how it differs.
			return &apiError{Status: http.StatusUnauthorized, Code: CodeUnauthorized, invalidToken: true,
				Message: "invalid token: the bearer token sent is not this API's"}
		}
	}
	// The fallbacks (no method: 405, 404) change nothing, so a method they refuse is told so,
	// not refused as a cross-site write first. Every other method is held to the rule unless
	// it is a safe one: a list of the unsafe ones would leave out the next route's method.
	if rt.method != "" && !safeMethod(r.Method) {
		return crossSite(r)
	}
	return nil
}

// safeMethod reports whether method only reads (RFC 9110's safe methods), so that a page of
// another site gains nothing by sending it.
func safeMethod(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

// hostAllowed reports whether a request naming host (its Host header) may be answered without
// a token: a loopback name or address, or one of Config.AllowedHosts. Only names matter to DNS
// rebinding, but a literal address other than loopback is refused too unless allowed: it names
// an interface that --addr did not choose.
func (s *Server) hostAllowed(host string) bool {
	if s.hosts == nil {
		return true
	}
	name := hostName(host)
	if name == "localhost" || s.hosts[name] {
		return true
	}
	ip, err := netip.ParseAddr(name)
	return err == nil && ip.IsLoopback()
}

// hostName is the host of a Host header or an AllowedHosts entry, compared as DNS does. That is
// without its port or IPv6 brackets, in lower case, without a final dot.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// crossSite refuses a mutating request that a page of another site could have sent. It must
// carry Content-Type: application/json or X-Conveyor-Request: 1. A browser sends either
// cross-site only after a CORS preflight, which this API never grants. An Origin header, when
// present, must name the request's own host.
func crossSite(r *http.Request) error {
	jsonBody := requireJSON(r) == nil
	if !jsonBody && r.Header.Get("X-Conveyor-Request") != "1" {
		if r.Method == http.MethodPost && (r.Header.Get("Content-Type") != "" || r.ContentLength != 0) {
			// A POST with a body that is not JSON: its type is the complaint to make.
			return requireJSON(r)
		}
		return errorf(http.StatusForbidden, CodeForbidden,
			"a %s must carry the header X-Conveyor-Request: 1 (or a JSON body with Content-Type: application/json)", r.Method)
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return errorf(http.StatusForbidden, CodeForbidden,
				"cross-site request refused: Origin %q is not this server (%s)", origin, r.Host)
		}
	}
	return nil
}

// recorder remembers the status a handler answered, for the log.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	// jobs is how the request sees the jobs it is answered with (openJob, hideJob), nil
	// without Config.Keys.
	jobs func(*pipeline.Job) *pipeline.Job
	// payload says the request sent the PayloadToken (with Config.Keys): it sees a job's log
	// lines opened, as its payload (viewLogs).
	payload bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flush, deadlines).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
