package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// A demo that ran and finished before the page opened, and before the API server was started
// again, is on the chart: the throughput history is the workers', in Redis, not the server's.
// The queue page shows the queue wait and execution percentiles beside the chart.
func TestDashboardChartAfterRestart(t *testing.T) {
	chrome := chromiumPath(t)
	dir := artifactDir(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	const queue, jobs = "demo", 60

	// The demo: a worker runs the jobs and stops.
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{queue}, Name: "demo-worker",
		HistoryInterval: 100 * time.Millisecond, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	require.NoError(t, err)
	w.Handle("echo", func(_ context.Context, j *pipeline.Job) ([]byte, error) { return j.Payload, nil })
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for k := range jobs {
		_, err := client.Enqueue(context.Background(), queue, pipeline.Task{Type: "echo", Payload: []byte(fmt.Sprintf(`{"k":%d}`, k))})
		require.NoError(t, err)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h, err := insp.History(context.Background(), queue, pipeline.HistoryStepFine, time.Now().Add(-15*time.Minute))
		require.NoError(c, err)
		require.EqualValues(c, jobs, h.Total.Completed)
	}, 30*time.Second, 50*time.Millisecond, "the demo's jobs in the history")
	stop()
	require.NoError(t, <-done)

	// The first API server answers the history, and goes.
	first := httptest.NewServer(dashboardAPI(t, client, insp))
	req, err := http.NewRequest("GET", first.URL+"/v1/throughput?queue="+queue, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+dashToken)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NoError(t, res.Body.Close())
	first.Close()

	// A new one, and the page opened after it all.
	second := httptest.NewServer(dashboardAPI(t, client, insp))
	t.Cleanup(second.Close)
	b := newBrowser(t, chrome, dir)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	b.do("load the queue page", chromedp.Navigate(second.URL+"/#/queues/"+queue), chromedp.WaitVisible(css("#token-input")))
	b.do("enter the token",
		chromedp.SendKeys(css("#token-input"), dashToken),
		chromedp.Click(css("#token-form button[type=submit]")),
		chromedp.WaitNotVisible(css("#token")))
	b.poll("the chart has the demo's completions", `(() => {
		const d = document.querySelector('svg.chart desc');
		return d !== null && d.textContent.includes('completed peaked at') &&
			!d.textContent.includes('completed peaked at 0 per') && document.querySelectorAll('svg.chart .series').length === 3;
	})()`)
	b.poll("queue wait and execution percentiles beside the chart", `(() => {
		const dd = (k) => { const e = document.querySelector('.latency [data-field="' + k + '"] dd'); return e ? e.textContent : ''; };
		return ['wait_p50_ms', 'wait_p99_ms', 'exec_p50_ms', 'exec_p99_ms'].every((k) => dd(k) !== '' && dd(k) !== '–');
	})()`)
	// The chart and the percentiles under it in the one screenshot.
	b.do("scroll to the throughput card", chromedp.Evaluate[chromedp.Void](`document.querySelector('.latency').scrollIntoView({block: 'end'})`))
	b.shot("chart-after-restart")
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Empty(t, b.problems, "console errors")
}
