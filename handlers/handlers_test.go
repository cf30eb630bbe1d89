package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

func job(typ, payload string) *pipeline.Job {
	return &pipeline.Job{ID: "j1", Queue: "default", Type: typ, Payload: []byte(payload), Attempt: 1, MaxRetries: 3}
}

// errKind is what a test expects of a handler's error.
type errKind int

const (
	noErr     errKind = iota
	retryable         // an error, not SkipRetry
	skipRetry         // a SkipRetry error
)

func checkErr(t *testing.T, want errKind, err error) {
	t.Helper()
	switch want {
	case noErr:
		require.NoError(t, err)
	case retryable:
		require.Error(t, err)
		assert.False(t, pipeline.IsSkipRetry(err), "want a retryable error, got SkipRetry: %v", err)
	case skipRetry:
		require.Error(t, err)
		assert.True(t, pipeline.IsSkipRetry(err), "want a SkipRetry error, got: %v", err)
	}
}

func TestAllAndRegister(t *testing.T) {
	all := All()
	names := slices.Sorted(maps.Keys(all))
	assert.Equal(t, []string{"echo", "fail", "flaky", "http", "noop", "sleep"}, names)
	for name, h := range all {
		assert.NotNil(t, h, name)
	}

	r := &recordingRegistrar{}
	Register(r)
	assert.Equal(t, names, r.names, "Register registers every handler in name order")
}

type recordingRegistrar struct{ names []string }

func (r *recordingRegistrar) Handle(jobType string, h pipeline.HandlerFunc) {
	if h != nil {
		r.names = append(r.names, jobType)
	}
}

func TestEcho(t *testing.T) {
	for _, payload := range []string{"", "hello", `{"a":[1,2,3]}`, "\x00\xff binary"} {
		j := job(TypeEcho, payload)
		out, err := Echo(context.Background(), j)
		require.NoError(t, err)
		assert.Equal(t, payload, string(out))
		if len(out) > 0 {
			out[0] ^= 0xff
			assert.Equal(t, payload, string(j.Payload), "the result is a copy")
		}
	}
}

func TestNoop(t *testing.T) {
	out, err := Noop(context.Background(), job(TypeNoop, "whatever"))
	assert.NoError(t, err)
	assert.Nil(t, out)
}

func TestFail(t *testing.T) {
	tests := []struct {
		name, payload, want string
	}{
		{"empty", "", "fail: this handler always fails"},
		{"not json", "nope", "fail: this handler always fails"},
		{"no message", `{}`, "fail: this handler always fails"},
		{"empty message", `{"message":""}`, "fail: this handler always fails"},
		{"array", `[1]`, "fail: this handler always fails"},
		{"message", `{"message":"boom"}`, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Fail(context.Background(), job(TypeFail, tt.payload))
			assert.Nil(t, out)
			checkErr(t, retryable, err)
			assert.EqualError(t, err, tt.want)
		})
	}
}

func TestSleep(t *testing.T) {
	tests := []struct {
		name, payload string
		want          errKind
		result        string
		errContains   string
	}{
		{"zero", `{"ms":0}`, noErr, `{"slept_ms":0}`, ""},
		{"short", `{"ms":20}`, noErr, `{"slept_ms":20}`, ""},
		{"extra fields", `{"ms":1,"x":true}`, noErr, `{"slept_ms":1}`, ""},
		{"empty", ``, skipRetry, "", "payload must be JSON"},
		{"not json", `ms=5`, skipRetry, "", "payload must be JSON"},
		{"array", `[5]`, skipRetry, "", "payload must be JSON"},
		{"string ms", `{"ms":"5"}`, skipRetry, "", "payload must be JSON"},
		{"fraction", `{"ms":1.5}`, skipRetry, "", "payload must be JSON"},
		{"overflow", `{"ms":99999999999999999999}`, skipRetry, "", "payload must be JSON"},
		{"missing", `{}`, skipRetry, "", `no "ms"`},
		{"null", `null`, skipRetry, "", `no "ms"`},
		{"null ms", `{"ms":null}`, skipRetry, "", `no "ms"`},
		{"negative", `{"ms":-1}`, skipRetry, "", "must not be negative"},
		{"too long", `{"ms":86400001}`, skipRetry, "", "at most 86400000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			out, err := Sleep(context.Background(), job(TypeSleep, tt.payload))
			checkErr(t, tt.want, err)
			if tt.want != noErr {
				assert.Nil(t, out)
				assert.ErrorContains(t, err, tt.errContains)
				return
			}
			assert.JSONEq(t, tt.result, string(out))
			var r struct {
				SleptMS int64 `json:"slept_ms"`
			}
			require.NoError(t, json.Unmarshal(out, &r))
			assert.GreaterOrEqual(t, time.Since(start), time.Duration(r.SleptMS)*time.Millisecond)
		})
	}
}

