package cli

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/pipeline"
)

func init() { addCommand(newServeCmd) }

const (
	envAPIToken = "CONVEYOR_API_TOKEN"
	envAPIAddr  = "CONVEYOR_API_ADDR"
	// envAPIAllowedHosts is --allowed-host's variable: names separated by commas.
	envAPIAllowedHosts = "CONVEYOR_API_ALLOWED_HOSTS"
	envAPIMaxQueues    = "CONVEYOR_API_MAX_QUEUES"
	envAPICreateQueues = "CONVEYOR_API_CREATE_QUEUES"
	// envPayloadToken is --payload-token's variable.
	envPayloadToken  = "CONVEYOR_PAYLOAD_TOKEN"
	defaultServeAddr = "127.0.0.1:8080"
	// probeTimeout bounds `serve --probe`.
	probeTimeout = 3 * time.Second
)

// HTTP server limits of `serve`. WriteTimeout is the long-poll bound plus writeSlack.
const (
	serveReadHeaderTimeout = 10 * time.Second
	serveReadTimeout       = time.Minute // a batch body of up to 16 MiB on a slow link
	serveIdleTimeout       = 2 * time.Minute
	serveMaxHeaderBytes    = 64 << 10
	serveWriteSlack        = 30 * time.Second
	// serveShutdownTimeout bounds the wait for requests in flight at SIGINT or SIGTERM; long
	// polls end at once (api.Server.Close), so this is for the others.
	serveShutdownTimeout = 30 * time.Second
)

type serveFlags struct {
	addr  string
	token string
	// payloadToken is --payload-token: the token whose requests see payloads opened.
	payloadToken string
	insecure     bool
	maxWait      time.Duration
	// maxEventStreams bounds the event streams open at once (api.Config.MaxEventStreams).
	maxEventStreams int
	probe           string
	// allowedHosts are --allowed-host's names; check adds --addr's host to them.
	allowedHosts []string
	maxQueues    int
	maxSchedules int
	createQueues bool
	// warnWindow is --warn-window: how far back a publish is checked for a worker
	// (InspectorConfig.PublishWarningWindow).
	warnWindow time.Duration

	tokenGiven, addrGiven, allowedGiven, maxQueuesGiven, createGiven bool
	payloadTokenGiven                                                bool
	maxSchedulesGiven                                                bool
}

