package api

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
)

// Defaults of Config.
const (
	// DefaultMaxBodyBytes bounds the body of a one-job POST: the client's default payload limit
	// (pipeline.ClientConfig.MaxPayloadBytes, 1 MiB) and room for the other fields.
	DefaultMaxBodyBytes = 2 << 20
	// DefaultMaxBatchBodyBytes bounds the body of a batch POST.
	DefaultMaxBatchBodyBytes = 16 << 20
	// DefaultMaxWait bounds a long poll (GET ...?wait=).
	DefaultMaxWait = 60 * time.Second
	// DefaultPollInterval was how often the long-poll poller read the jobs that requests wait
	// for.
	//
	// Deprecated: long polls wait on job events (pipeline.Client.Wait); Config.PollInterval is
	// ignored.
	DefaultPollInterval = 100 * time.Millisecond
	// DefaultPollConcurrency was the bound on the poller's reads at once; pipeline.Client.Wait
	// bounds them the same (4), however many requests wait.
	//
	// Deprecated: Config.PollConcurrency is ignored.
	DefaultPollConcurrency = 4
	// DefaultThroughputInterval was how often the throughput sampler read the queues'
	// counters; the history is now the workers' (pipeline.Inspector.History), in buckets of
	// pipeline.HistoryStepFine.
	//
	// Deprecated: Config.ThroughputInterval is ignored.
	DefaultThroughputInterval = 5 * time.Second
	// DefaultThroughputWindow is how far back GET /v1/throughput reaches at the 5 s
	// resolution unless asked (?window=).
	DefaultThroughputWindow = 15 * time.Minute
	// DefaultThroughputQueues bounded the queues a throughput sample kept apart.
	//
	// Deprecated: Config.ThroughputQueues is ignored; the history of all queues is one read.
	DefaultThroughputQueues = 2000
	// DefaultMaxPageBytes is the byte budget of a page of GET /v1/queues/{queue}/jobs
	// (pipeline.Page.MaxBytes), the Inspector's own default.
	DefaultMaxPageBytes = 8 << 20
	// DefaultMaxEventStreams bounds the open event streams (GET .../jobs/{id}/events) of a
	// Server: each holds a connection, a goroutine and buffers, about 40 KB.
	DefaultMaxEventStreams = 1000
	// MaxBatchJobs bounds the jobs of one batch POST.
	MaxBatchJobs = 1000
)

// Config configures a Server. Zero fields take the documented defaults.
type Config struct {
	// AuthToken, when set, is required on every request but /healthz, /readyz and the
	// dashboard's own files, as "Authorization: Bearer <token>". Empty: no authentication
	// (serve the handler on loopback only, or behind a proxy that authenticates).
	AuthToken string
	// Keys is the keyring of encryption at rest (pipeline.ClientConfig.Keys). The server shows
	// payloads and results opened only to requests that send PayloadToken; every other
	// request gets the jobs' sealed parts as "<encrypted, N bytes, key K>" with an "encrypted"
	// field, whatever the server's keyring holds. The payload a publish sends back is shown so
	// too, and so are the jobs' log lines (GET .../jobs/{id}/logs). Give New a Client with the
	// same Keys and KeepSealed (it seals what it publishes and reads jobs as stored) and an
	// Inspector without Keys. Nil: jobs are shown as stored.
	Keys *keyring.Keyring
	// PayloadToken is a second bearer token, authenticated as AuthToken is, whose requests
	// see payloads and results opened with Keys. It needs Keys, and must differ from
	// AuthToken. Without AuthToken (loopback), requests without a token are admitted and see
	// the placeholders.
	PayloadToken string
	// AllowedHosts are the host names (or addresses) that requests may name in their Host header
	// when AuthToken is empty. The loopback ones (localhost, 127.0.0.0/8, [::1]) are always
	// allowed. The port is not compared. Any other Host is answered 421 Misdirected Request,
	// before anything is read or written.
	//
	// A web page whose owner points its name at 127.0.0.1 (DNS rebinding) sends its own name as
	// Host. With no token, nothing else tells it from a local client. List the name a reverse
	// proxy forwards, unless it rewrites Host to a loopback one. "*" allows every Host, which
	// gives that guard up. With AuthToken set the Host is not checked: a page cannot send a
	// token it does not know.
	AllowedHosts []string
	// MaxBodyBytes bounds the body of a one-job POST; a larger body is refused with 413
	// before it is read. Defaults to DefaultMaxBodyBytes. The payload's own limit is the
	// Client's (pipeline.ClientConfig.MaxPayloadBytes), also answered with 413.
	MaxBodyBytes int64
	// MaxBatchBodyBytes bounds the body of a batch POST. Defaults to DefaultMaxBatchBodyBytes.
	MaxBatchBodyBytes int64
	// MaxPageBytes is the byte budget of a page of GET /v1/queues/{queue}/jobs. A page ends
	// early, its next cursor right after it, at the job whose payload and result bytes reach it,
	// added to those before (pipeline.Page.MaxBytes), the Inspector's own default. So a page of big jobs costs the server
	// about this much, not limit times the largest payload. Defaults to DefaultMaxPageBytes.
	MaxPageBytes int64
	// MaxEventStreams bounds the event streams open at once (GET
	// /v1/queues/{queue}/jobs/{id}/events, about 40 KB each). One past it is answered 503
	// unavailable with Retry-After; a closed stream makes room. Defaults to
	// DefaultMaxEventStreams; conveyor serve --max-event-streams.
	MaxEventStreams int
	// MaxWait bounds the wait of a long poll: a longer ?wait= is cut to it. Defaults to
	// DefaultMaxWait. An http.Server's WriteTimeout must exceed it, or long polls are cut.
	MaxWait time.Duration
	// PollInterval is ignored: long polls wait on job events (pipeline.Client.Wait) instead
	// of reading every waited-for job at an interval.
	//
	// Deprecated: ignored since job events.
	PollInterval time.Duration
	// PollConcurrency is ignored: pipeline.Client.Wait bounds its reads at once.
	//
	// Deprecated: ignored since job events.
	PollConcurrency int
	// ThroughputInterval was how often the server sampled every queue's counters; GET
	// /v1/throughput now reads the history the workers keep in Redis.
	//
	// Deprecated: ignored.
	ThroughputInterval time.Duration
	// ThroughputWindow is how far back GET /v1/throughput reaches at the 5 s resolution
	// when the request does not say (?window=), at most an hour (the 5 s buckets' span). Defaults to
	// DefaultThroughputWindow.
	ThroughputWindow time.Duration
	// ThroughputQueues bounded the queues a throughput sample kept apart.
	//
	// Deprecated: ignored.
	ThroughputQueues int
	// Logger receives one debug line per request and one error line per failure the client
	// is not told the details of. Defaults to a disabled logger.
	Logger zerolog.Logger
	// Dashboard, when set, serves GET / and every GET path outside /v1, /healthz, /readyz and
	// /metrics: the dashboard's page and assets. It serves them without a token, since they hold
	// no data and the dashboard's own API calls carry the token. See Dashboard in this package.
	Dashboard http.Handler
	// Metrics, when set, serves GET /metrics (behind the token, when one is set).
	Metrics http.Handler
}