func TestSleepHonoursCancellation(t *testing.T) {
	errCustom := errors.New("worker shutting down")
	tests := []struct {
		name      string
		ctx       func() (context.Context, context.CancelFunc)
		wantIs    []error
		wantCause string
	}{
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(10*time.Millisecond, cancel)
			return ctx, cancel
		}, []error{context.Canceled}, ""},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 10*time.Millisecond)
		}, []error{context.DeadlineExceeded}, ""},
		{"cancel with cause", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(10*time.Millisecond, func() { cancel(errCustom) })
			return ctx, func() { cancel(nil) }
		}, []error{context.Canceled, errCustom}, "worker shutting down"},
		{"already cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, []error{context.Canceled}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			out, err := Sleep(ctx, job(TypeSleep, `{"ms":10000}`))
			elapsed := time.Since(start)
			assert.Less(t, elapsed, 5*time.Second, "a 10s sleep must end soon after its context")
			assert.Nil(t, out)
			checkErr(t, retryable, err)
			for _, target := range tt.wantIs {
				assert.ErrorIs(t, err, target)
			}
			assert.ErrorContains(t, err, tt.wantCause)
		})
	}

	t.Run("zero ms with a cancelled context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Sleep(ctx, job(TypeSleep, `{"ms":0}`))
		assert.ErrorIs(t, err, context.Canceled)
	})
	t.Run("bad payload wins over a cancelled context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Sleep(ctx, job(TypeSleep, `{"ms":-5}`))
		checkErr(t, skipRetry, err)
	})
}

func TestFlaky(t *testing.T) {
	for _, k := range []int{0, 1, 2, 5} {
		payload := `{"fail_times":` + itoa(k) + `}`
		for attempt := 1; attempt <= k+1; attempt++ {
			j := job(TypeFlaky, payload)
			j.Attempt = attempt
			out, err := Flaky(context.Background(), j)
			if attempt <= k {
				checkErr(t, retryable, err)
				assert.Nil(t, out)
				assert.EqualError(t, err, "flaky: attempt "+itoa(attempt)+" of the first "+itoa(k)+" fails")
				continue
			}
			require.NoError(t, err, "k=%d attempt=%d", k, attempt)
			assert.JSONEq(t, `{"attempt":`+itoa(attempt)+`}`, string(out))
		}
	}

	t.Run("later attempts keep succeeding", func(t *testing.T) {
		j := job(TypeFlaky, `{"fail_times":2}`)
		j.Attempt = 7
		out, err := Flaky(context.Background(), j)
		require.NoError(t, err)
		assert.JSONEq(t, `{"attempt":7}`, string(out))
	})
	t.Run("attempt 0 counts as 1", func(t *testing.T) {
		j := job(TypeFlaky, `{"fail_times":0}`)
		j.Attempt = 0
		out, err := Flaky(context.Background(), j)
		require.NoError(t, err)
		assert.JSONEq(t, `{"attempt":1}`, string(out))
	})

	bad := []struct{ name, payload, contains string }{
		{"empty", ``, "payload must be JSON"},
		{"not json", `3`, "payload must be JSON"},
		{"string", `{"fail_times":"2"}`, "payload must be JSON"},
		{"fraction", `{"fail_times":0.5}`, "payload must be JSON"},
		{"missing", `{}`, `no "fail_times"`},
		{"null", `null`, `no "fail_times"`},
		{"negative", `{"fail_times":-1}`, "must not be negative"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Flaky(context.Background(), job(TypeFlaky, tt.payload))
			assert.Nil(t, out)
			checkErr(t, skipRetry, err)
			assert.ErrorContains(t, err, tt.contains)
		})
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// seen is one request as an httptest server received it.
type seen struct {
	Method, Path, Host string
	Header             http.Header
	Body               string
}

// server starts an httptest server that records its requests and answers with status and
// body; it returns the server and a function that returns the requests so far.
func server(t *testing.T, status int, body string) (*httptest.Server, func() []seen) {
	t.Helper()
	var mu sync.Mutex
	var reqs []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, seen{r.Method, r.URL.RequestURI(), r.Host, r.Header.Clone(), string(b)})
		mu.Unlock()
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(reqs)
	}
}

