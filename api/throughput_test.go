package api_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
)

type throughputView struct {
	IntervalSeconds float64 `json:"interval_seconds"`
	WindowSeconds   float64 `json:"window_seconds"`
	Queue           string  `json:"queue"`
	Resolution      string  `json:"resolution"`
	Samples         []struct {
		T         int64   `json:"t"`
		Completed float64 `json:"completed"`
		Failed    float64 `json:"failed"`
		Retried   float64 `json:"retried"`
		WaitP50   float64 `json:"wait_p50_ms"`
		WaitP99   float64 `json:"wait_p99_ms"`
		ExecP50   float64 `json:"exec_p50_ms"`
		ExecP99   float64 `json:"exec_p99_ms"`
	} `json:"samples"`
	Total struct {
		Completed int64   `json:"completed"`
		Failed    int64   `json:"failed"`
		Retried   int64   `json:"retried"`
		WaitP50   float64 `json:"wait_p50_ms"`
		WaitP99   float64 `json:"wait_p99_ms"`
		ExecP50   float64 `json:"exec_p50_ms"`
		ExecP99   float64 `json:"exec_p99_ms"`
	} `json:"total"`
}

func (e *apiEnv) throughput(t *testing.T, query string) throughputView {
	t.Helper()
	r := e.do("GET", "/v1/throughput"+query, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var tp throughputView
	r.json(t, &tp)
	return tp
}

// Jobs completed by a worker show up in the chart's samples, summed and per queue, with their
// queue wait and execution time; and they are still there for a new Server (a restart of
// `conveyor serve`): the history is the workers', in Redis.
func TestThroughput(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tp := e.throughput(t, "")
	require.Equal(t, 5.0, tp.IntervalSeconds)
	require.Equal(t, "5s", tp.Resolution)
	require.Equal(t, (15 * time.Minute).Seconds(), tp.WindowSeconds)
	require.InDelta(t, 180, len(tp.Samples), 1)

	e.worker()
	for range 20 {
		e.post(`{"type":"echo"}`, http.StatusAccepted)
	}
	e.post(`{"type":"fail"}`, http.StatusAccepted)
	check := func(q string) {
		t.Helper()
		require.Eventually(t, func() bool {
			tp := e.throughput(t, q)
			var completed, failed float64
			var wait float64
			for _, s := range tp.Samples {
				require.Positive(t, s.T)
				completed += s.Completed
				failed += s.Failed
				wait = max(wait, s.WaitP99)
			}
			return completed > 0 && failed > 0 && wait > 0 && tp.Total.Completed == 20 && tp.Total.Failed == 1 &&
				tp.Total.WaitP99 > 0 && tp.Total.ExecP99 > 0
		}, 30*time.Second, 20*time.Millisecond, "completed and failed jobs in the samples of %q", q)
	}
	check("?queue=" + e.queue)
	check("")

	// A new Server over the same Redis: the chart is full at once.
	require.NoError(t, e.api.Close())
	e.http.Close()
	srv, err := api.New(e.client, e.insp, api.Config{})
	require.NoError(t, err)
	e.api, e.http = srv, httptest.NewServer(srv)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	check("?queue=" + e.queue)
	tp = e.throughput(t, "?queue="+e.queue+"&resolution=1m&window=2h")
	require.Equal(t, 60.0, tp.IntervalSeconds)
	require.Equal(t, (2 * time.Hour).Seconds(), tp.WindowSeconds)
	tp = e.throughput(t, "?resolution=5s&window=3h")
	require.Equal(t, time.Hour.Seconds(), tp.WindowSeconds, "cut to what the resolution keeps")

	for _, q := range []string{"?resolution=1s", "?window=soon", "?window=-1m"} {
		r := e.do("GET", "/v1/throughput"+q, "")
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", q, r.body)
		require.Equal(t, api.CodeInvalidArgument, r.apiErr(t).Code)
	}
	r := e.do("GET", "/v1/throughput?queue=nope", "")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	require.Equal(t, api.CodeNotFound, r.apiErr(t).Code)
}
