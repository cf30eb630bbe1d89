package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// metricsAddrLog matches the metrics server's address in the worker's start-up log.
var metricsAddrLog = regexp.MustCompile(`"?url"?[=:]"?(http://127\.0\.0\.1:\d+/metrics)`)

// logged waits for p's output to match re and returns the first group.
func logged(t *testing.T, p *proc, re *regexp.Regexp, what string) string {
	t.Helper()
	var got string
	waitFor(t, 60*time.Second, 20*time.Millisecond, what, func() bool {
		m := re.FindStringSubmatch(p.output.String())
		if m != nil {
			got = m[1]
		}
		return m != nil
	})
	return got
}

// scrape GETs url (with a bearer token when one is given) and returns the body.
func scrape(t *testing.T, url, token string) string {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", b)
	return string(b)
}

// seriesValue finds the line of one series in a scrape and returns its value as written.
func seriesValue(body, series string) string {
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			return v
		}
	}
	return ""
}

// TestWorkerFlagsE2E builds the binary once for the worker's --metrics-addr and --http-allow.
func TestWorkerFlagsE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	srv := redistest.Shared(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}
	t.Run("Metrics", func(t *testing.T) { t.Parallel(); testMetricsE2E(t, c) })
	t.Run("HTTPAllow", func(t *testing.T) { t.Parallel(); testHTTPAllowE2E(t, c) })
}

// testMetricsE2E runs `conveyor worker --metrics-addr 127.0.0.1:0` and `conveyor serve` as a
// user would and scrapes them: the worker's counts of the jobs it ran, by outcome, and its
// queue's gauges; serve's queue gauges, behind its token.
func testMetricsE2E(t *testing.T, c *cli) {
	queue := redistest.UniqueName(t)

	w := c.start(t, "worker", "--queue", queue, "--metrics-addr", "127.0.0.1:0", "--backoff-base", "10ms",
		"--backoff-max", "20ms", "--log-format", "json")
	url := logged(t, w, metricsAddrLog, "the metrics address in the worker's log")
	c.ok(t, "publish", "--queue", queue, "--type", "echo", "--payload", `{"n":1}`, "--count", "3")
	c.ok(t, "publish", "--queue", queue, "--type", "fail", "--max-retries", "1")
	c.ok(t, "publish", "--queue", queue, "--type", "echo", "--delay", "1h")

	jobs := func(body, typ, outcome string) string {
		return seriesValue(body, fmt.Sprintf(`conveyor_jobs_total{outcome=%q,queue=%q,type=%q}`, outcome, queue, typ))
	}
	var body string
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the jobs counted", func() bool {
		body = scrape(t, url, "")
		return jobs(body, "echo", "completed") == "3" && jobs(body, "fail", "dead") == "1"
	})
	require.Equal(t, "1", jobs(body, "fail", "retry"))
	require.Equal(t, "0", jobs(body, "echo", "retry"))
	require.Equal(t, "5", seriesValue(body, fmt.Sprintf(`conveyor_job_queue_latency_seconds_count{queue=%q}`, queue)))
	require.Equal(t, "1", seriesValue(body, fmt.Sprintf(`conveyor_scheduler_promoted_total{queue=%q}`, queue)))
	require.Contains(t, body, `conveyor_redis_errors_total{kind="connection"} 0`)
	require.Contains(t, body, "go_goroutines ")
	require.Contains(t, body, "process_resident_memory_bytes ")
	// The queue's gauges (a reading at most 5s old: the delayed job was published before the
	// first scrape).
	require.Equal(t, "1", seriesValue(body, fmt.Sprintf(`conveyor_queue_jobs{queue=%q,state="scheduled"}`, queue)))
	require.Equal(t, 0, w.stop(t), "worker exit code after SIGTERM")

	const token = "metrics-token"
	p := startServe(t, c, serveEnv(c.url, token), "serve", "--addr", "127.0.0.1:0", "--redis", c.url)
	base := "http://" + logged(t, p, serveAddr, "serve's address in its log")
	res, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "the token guards /metrics")
	body = scrape(t, base+"/metrics", token)
	require.Equal(t, "1", seriesValue(body, fmt.Sprintf(`conveyor_queue_jobs{queue=%q,state="scheduled"}`, queue)))
	require.Equal(t, "3", seriesValue(body, fmt.Sprintf(`conveyor_queue_completed_total{queue=%q}`, queue)))
	require.Equal(t, "1", seriesValue(body, fmt.Sprintf(`conveyor_queue_failed_total{queue=%q}`, queue)))
	require.Equal(t, 0, p.stop(t))
}

// testHTTPAllowE2E: the worker's http handler refuses a loopback test server by default (the
// job dies, saying why) and reaches it with --http-allow 127.0.0.1.
func testHTTPAllowE2E(t *testing.T, c *cli) {
	hits := make(chan struct{}, 10)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits <- struct{}{}
		_, _ = io.WriteString(w, "reached")
	}))
	t.Cleanup(target.Close)
	payload := fmt.Sprintf(`{"url":%q}`, target.URL)

	for _, tc := range []struct {
		name   string
		allow  []string
		status string
	}{
		{"Refused", nil, "failed"},
		{"Allowed", []string{"--http-allow", "10.0.0.0/8", "--http-allow", "127.0.0.1"}, "completed"},
	} {
		queue := redistest.UniqueName(t)
		w := c.start(t, append([]string{"worker", "--queue", queue}, tc.allow...)...)
		id := strings.TrimSpace(c.ok(t, "publish", "--queue", queue, "--type", "http", "--payload", payload, "--max-retries", "0"))
		var j jobView
		waitFor(t, 30*time.Second, 20*time.Millisecond, tc.name+": the job to end", func() bool {
			j = c.status(t, "--queue", queue, id)
			return j.Status == "completed" || j.Status == "failed"
		})
		require.Equal(t, tc.status, j.Status, "%s: %+v", tc.name, j)
		if tc.status == "failed" {
			require.Contains(t, j.LastError, "destination refused")
			require.Empty(t, hits, "nothing reached the server")
		} else {
			var res struct {
				Status int    `json:"status"`
				Body   string `json:"body"`
			}
			require.NoError(t, json.Unmarshal(j.Result, &res))
			require.Equal(t, http.StatusOK, res.Status)
			require.Equal(t, "reached", res.Body)
			require.Len(t, hits, 1)
		}
		require.Equal(t, 0, w.stop(t))
	}
}