func httpPayloadJSON(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestHTTPStatus(t *testing.T) {
	tests := []struct {
		status int
		want   errKind
	}{
		{200, noErr},
		{201, noErr},
		{204, noErr},
		{299, noErr},
		{304, retryable},
		{400, skipRetry},
		{401, skipRetry},
		{404, skipRetry},
		{408, retryable},
		{410, skipRetry},
		{422, skipRetry},
		{429, retryable},
		{499, skipRetry},
		{500, retryable},
		{502, retryable},
		{503, retryable},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status)+"_"+itoa(tt.status), func(t *testing.T) {
			body := "answer"
			if tt.status == 204 || tt.status == 304 {
				body = ""
			}
			srv, reqs := server(t, tt.status, body)
			out, err := HTTP(srv.Client())(context.Background(),
				job(TypeHTTP, httpPayloadJSON(t, map[string]any{"url": srv.URL + "/hook?x=1"})))
			checkErr(t, tt.want, err)
			require.Len(t, reqs(), 1)
			if tt.want == noErr {
				assert.JSONEq(t, `{"status":`+itoa(tt.status)+`,"body":`+string(mustJSON(t, body))+`}`, string(out))
				return
			}
			assert.Nil(t, out)
			assert.ErrorContains(t, err, itoa(tt.status))
			assert.ErrorContains(t, err, "GET "+srv.URL+"/hook?x=1")
			if body != "" {
				assert.ErrorContains(t, err, body, "the error quotes the start of the answer")
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestHTTPRequest(t *testing.T) {
	tests := []struct {
		name       string
		payload    map[string]any
		wantMethod string
		wantBody   string
		wantCT     string // Content-Type; "" means none
		wantHeader map[string]string
		wantHost   string
	}{
		{
			name:       "GET without body",
			payload:    map[string]any{},
			wantMethod: "GET",
		},
		{
			name:       "null body is no body",
			payload:    map[string]any{"body": nil},
			wantMethod: "GET",
		},
		{
			name:       "POST with object body",
			payload:    map[string]any{"body": map[string]any{"event": "signup", "n": 1}},
			wantMethod: "POST",
			wantBody:   `{"event":"signup","n":1}`,
			wantCT:     "application/json",
		},
		{
			name:       "array body",
			payload:    map[string]any{"body": []any{1, "two"}},
			wantMethod: "POST",
			wantBody:   `[1,"two"]`,
			wantCT:     "application/json",
		},
		{
			name:       "number body",
			payload:    map[string]any{"body": 42},
			wantMethod: "POST",
			wantBody:   `42`,
			wantCT:     "application/json",
		},
		{
			name:       "string body sent as-is",
			payload:    map[string]any{"body": "plain text, \"quoted\"\n"},
			wantMethod: "POST",
			wantBody:   "plain text, \"quoted\"\n",
		},
		{
			name:       "empty string body",
			payload:    map[string]any{"body": ""},
			wantMethod: "POST",
		},
		{
			name:       "explicit method, lower case",
			payload:    map[string]any{"method": "put", "body": map[string]any{"a": true}},
			wantMethod: "PUT",
			wantBody:   `{"a":true}`,
			wantCT:     "application/json",
		},
		{
			name:       "DELETE without body",
			payload:    map[string]any{"method": "DELETE"},
			wantMethod: "DELETE",
		},
		{
			name: "headers, Content-Type override",
			payload: map[string]any{
				"body":    map[string]any{"a": 1},
				"headers": map[string]string{"content-type": "application/vnd.api+json", "X-Token": "secret", "Authorization": "Bearer x"},
			},
			wantMethod: "POST",
			wantBody:   `{"a":1}`,
			wantCT:     "application/vnd.api+json",
			wantHeader: map[string]string{"X-Token": "secret", "Authorization": "Bearer x"},
		},
		{
			name:       "Content-Type for a string body",
			payload:    map[string]any{"body": "a=1", "headers": map[string]string{"Content-Type": "application/x-www-form-urlencoded"}},
			wantMethod: "POST",
			wantBody:   "a=1",
			wantCT:     "application/x-www-form-urlencoded",
		},
		{
			name:       "Host header",
			payload:    map[string]any{"headers": map[string]string{"Host": "api.example.test"}},
			wantMethod: "GET",
			wantHost:   "api.example.test",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, reqs := server(t, 200, "ok")
			tt.payload["url"] = srv.URL + "/path"
			out, err := HTTP(srv.Client())(context.Background(), job(TypeHTTP, httpPayloadJSON(t, tt.payload)))
			require.NoError(t, err)
			assert.JSONEq(t, `{"status":200,"body":"ok"}`, string(out))
			got := reqs()
			require.Len(t, got, 1)
			r := got[0]
			assert.Equal(t, tt.wantMethod, r.Method)
			assert.Equal(t, "/path", r.Path)
			assert.Equal(t, tt.wantBody, r.Body)
			assert.Equal(t, tt.wantCT, r.Header.Get("Content-Type"))
			for k, v := range tt.wantHeader {
				assert.Equal(t, v, r.Header.Get(k), k)
			}
			if tt.wantHost != "" {
				assert.Equal(t, tt.wantHost, r.Host)
			}
		})
	}
}

func TestHTTPBadPayload(t *testing.T) {
	tests := []struct{ name, payload, contains string }{
		{"empty", ``, "payload must be JSON"},
		{"not json", `https://example.com`, "payload must be JSON"},
		{"array", `["https://example.com"]`, "payload must be JSON"},
		{"url not a string", `{"url":5}`, "payload must be JSON"},
		{"headers not strings", `{"url":"http://127.0.0.1:1","headers":{"a":1}}`, "payload must be JSON"},
		{"no url", `{}`, `no "url"`},
		{"null", `null`, `no "url"`},
		{"ftp", `{"url":"ftp://example.com/file"}`, "scheme must be http or https"},
		{"file", `{"url":"file:///etc/passwd"}`, "scheme must be http or https"},
		{"unix", `{"url":"unix:///var/run/docker.sock"}`, "scheme must be http or https"},
		{"relative", `{"url":"/just/a/path"}`, "scheme must be http or https"},
		{"no scheme", `{"url":"example.com"}`, "scheme must be http or https"},
		{"no host", `{"url":"http:///path"}`, "has no host"},
		{"unparsable", `{"url":"http://[::1"}`, "bad url"},
		{"bad method", `{"url":"http://127.0.0.1:1","method":"GE T"}`, "bad method"},
		{"bad header name", `{"url":"http://127.0.0.1:1","headers":{"X Bad":"v"}}`, "bad header name"},
		{"bad header value", `{"url":"http://127.0.0.1:1","headers":{"X-Bad":"a\r\nInjected: 1"}}`, "bad value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
				t.Error("no request may be sent for a bad payload")
				return nil, errors.New("unexpected request")
			})}
			out, err := HTTP(client)(context.Background(), job(TypeHTTP, tt.payload))
			assert.Nil(t, out)
			checkErr(t, skipRetry, err)
			assert.ErrorContains(t, err, tt.contains)
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestHTTPTransportErrors(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		g, err := NewGuard("127.0.0.1") // the default Guard refuses loopback before dialing
		require.NoError(t, err)
		_, err = HTTP(g.Client(DefaultHTTPTimeout))(context.Background(), job(TypeHTTP, `{"url":"http://`+addr+`/"}`))
		checkErr(t, retryable, err)
	})
	t.Run("context cancelled", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := HTTP(srv.Client())(ctx, job(TypeHTTP, `{"url":"`+srv.URL+`"}`))
		assert.Less(t, time.Since(start), 5*time.Second)
		checkErr(t, retryable, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	})
	t.Run("client timeout", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		client := srv.Client()
		client.Timeout = 20 * time.Millisecond
		_, err := HTTP(client)(context.Background(), job(TypeHTTP, `{"url":"`+srv.URL+`"}`))
		checkErr(t, retryable, err)
	})
}

