package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// Flag combinations that serve refuses before it touches Redis or a port: exit 2.
func TestServeRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		msgs []string
	}{
		{"AllInterfacesWithoutToken", []string{"--addr", ":8080"},
			[]string{"every interface", "--auth-token", envAPIToken, "--insecure"}},
		{"PublicAddrWithoutToken", []string{"--addr", "0.0.0.0:8080"}, []string{"--auth-token", "--insecure"}},
		{"HostNameWithoutToken", []string{"--addr", "example.com:8080"}, []string{"--auth-token"}},
		{"NoPort", []string{"--addr", "127.0.0.1"}, []string{"host:port"}},
		{"BadPort", []string{"--addr", "127.0.0.1:http2"}, []string{"port"}},
		{"MaxWait", []string{"--max-wait", "0s"}, []string{"--max-wait"}},
		{"AllowedHostURL", []string{"--allowed-host", "http://proxy.example/"}, []string{"--allowed-host", "host name"}},
		{"MaxQueues", []string{"--max-queues", "0"}, []string{"--max-queues", "at least 1"}},
		{"Argument", []string{"extra"}, []string{"unexpected argument"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"serve", "--redis", noRedis}, tc.args...)
			stdout, stderr, code := runInProcess(t, "", args...)
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			for _, m := range tc.msgs {
				require.Contains(t, stderr, m)
			}
		})
	}
}

func TestServeChecks(t *testing.T) {
	t.Parallel()
	env := func(token, addr string) func(string) string {
		return func(k string) string {
			switch k {
			case envAPIToken:
				return token
			case envAPIAddr:
				return addr
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name     string
		sf       serveFlags
		env      string
		token    string
		loopback bool
	}{
		{"Default", serveFlags{addr: defaultServeAddr, maxWait: time.Second}, "", "", true},
		{"Localhost", serveFlags{addr: "localhost:0", maxWait: time.Second}, "", "", true},
		{"IPv6Loopback", serveFlags{addr: "[::1]:0", maxWait: time.Second}, "", "", true},
		{"TokenFromEnv", serveFlags{addr: ":8080", maxWait: time.Second}, "e", "e", false},
		{"FlagWins", serveFlags{addr: ":8080", maxWait: time.Second, token: "f", tokenGiven: true}, "e", "f", false},
		{"Insecure", serveFlags{addr: ":8080", maxWait: time.Second, insecure: true}, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token, loopback, err := tc.sf.check(env(tc.env, ""))
			require.NoError(t, err)
			require.Equal(t, tc.token, token)
			require.Equal(t, tc.loopback, loopback)
		})
	}
	// An empty --auth-token given explicitly wins over the environment too: no token, so a
	// public address is refused.
	sf := serveFlags{addr: ":8080", maxWait: time.Second, tokenGiven: true}
	_, _, err := sf.check(env("e", ""))
	require.Error(t, err)

	// $CONVEYOR_API_ADDR sets --addr unless the flag is given.
	sf = serveFlags{addr: defaultServeAddr, maxWait: time.Second}
	_, loopback, err := sf.check(env("t", ":9090"))
	require.NoError(t, err)
	require.False(t, loopback)
	require.Equal(t, ":9090", sf.addr)
	sf = serveFlags{addr: "127.0.0.1:1", maxWait: time.Second, addrGiven: true}
	_, _, err = sf.check(env("", ":9090"))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:1", sf.addr)

	// $CONVEYOR_API_MAX_QUEUES and $CONVEYOR_API_CREATE_QUEUES set their flags unless given.
	vars := map[string]string{envAPIMaxQueues: "7", envAPICreateQueues: "false"}
	sf = serveFlags{addr: defaultServeAddr, maxWait: time.Second, maxQueues: 2000, createQueues: true}
	_, _, err = sf.check(func(k string) string { return vars[k] })
	require.NoError(t, err)
	require.Equal(t, 7, sf.maxQueues)
	require.False(t, sf.createQueues)
	sf = serveFlags{addr: defaultServeAddr, maxWait: time.Second, maxQueues: 9, createQueues: true,
		maxQueuesGiven: true, createGiven: true}
	_, _, err = sf.check(func(k string) string { return vars[k] })
	require.NoError(t, err)
	require.Equal(t, 9, sf.maxQueues)
	require.True(t, sf.createQueues)
	for k, v := range map[string]string{envAPIMaxQueues: "lots", envAPICreateQueues: "maybe"} {
		sf = serveFlags{addr: defaultServeAddr, maxWait: time.Second}
		_, _, err = sf.check(func(name string) string { return map[string]string{k: v}[name] })
		require.ErrorContains(t, err, k)
	}

	// The hosts a request may name without a token: --allowed-host (or its variable, split at
	// commas) and --addr's host unless it is every interface's.
	for _, tc := range []struct {
		name string
		sf   serveFlags
		env  string
		want []string
	}{
		{"Default", serveFlags{addr: defaultServeAddr}, "", []string{"127.0.0.1"}},
		{"Env", serveFlags{addr: "localhost:1"}, " a.example, b.example:8080,", []string{"a.example", "b.example:8080", "localhost"}},
		{"FlagWins", serveFlags{addr: "localhost:1", allowedHosts: []string{"f.example"}, allowedGiven: true}, "a.example", []string{"f.example", "localhost"}},
		{"AllInterfaces", serveFlags{addr: "0.0.0.0:1", insecure: true}, "", nil},
		{"NoHost", serveFlags{addr: ":1", insecure: true}, "", nil},
	} {
		t.Run("AllowedHosts/"+tc.name, func(t *testing.T) {
			tc.sf.maxWait = time.Second
			_, _, err := tc.sf.check(func(k string) string {
				if k == envAPIAllowedHosts {
					return tc.env
				}
				return ""
			})
			require.NoError(t, err)
			require.Equal(t, tc.want, tc.sf.allowedHosts)
		})
	}
}

func TestServeProbe(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(hs.Close)
	_, stderr, code := runInProcess(t, "", "serve", "--probe", hs.URL+"/readyz")
	require.Equal(t, 0, code, stderr)
	_, stderr, code = runInProcess(t, "", "serve", "--probe", hs.URL+"/other")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "503")
	_, stderr, code = runInProcess(t, "", "serve", "--probe", "nonsense")
	require.Equal(t, 2, code, stderr)
	_, stderr, code = runInProcess(t, "", "serve", "--probe", "http://127.0.0.1:1/readyz")
	require.Equal(t, 1, code, stderr)
	require.NotContains(t, stderr, "Redis", "a failed probe is not about Redis")
}

