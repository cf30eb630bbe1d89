package api_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/metrics"
	"github.com/conveyorq/conveyor/pipeline"
)

// madeUpQueues is how many queue names TestMadeUpQueuesBounded posts to.
const madeUpQueues = 10_000

// Posting to made-up queue names grows nothing without bound: the known queues stop at the
// client's maximum (the rest are refused with 409), and with them the /metrics series and the
// queues each throughput sample keeps. 3,000 names gave 30,066 series before.
func TestMadeUpQueuesBounded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := setup(t, setupOpts{cfg: api.Config{Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}})
	// Each scrape an hour after the last: a fresh reading, not the cached one.
	var hours atomic.Int64
	qc, err := metrics.NewQueueCollector(e.insp, metrics.QueueCollectorConfig{
		Now: func() time.Time { return time.Unix(0, 0).Add(time.Duration(hours.Load()) * time.Hour) }})
	require.NoError(t, err)
	require.NoError(t, reg.Register(qc))
	series := func() int {
		hours.Add(1)
		r := e.do("GET", "/metrics", "")
		require.Equal(t, http.StatusOK, r.status)
		n := 0
		for sc := bufio.NewScanner(bytes.NewReader(r.body)); sc.Scan(); {
			if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
				n++
			}
		}
		return n
	}
	e.post(`{"type":"echo"}`, http.StatusAccepted)
	perQueue := series()

	limit := 2000 // InspectorConfig.MaxQueues's default, the server's here
	refused := 0
	for i := range madeUpQueues {
		r := e.do("POST", fmt.Sprintf("/v1/queues/made-up-%d/jobs", i), `{"type":"echo"}`)
		if r.status == http.StatusConflict {
			refused++
			ae := r.apiErr(t)
			require.Equal(t, api.ReasonTooManyQueues, ae.Reason)
			require.Contains(t, ae.Message, fmt.Sprint(limit))
			continue
		}
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	}
	require.Equal(t, madeUpQueues-(limit-1), refused, "every name past the maximum is refused")
	n, err := e.rdb.SCard(t.Context(), keys.Queues(e.prefix)).Result()
	require.NoError(t, err)
	require.EqualValues(t, limit, n, "known queues")

	got := series()
	t.Logf("/metrics: %d series with 1 queue, %d after posting to %d made-up names", perQueue, got, madeUpQueues)
	require.LessOrEqual(t, got, limit*perQueue, "series grow with the queues, which are bounded")
}

// A server whose client publishes only to existing queues (serve --create-queues=false)
// answers a POST to an unknown queue 404, saying how to create it, and writes nothing; once
// the queue is created (PUT /v1/queues/{queue}) it takes jobs.
func TestRequireQueuesOverHTTP(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{clientCfg: pipeline.ClientConfig{RequireQueues: true}})
	before := redisContents(t, e)
	for _, tc := range []struct{ path, body string }{
		{e.jobs(), `{"type":"echo"}`},
		{e.jobs() + ":batch", `{"jobs":[{"type":"echo"}]}`},
	} {
		r := e.do("POST", tc.path, tc.body)
		require.Equal(t, http.StatusNotFound, r.status, "%s: %s", tc.path, r.body)
		ae := r.apiErr(t)
		require.Equal(t, api.CodeNotFound, ae.Code)
		require.Contains(t, ae.Message, "PUT /v1/queues/"+e.queue)
		require.Contains(t, ae.Message, "--create-queues=false")
	}
	require.Equal(t, before, redisContents(t, e), "nothing written")

	r := e.do("PUT", "/v1/queues/"+e.queue, `{}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	e.post(`{"type":"echo"}`, http.StatusAccepted)
	r = e.do("POST", e.jobs()+":batch", `{"jobs":[{"type":"echo"}]}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
}
