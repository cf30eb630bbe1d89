package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/conveyorq/conveyor/pipeline"
)

// DefaultHTTPTimeout bounds a whole request (connection, redirects, reading the answer) made
// by the "http" handler of All and Register, or by HTTP with a nil client.
const DefaultHTTPTimeout = 30 * time.Second

const (
	// maxResponseRead is how much of a response body the "http" handler reads.
	maxResponseRead = 1 << 20
	// maxResultBody is how much of it goes into the result.
	maxResultBody = 64 << 10
	// maxErrorBody is how much of it goes into the error of a non-2xx answer.
	maxErrorBody = 256
)

// defaultHTTPClient is the client of HTTP(nil): guarded (see Guard), so that the handler
// reaches no loopback, private or link-local address unless allowed.
var defaultHTTPClient = func() *http.Client {
	g, _ := NewGuard()
	return g.Client(DefaultHTTPTimeout)
}()

// httpPayload is the payload of the "http" handler.
type httpPayload struct {
	URL     string            `json:"url"`
	Method  string            `json:"method"`
	Body    json.RawMessage   `json:"body"`
	Headers map[string]string `json:"headers"`
}

// httpResult is the result of the "http" handler.
type httpResult struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
}

// HTTP returns the "http" handler. It makes the request described by the payload with client and
// the job's context; see the package documentation. The payload is
// {"url":"...","method":"POST","body":...,"headers":{"k":"v"}}. It returns
// {"status":code,"body":"..."} with the first 64 KiB of the response body; at most 1 MiB of it
// is read. It logs the request (its method) and the answer's status with the job
// (Job.Logger), and reports its progress (Job.Progress): 0% once the request is sent, 100%
// once answered.
//
// A nil client means a shared client with a DefaultHTTPTimeout timeout, whose connections a
// default Guard checks. It refuses loopback, private, link-local and unspecified destinations;
// pass a Guard's Client to allow some. A destination the client's Guard refuses is a
// pipeline.SkipRetry error. It names the job's URL and ErrDestinationRefused, nothing more; the
// Guard logs the details. So is a name that does not resolve, since the two read alike. A lookup
// that fails for now is a retryable error that names neither the resolver nor its answer.
//
// These are pipeline.SkipRetry errors: a payload it cannot use, and a 4xx answer other than 408
// and 429. A payload it cannot use is not JSON, has no url, a scheme other than http and https,
// or a bad method or header. Other non-2xx answers and transport errors are retryable errors.
func HTTP(client *http.Client) pipeline.HandlerFunc {
	if client == nil {
		client = defaultHTTPClient
	}
	return func(ctx context.Context, job *pipeline.Job) ([]byte, error) {
		req, err := newHTTPRequest(context.WithValue(ctx, jobKey{}, job), job.Payload)
		if err != nil {
			return nil, pipeline.SkipRetry(err)
		}
		// The request and its answer are logged with the job (Job.Logger): its job page shows
		// when each attempt called and what came back. Not the URL: it is the payload's, which
		// may be encrypted at rest, and the lines are not.
		job.Logger().Info().Str("method", req.Method).Msg("request")
		// A report while the call waits: the job's page says so, and the report writes the
		// line above with it, which then outlives a worker killed during the call.
		_ = job.Progress(ctx, 0, "request sent, waiting for the answer")
		resp, err := client.Do(req)
		if err != nil {
			var dnsErr *net.DNSError
			if errors.Is(err, ErrDestinationRefused) || errors.As(err, &dnsErr) && dnsErr.IsNotFound {
				// Not err: its dial error names the address a name resolved to (the Guard
				// logs it), and a redirect's target. A name that does not resolve reads the
				// same: "no such host" against "refused" would tell a job's submitter which
				// internal names exist.
				return nil, pipeline.SkipRetry(fmt.Errorf("http: %s %s: %w", req.Method, req.URL.Redacted(), ErrDestinationRefused))
			}
			if dnsErr != nil {
				// Not err either: a DNS error names the network's resolver. A lookup that
				// failed for now is tried again.
				if ctxErr := ctx.Err(); ctxErr != nil {
					return nil, fmt.Errorf("http: %s %s: resolving the destination's name: %w", req.Method, req.URL.Redacted(), ctxErr)
				}
				return nil, fmt.Errorf("http: %s %s: the destination's name could not be resolved now", req.Method, req.URL.Redacted())
			}
			return nil, fmt.Errorf("http: %w", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseRead))
		job.Logger().Info().Int("status", resp.StatusCode).Int("bytes", len(body)).Msg("response")
		_ = job.Progress(ctx, 100, "answered "+resp.Status)
		if err != nil {
			return nil, fmt.Errorf("http: %s %s: reading the response: %w", req.Method, req.URL.Redacted(), err)
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			err := fmt.Errorf("http: %s %s: %s", req.Method, req.URL.Redacted(), resp.Status)
			if snippet := truncateUTF8(body, maxErrorBody); len(snippet) > 0 {
				err = fmt.Errorf("%w: %q", err, snippet)
			}
			if resp.StatusCode >= 400 && resp.StatusCode <= 499 &&
				resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests {
				return nil, pipeline.SkipRetry(err)
			}
			return nil, err
		}
		return json.Marshal(httpResult{Status: resp.StatusCode, Body: string(truncateUTF8(body, maxResultBody))})
	}
}

// newHTTPRequest parses an "http" payload and builds its request, without sending it. Every
// error it returns is about the payload.
func newHTTPRequest(ctx context.Context, payload []byte) (*http.Request, error) {
	var p httpPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf(`http: payload must be JSON like {"url":"https://example.com"}: %w`, err)
	}
	if p.URL == "" {
		return nil, errors.New(`http: payload has no "url"`)
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		return nil, fmt.Errorf("http: bad url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("http: url %s: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("http: url %s has no host", u.Redacted())
	}

	var body []byte
	hasBody, isJSON := false, false
	if raw := bytes.TrimSpace(p.Body); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		hasBody = true
		if raw[0] == '"' {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("http: bad body: %w", err)
			}
			body = []byte(s)
		} else {
			var buf bytes.Buffer
			if err := json.Compact(&buf, raw); err != nil {
				return nil, fmt.Errorf("http: bad body: %w", err)
			}
			body, isJSON = buf.Bytes(), true
		}
	}

	method := strings.ToUpper(strings.TrimSpace(p.Method))
	if method == "" {
		method = http.MethodGet
		if hasBody {
			method = http.MethodPost
		}
	}
	if !isToken(method) {
		return nil, fmt.Errorf("http: bad method %q", p.Method)
	}

	var rd io.Reader
	if hasBody {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	if isJSON {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range p.Headers {
		if !isToken(k) {
			return nil, fmt.Errorf("http: bad header name %q", k)
		}
		if !validHeaderValue(v) {
			return nil, fmt.Errorf("http: bad value for header %q", k)
		}
		if http.CanonicalHeaderKey(k) == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return req, nil
}

// isToken reports whether s is an RFC 9110 token, as a method or a header name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v may be sent as a header value: no control characters
// other than horizontal tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// truncateUTF8 returns at most n bytes of b, cut so as not to split a UTF-8 sequence at the
// end.
func truncateUTF8(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	b = b[:n]
	// Drop a trailing sequence that was cut short (its start is at most utf8.UTFMax-1 bytes
	// from the end).
	for i := len(b) - 1; i >= 0 && i > len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}