// serveAddr matches the listening address in serve's start-up log line (console or JSON).
var serveAddr = regexp.MustCompile(`"?addr"?[=:]"?(127\.0\.0\.1:\d+)`)

// TestServeE2E runs `conveyor serve` as a user would: it refuses a public address without a
// token (exit 2), serves on a free loopback port, answers /healthz and a POST (202), a long
// poll answers with the job a `conveyor worker` process completed, a long poll in flight at
// SIGTERM is answered with its job as it is, and serve exits 0.
func TestServeE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	srv := redistest.Shared(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}
	queue := redistest.UniqueName(t)
	const token = "e2e-token"

	r := c.exec(t, "", serveEnv(c.url, ""), "serve", "--addr", "0.0.0.0:0", "--redis", c.url)
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "--auth-token")
	require.Contains(t, r.stderr, envAPIToken)
	require.Contains(t, r.stderr, "--insecure")

	p := startServe(t, c, serveEnv(c.url, token), "serve", "--addr", "127.0.0.1:0", "--log-level", "debug",
		"--redis", c.url)
	var base string
	waitFor(t, 60*time.Second, 20*time.Millisecond, "serve's address in its log", func() bool {
		m := serveAddr.FindStringSubmatch(p.output.String())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	})
	require.NotContains(t, p.output.String(), token, "the token is never logged")

	call := func(method, path, body string, auth bool) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if auth {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, b
	}
	type job struct {
		ID     string          `json:"id"`
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
	}

	code, body := call("GET", "/healthz", "", false)
	require.Equal(t, http.StatusOK, code, "%s", body)
	code, body = call("GET", "/", "", false)
	require.Equal(t, http.StatusOK, code, "the dashboard: %s", body)
	code, body = call("POST", "/v1/queues/"+queue+"/jobs", `{"type":"echo"}`, false)
	require.Equal(t, http.StatusUnauthorized, code, "%s", body)

	code, body = call("POST", "/v1/queues/"+queue+"/jobs", `{"type":"echo","payload":{"n":7}}`, true)
	require.Equal(t, http.StatusAccepted, code, "%s", body)
	var j job
	require.NoError(t, json.Unmarshal(body, &j))

	w := c.start(t, "worker", "--queue", queue)
	code, body = call("GET", "/v1/queues/"+queue+"/jobs/"+j.ID+"?wait=30s", "", true)
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.NoError(t, json.Unmarshal(body, &j))
	require.Equal(t, "completed", j.Status)
	require.JSONEq(t, `{"n":7}`, string(j.Result))
	require.Equal(t, 0, w.stop(t), "worker exit code after SIGTERM")

	// A long poll in flight at SIGTERM is answered at once with its job as it is.
	code, body = call("POST", "/v1/queues/"+queue+"/jobs", `{"type":"echo","delay":"1h"}`, true)
	require.Equal(t, http.StatusAccepted, code, "%s", body)
	require.NoError(t, json.Unmarshal(body, &j))
	type answer struct {
		code int
		body []byte
	}
	polled := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", base+"/v1/queues/"+queue+"/jobs/"+j.ID+"?wait=60s", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			polled <- answer{code: -1, body: []byte(err.Error())}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		polled <- answer{res.StatusCode, b}
	}()
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the long poll to wait", func() bool {
		for line := range strings.Lines(p.output.String()) {
			if strings.Contains(line, "long poll waiting") && strings.Contains(line, j.ID) {
				return true
			}
		}
		return false
	})
	require.Equal(t, 0, p.stop(t), "serve exit code after SIGTERM")
	a := <-polled
	require.Equal(t, http.StatusOK, a.code, "%s", a.body)
	require.NoError(t, json.Unmarshal(a.body, &j))
	require.Equal(t, "scheduled", j.Status)
	require.Contains(t, p.output.String(), "stopped")
}

// serveEnv is env(url) without $CONVEYOR_API_TOKEN, or with it set to token.
func serveEnv(url, token string) []string {
	var out []string
	for _, kv := range env(url) {
		if !strings.HasPrefix(kv, envAPIToken+"=") {
			out = append(out, kv)
		}
	}
	if token != "" {
		out = append(out, envAPIToken+"="+token)
	}
	return out
}

// startServe starts the binary with exactly args and environment env, as cli.start does.
func startServe(t *testing.T, c *cli, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = env
	p := &proc{cmd: cmd, output: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.output, p.output
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			fmt.Fprintf(os.Stderr, "conveyor %s output:\n%s\n", strings.Join(args, " "), p.output)
		}
	})
	return p
}