func newServeCmd(a *app) *cobra.Command {
	var sf serveFlags
	cmd := &cobra.Command{
		Use:   "serve [--addr host:port] [--auth-token T]",
		Short: "Serve the HTTP API and the dashboard until SIGINT or SIGTERM",
		Long: `Serve the HTTP API (/v1: publish jobs, poll them with ?wait=, inspect queues, replay and
purge dead jobs; see docs/API.md), /healthz, /readyz and the web dashboard at /.

With --auth-token (or $` + envAPIToken + `; the flag wins) every API call needs the header
"Authorization: Bearer <token>". Without a token the API is open to anyone who can reach it, so
serve then listens on a loopback address only (the default, ` + defaultServeAddr + `) and refuses
any other --addr unless --insecure says so (a proxy in front that authenticates, say).
Prefer the environment variable to the flag: a flag's value shows in the process list.
Without a token serve also answers only requests whose Host is a loopback name (localhost,
127.0.0.1, [::1]), --addr's host or an --allowed-host (a reverse proxy's name); others get 421,
so that a web page which points its own name at this address (DNS rebinding) gets nothing.

A POST to a queue that does not exist creates it, up to --max-queues known queues (then 409:
every queue costs on every listing and in /metrics); with --create-queues=false it gets 404
until the queue is created (PUT /v1/queues/Q or conveyor queues create Q).

GET /metrics (behind the token too) serves Prometheus metrics: every queue's jobs by state and
its counters, read from Redis at most every 5s however often it is scraped.

Long polls (GET /v1/queues/Q/jobs/ID?wait=30s) wait at most --max-wait. On SIGINT or SIGTERM
serve stops accepting connections, answers waiting long polls with their jobs as they are,
lets other requests finish, and exits 0.

--probe URL serves nothing: it GETs URL and exits 0 on a 2xx answer, 1 otherwise, for container
health checks in images without curl (conveyor serve --probe http://127.0.0.1:8080/readyz).`,
		Example: `  conveyor serve
  CONVEYOR_API_TOKEN=$(openssl rand -hex 32) conveyor serve --addr :8080
  conveyor serve --addr 0.0.0.0:8080 --insecure --allowed-host jobs.example.com   # behind an authenticating proxy
  conveyor serve --create-queues=false   # publish only to queues made by conveyor queues create`,
		Args:        noArgs,
		Annotations: map[string]string{annotationEndsOnSignal: ""},
		RunE: func(cmd *cobra.Command, _ []string) error {
			sf.tokenGiven = cmd.Flags().Changed("auth-token")
			sf.payloadTokenGiven = cmd.Flags().Changed("payload-token")
			sf.addrGiven = cmd.Flags().Changed("addr")
			sf.allowedGiven = cmd.Flags().Changed("allowed-host")
			sf.maxQueuesGiven = cmd.Flags().Changed("max-queues")
			sf.maxSchedulesGiven = cmd.Flags().Changed("max-schedules")
			sf.createGiven = cmd.Flags().Changed("create-queues")
			if cmd.Flags().Changed("probe") {
				return probe(cmd.Context(), sf.probe)
			}
			return a.serve(cmd.Context(), &sf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sf.addr, "addr", defaultServeAddr, "address to listen on, host:port (a non-loopback host needs a token or --insecure); env $"+envAPIAddr)
	f.StringVar(&sf.token, "auth-token", "", "API token that requests must send as Authorization: Bearer <token>; env $"+envAPIToken)
	f.StringVar(&sf.payloadToken, "payload-token", "", "with --keys, a second API token whose requests see payloads and results "+
		"opened; every other caller sees \"<encrypted, N bytes, key K>\"; env $"+envPayloadToken)
	f.BoolVar(&sf.insecure, "insecure", false, "allow a non-loopback --addr without a token")
	f.StringArrayVar(&sf.allowedHosts, "allowed-host", nil, "without a token, also answer requests whose Host is this name "+
		"(a reverse proxy's; repeatable; \"*\" for any); others but loopback get 421; env $"+envAPIAllowedHosts+", comma-separated")
	f.IntVar(&sf.maxQueues, "max-queues", defaultMaxQueues, "most known queues: a POST or PUT to a new queue past it "+
		"gets 409 (too_many_queues); env $"+envAPIMaxQueues)
	f.IntVar(&sf.maxSchedules, "max-schedules", defaultMaxSchedules, "most stored schedules: a POST /v1/schedules of a new "+
		"schedule past it gets 409 (too_many_schedules)")
	f.BoolVar(&sf.createQueues, "create-queues", true, "a POST to a queue that does not exist creates it; false: 404 until "+
		"it is created (PUT /v1/queues/Q, conveyor queues create); env $"+envAPICreateQueues)
	f.DurationVar(&sf.warnWindow, "warn-window", pipeline.DefaultPublishWarningWindow, "a publish to a queue no live worker "+
		"has read in this long, or of a type none has handled, is answered with warnings (at most 24h)")
	f.DurationVar(&sf.maxWait, "max-wait", api.DefaultMaxWait, "longest long poll (GET ...?wait=)")
	f.IntVar(&sf.maxEventStreams, "max-event-streams", api.DefaultMaxEventStreams, "most job event streams "+
		"(GET .../jobs/ID/events) open at once, about 40 KB each; past it 503 with Retry-After")
	f.StringVar(&sf.probe, "probe", "", "serve nothing: GET this URL and exit 0 on a 2xx answer, 1 otherwise (container health checks)")
	return cmd
}

// probe GETs url: nil on a 2xx answer.
func probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil || req.URL.Host == "" {
		return usageErrorf("--probe %q: want an http:// URL, such as http://%s/readyz", url, defaultServeAddr)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		// %v, not %w: a refused connection here is not Redis's, which describe would say.
		return fmt.Errorf("probe %s: %v", url, err)
	}
	_ = res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("probe %s: %s", url, res.Status)
	}
	return nil
}