func (c Config) withDefaults() Config {
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.MaxBatchBodyBytes = cmp.Or(c.MaxBatchBodyBytes, DefaultMaxBatchBodyBytes)
	c.MaxPageBytes = cmp.Or(c.MaxPageBytes, DefaultMaxPageBytes)
	c.MaxWait = cmp.Or(c.MaxWait, DefaultMaxWait)
	c.MaxEventStreams = cmp.Or(c.MaxEventStreams, DefaultMaxEventStreams)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.PollConcurrency = cmp.Or(c.PollConcurrency, DefaultPollConcurrency)
	c.ThroughputInterval = cmp.Or(c.ThroughputInterval, DefaultThroughputInterval)
	c.ThroughputWindow = cmp.Or(c.ThroughputWindow, DefaultThroughputWindow)
	c.ThroughputQueues = cmp.Or(c.ThroughputQueues, DefaultThroughputQueues)
	return c
}

// validate checks a config that withDefaults filled in. Its errors wrap pipeline.ErrInvalid, as
// every config's in Conveyor do.
func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: api: "+format, append([]any{pipeline.ErrInvalid}, args...)...))
	}
	if c.MaxBodyBytes < 0 {
		bad("MaxBodyBytes %d is negative", c.MaxBodyBytes)
	}
	if c.MaxBatchBodyBytes < 0 {
		bad("MaxBatchBodyBytes %d is negative", c.MaxBatchBodyBytes)
	}
	if c.MaxPageBytes < 0 {
		bad("MaxPageBytes %d is negative", c.MaxPageBytes)
	}
	if c.MaxEventStreams < 0 {
		bad("MaxEventStreams %d is negative", c.MaxEventStreams)
	}
	if c.MaxWait < 0 {
		bad("MaxWait %s is negative", c.MaxWait)
	}
	if c.PollInterval < 0 {
		bad("PollInterval %s is negative", c.PollInterval)
	}
	if c.PollConcurrency < 0 {
		bad("PollConcurrency %d is negative", c.PollConcurrency)
	}
	if c.ThroughputInterval < 0 {
		bad("ThroughputInterval %s is negative", c.ThroughputInterval)
	}
	for _, h := range c.AllowedHosts {
		if h != "*" && (hostName(h) == "" || strings.ContainsAny(h, "/ \t@")) {
			bad("AllowedHosts entry %q: want a host name or address, such as conveyor.example.com", h)
		}
	}
	if c.PayloadToken != "" && c.Keys == nil {
		bad("PayloadToken needs Keys: without a keyring there is nothing it could open")
	}
	if c.PayloadToken != "" && c.PayloadToken == c.AuthToken {
		bad("PayloadToken is AuthToken: every caller would see payloads")
	}
	if c.ThroughputQueues < 0 {
		bad("ThroughputQueues %d is negative", c.ThroughputQueues)
	}
	if c.ThroughputWindow < 0 || c.ThroughputWindow > historySpanFine {
		bad("ThroughputWindow %s is outside 0..%s (the history's 5 s buckets are kept that long)", c.ThroughputWindow, historySpanFine)
	}
	return errors.Join(errs...)
}