func TestHTTPResponseBody(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		wantBody string
	}{
		{"small", "hello", "hello"},
		{"exactly 64 KiB", strings.Repeat("a", 64<<10), strings.Repeat("a", 64<<10)},
		{"over 64 KiB", strings.Repeat("b", 64<<10+1), strings.Repeat("b", 64<<10)},
		{"over 1 MiB", strings.Repeat("c", 3<<20), strings.Repeat("c", 64<<10)},
		// "é" is 2 bytes: 64 KiB - 1 bytes of "a" then "é" would split it at the limit.
		{"no split rune", strings.Repeat("a", 64<<10-1) + "é tail", strings.Repeat("a", 64<<10-1)},
		{"4-byte rune at the limit", strings.Repeat("a", 64<<10-2) + "😀", strings.Repeat("a", 64<<10-2)},
		{"rune ending at the limit", strings.Repeat("a", 64<<10-2) + "é" + "zz", strings.Repeat("a", 64<<10-2) + "é"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := server(t, 200, tt.body)
			out, err := HTTP(srv.Client())(context.Background(), job(TypeHTTP, `{"url":"`+srv.URL+`"}`))
			require.NoError(t, err)
			var r struct {
				Status int    `json:"status"`
				Body   string `json:"body"`
			}
			require.NoError(t, json.Unmarshal(out, &r))
			assert.Equal(t, 200, r.Status)
			assert.Equal(t, len(tt.wantBody), len(r.Body))
			assert.True(t, r.Body == tt.wantBody, "body differs")
		})
	}

	t.Run("reads at most 1 MiB", func(t *testing.T) {
		var written int64
		done := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer close(done)
			chunk := []byte(strings.Repeat("x", 32<<10))
			// An endless body: the handler must stop reading on its own.
			for written < 64<<20 {
				n, err := w.Write(chunk)
				written += int64(n)
				if err != nil {
					return
				}
			}
		}))
		defer srv.Close()
		out, err := HTTP(srv.Client())(context.Background(), job(TypeHTTP, `{"url":"`+srv.URL+`"}`))
		require.NoError(t, err)
		assert.Contains(t, string(out), `"status":200`)
		srv.CloseClientConnections()
		<-done
		assert.Less(t, written, int64(64<<20), "the handler did not read the whole body")
	})
}

