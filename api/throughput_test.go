package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
)

type throughputView struct {
	IntervalSeconds float64 `json:"interval_seconds"`
	WindowSeconds   float64 `json:"window_seconds"`
	Queue           string  `json:"queue"`
	Samples         []struct {
		T         int64   `json:"t"`
		Completed float64 `json:"completed"`
		Failed    float64 `json:"failed"`
		Retried   float64 `json:"retried"`
	} `json:"samples"`
}

// Jobs completed by a worker show up in the chart's samples, summed and per queue.
func TestThroughput(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{cfg: api.Config{ThroughputInterval: 50 * time.Millisecond}})
	r := e.do("GET", "/v1/throughput", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var tp throughputView
	r.json(t, &tp)
	require.Equal(t, 0.05, tp.IntervalSeconds)
	require.Equal(t, (15 * time.Minute).Seconds(), tp.WindowSeconds)
	require.NotNil(t, tp.Samples)

	e.worker()
	for range 20 {
		e.post(`{"type":"echo"}`, http.StatusAccepted)
	}
	e.post(`{"type":"fail"}`, http.StatusAccepted)
	for _, q := range []string{"", "?queue=" + e.queue} {
		require.Eventually(t, func() bool {
			r := e.do("GET", "/v1/throughput"+q, "")
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			var tp throughputView
			r.json(t, &tp)
			var completed, failed float64
			for _, s := range tp.Samples {
				require.Positive(t, s.T)
				completed += s.Completed
				failed += s.Failed
			}
			return completed > 0 && failed > 0
		}, 30*time.Second, 20*time.Millisecond, "completed and failed jobs in the samples of %q", q)
	}
	r = e.do("GET", "/v1/throughput?queue=nope", "")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	require.Equal(t, api.CodeNotFound, r.apiErr(t).Code)
}
