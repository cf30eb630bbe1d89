package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/stretchr/testify/require"
)

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
	require.Contains(t, r.stderr, "CONVEYOR_API_TOKEN")
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
		if !strings.HasPrefix(kv, "CONVEYOR_API_TOKEN=") {
			out = append(out, kv)
		}
	}
	if token != "" {
		out = append(out, "CONVEYOR_API_TOKEN="+token)
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