// check validates the flags and returns the token to use; every error is a usage error.
func (sf *serveFlags) check(getenv func(string) string) (token string, loopback bool, err error) {
	token = getenv(envAPIToken)
	if sf.tokenGiven {
		token = sf.token
	}
	if v := getenv(envPayloadToken); v != "" && !sf.payloadTokenGiven {
		sf.payloadToken = v
	}
	if addr := getenv(envAPIAddr); addr != "" && !sf.addrGiven {
		sf.addr = addr
	}
	if hosts := getenv(envAPIAllowedHosts); hosts != "" && !sf.allowedGiven {
		sf.allowedHosts = nil
		for h := range strings.SplitSeq(hosts, ",") {
			if h = strings.TrimSpace(h); h != "" {
				sf.allowedHosts = append(sf.allowedHosts, h)
			}
		}
	}
	var errs []error
	maxQueuesSet := sf.maxQueuesGiven
	if v := getenv(envAPIMaxQueues); v != "" && !sf.maxQueuesGiven {
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, usageErrorf("$%s %q is not a number", envAPIMaxQueues, v))
		}
		sf.maxQueues, maxQueuesSet = n, true
	}
	if v := getenv(envAPICreateQueues); v != "" && !sf.createGiven {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, usageErrorf("$%s %q: want true or false", envAPICreateQueues, v))
		}
		sf.createQueues = b
	}
	// Unset (0, from a caller that builds serveFlags itself) means the library's default.
	if sf.maxSchedulesGiven && sf.maxSchedules < 1 {
		errs = append(errs, usageErrorf("--max-schedules must be at least 1, not %d", sf.maxSchedules))
	}
	if maxQueuesSet && sf.maxQueues < 1 {
		errs = append(errs, usageErrorf("--max-queues must be at least 1, not %d", sf.maxQueues))
	}
	if err := checkWarnWindow(sf.warnWindow); err != nil {
		errs = append(errs, err)
	}
	if sf.maxEventStreams < 0 {
		errs = append(errs, usageErrorf("--max-event-streams must not be negative, not %d (0: the default, %d)", sf.maxEventStreams, api.DefaultMaxEventStreams))
	}
	if sf.maxWait <= 0 {
		errs = append(errs, usageErrorf("--max-wait must be positive, not %s", sf.maxWait))
	}
	host, err := checkHostPort("--addr", sf.addr, defaultServeAddr)
	if err != nil {
		errs = append(errs, err)
	}
	for _, h := range sf.allowedHosts {
		if h == "" || strings.ContainsAny(h, "/@ \t") {
			errs = append(errs, usageErrorf("--allowed-host %q: want a host name or address, such as conveyor.example.com", h))
		}
	}
	if len(errs) > 0 {
		return "", false, errors.Join(errs...)
	}
	// The host --addr names is the one clients use, unless it is every interface's.
	if ip, err := netip.ParseAddr(host); host != "" && (err != nil || !ip.IsUnspecified()) {
		sf.allowedHosts = append(sf.allowedHosts, host)
	}
	loopback = isLoopback(host)
	if !loopback && token == "" && !sf.insecure {
		where := host
		if where == "" {
			where = "every interface"
		}
		return "", false, usageErrorf("--addr %s listens on %s without an API token: anyone who can reach it could publish, "+
			"cancel and purge jobs; set --auth-token or $%s, listen on 127.0.0.1, or pass --insecure "+
			"(an authenticating proxy in front, say)", sf.addr, where, envAPIToken)
	}
	return token, loopback, nil
}