func TestTruncateUTF8(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc"},
		{"aé", 2, "a"},
		{"aé", 3, "aé"},
		{"a😀", 2, "a"},
		{"a😀", 3, "a"},
		{"a😀", 4, "a"},
		{"a😀b", 5, "a😀"},
		{"\xff\xff\xff\xff", 2, "\xff\xff"}, // invalid bytes are not sequences to keep whole
		{"é", 1, ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, string(truncateUTF8([]byte(tt.in), tt.n)), "%q %d", tt.in, tt.n)
	}
}

// failingTransport fails every request without touching the network.
type failingTransport struct{}

var errNoNetwork = errors.New("fuzz: no network")

func (failingTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, errNoNetwork }

func FuzzPayloads(f *testing.F) {
	for _, s := range []string{
		``, `null`, `{}`, `[]`, `"x"`, `0`,
		`{"ms":0}`, `{"ms":10}`, `{"ms":-1}`, `{"ms":86400001}`, `{"ms":1e3}`, `{"ms":"1"}`,
		`{"fail_times":0}`, `{"fail_times":2}`, `{"fail_times":-3}`, `{"fail_times":9223372036854775807}`,
		`{"message":"boom"}`,
		`{"url":"http://127.0.0.1:1/x"}`, `{"url":"https://example.com","method":"post","body":{"a":1}}`,
		`{"url":"http://h","body":"text","headers":{"Host":"x","Content-Type":"text/plain"}}`,
		`{"url":"ftp://h"}`, `{"url":"http://h","method":"G T"}`, `{"url":"http://h","headers":{"a b":"c"}}`,
		"\x00\xff{",
	} {
		f.Add([]byte(s))
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	// The http handler under fuzz can never reach the network: its transport fails every
	// request.
	offline := HTTP(&http.Client{Transport: failingTransport{}})

	f.Fuzz(func(t *testing.T, payload []byte) {
		mk := func(attempt int) *pipeline.Job {
			return &pipeline.Job{ID: "f", Type: "fuzz", Payload: payload, Attempt: attempt}
		}

		// sleep: the context is already cancelled, so it never sleeps and always errs.
		out, err := Sleep(cancelled, mk(1))
		if err == nil || out != nil {
			t.Fatalf("sleep with a cancelled context: out=%q err=%v", out, err)
		}
		if !pipeline.IsSkipRetry(err) && !errors.Is(err, context.Canceled) {
			t.Fatalf("sleep: an error neither SkipRetry nor Canceled: %v", err)
		}

		// flaky
		for attempt := 0; attempt <= 3; attempt++ {
			out, err := Flaky(context.Background(), mk(attempt))
			if err == nil && !json.Valid(out) {
				t.Fatalf("flaky: invalid result %q", out)
			}
			if err != nil && out != nil {
				t.Fatalf("flaky: result %q with error %v", out, err)
			}
		}

		// fail, echo, noop
		if _, err := Fail(context.Background(), mk(1)); err == nil || pipeline.IsSkipRetry(err) {
			t.Fatalf("fail: %v", err)
		}
		if out, err := Echo(context.Background(), mk(1)); err != nil || string(out) != string(payload) {
			t.Fatalf("echo: %q %v", out, err)
		}

		// http: parse and build only, then the handler with a transport that fails.
		req, perr := newHTTPRequest(context.Background(), payload)
		out, err = offline(context.Background(), mk(1))
		if err == nil || out != nil {
			t.Fatalf("http without network: out=%q err=%v", out, err)
		}
		if perr != nil {
			if !pipeline.IsSkipRetry(err) {
				t.Fatalf("http: bad payload (%v) not SkipRetry: %v", perr, err)
			}
			return
		}
		if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
			t.Fatalf("http: request with scheme %q", req.URL.Scheme)
		}
		if pipeline.IsSkipRetry(err) || !errors.Is(err, errNoNetwork) {
			t.Fatalf("http: want the transport's retryable error, got %v", err)
		}
	})
}