// isLoopback reports whether host (of host:port) is a loopback address: "localhost" or a
// loopback IP. Any other name counts as not loopback: it may resolve elsewhere.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func (a *app) serve(ctx context.Context, sf *serveFlags) error {
	token, loopback, err := sf.check(a.getenv)
	if err != nil {
		return err
	}
	rdb, err := a.redis()
	if err != nil {
		return err
	}
	if sf.payloadToken != "" && a.keys == nil {
		return usageErrorf("--payload-token needs --keys (or $%s): without the keys there is nothing it could open", envKeys)
	}
	if sf.payloadToken != "" && sf.payloadToken == token {
		return usageErrorf("--payload-token is the --auth-token: every caller would see payloads")
	}
	// The Client seals what the API publishes and reads jobs sealed: the server opens them
	// per request, for the payload token only.
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: a.prefix, MaxQueues: sf.maxQueues,
		RequireQueues: !sf.createQueues, Keys: a.keys, KeepSealed: true})
	if err != nil {
		return err
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: a.prefix, MaxQueues: sf.maxQueues,
		MaxSchedules: sf.maxSchedules, PublishWarningWindow: sf.warnWindow})
	if err != nil {
		return err
	}
	a.warnEviction(ctx)
	log := a.log.With().Str("component", "api").Logger()
	reg, err := metricsRegistry(insp, nil)
	if err != nil {
		return err
	}
	srv, err := api.New(client, insp, api.Config{AuthToken: token, PayloadToken: sf.payloadToken, Keys: a.keys, AllowedHosts: sf.allowedHosts, MaxWait: sf.maxWait, MaxEventStreams: sf.maxEventStreams, Logger: log,
		Dashboard: api.Dashboard(), Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", sf.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w; is another server using the port?", sf.addr, stripNetPrefix(err))
	}
	hs := newHTTPServer(srv, sf.maxWait, log)
	// Shutdown runs this once the listener is closed: long polls answer at once instead of
	// holding Shutdown for up to --max-wait.
	hs.RegisterOnShutdown(func() { _ = srv.Close() })

	if !loopback && token == "" {
		log.Warn().Str("addr", ln.Addr().String()).
			Msg("serving without an API token on a non-loopback address (--insecure): anyone who can reach it can publish, cancel and purge jobs")
	}
	log.Info().Str("addr", ln.Addr().String()).Str("url", "http://"+ln.Addr().String()+"/").
		Bool("auth", token != "").Str("redis", redactURL(a.redisURL)).Str("max_wait", sf.maxWait.String()).
		Int("max_queues", sf.maxQueues).Bool("create_queues", sf.createQueues).
		Msg("serving the HTTP API and dashboard; SIGINT or SIGTERM stops it")

	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	log.Info().Msg("shutting down: answering long polls and finishing requests")
	sctx, cancel := context.WithTimeout(context.Background(), serveShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn().Err(err).Str("timeout", serveShutdownTimeout.String()).Msg("requests still running at the shutdown timeout; closing them")
		_ = hs.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	}
	log.Info().Msg("stopped")
	return nil
}

// newHTTPServer returns serve's http.Server for h: its timeouts and limits, with net/http's own
// messages going to log.
func newHTTPServer(h http.Handler, maxWait time.Duration, log zerolog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: serveReadHeaderTimeout,
		ReadTimeout:       serveReadTimeout,
		WriteTimeout:      maxWait + serveWriteSlack,
		IdleTimeout:       serveIdleTimeout,
		MaxHeaderBytes:    serveMaxHeaderBytes,
		ErrorLog:          stdlog.New(httpLogWriter{log}, "", 0),
	}
}

// stripNetPrefix drops the "listen tcp 127.0.0.1:8080: " of a listen error, which the message
// names already.
func stripNetPrefix(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

// httpLogWriter gives net/http's own messages (a TLS handshake error, an accept error) to the
// logger at warn level.
type httpLogWriter struct{ log zerolog.Logger }

func (w httpLogWriter) Write(p []byte) (int, error) {
	w.log.Warn().Str("source", "net/http").Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}
