package dashboard_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
)

// Issue 35: a job whose payload is encrypted at rest, shown to a token that may not see it,
// is its placeholder under a lock, on its page and in its list, and its plaintext is nowhere;
// so are the log lines a worker with keys sealed, on the job's Logs card.
func TestDashboardSealedBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	dir := artifactDir(t)
	rdb := redistest.Start(t).Client(t)
	k, err := keyring.Parse("k1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, keyring.KeySize)))
	require.NoError(t, err)
	sealing, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Keys: k})
	require.NoError(t, err)
	_, err = sealing.Enqueue(context.Background(), "vault", pipeline.Task{Type: "charge", Payload: []byte(`{"card":"4111"}`)},
		pipeline.WithID("secret-1"), pipeline.WithDelay(time.Hour))
	require.NoError(t, err)
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"vault-logs"}, Keys: k})
	require.NoError(t, err)
	w.Handle("charge", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		j.Logf("charging card %s", j.Payload)
		return nil, nil
	})
	jobtest.RunWorker(t, w)
	_, err = sealing.Enqueue(context.Background(), "vault-logs", pipeline.Task{Type: "charge", Payload: []byte(`4111`)},
		pipeline.WithID("logged-1"))
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = sealing.Wait(waitCtx, "vault-logs", "logged-1")
	require.NoError(t, err)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	ts := httptest.NewServer(dashboardAPI(t, client, insp))
	t.Cleanup(ts.Close)

	b := newBrowser(t, chrome, dir)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	b.do("load the sealed job's page", chromedp.Navigate(ts.URL+"/#/jobs/vault/secret-1"), chromedp.WaitVisible(css("#token-input")))
	b.do("enter the token",
		chromedp.SendKeys(css("#token-input"), dashToken),
		chromedp.Click(css("#token-form button[type=submit]")),
		chromedp.WaitNotVisible(css("#token")))
	b.poll("the payload is its placeholder under a lock", `(() => {
		const s = document.querySelector('.payload .sealed');
		return s !== null && s.querySelector('pre').textContent === '<encrypted, 15 bytes, key k1>' &&
			s.textContent.includes('\u{1F512}') && !document.body.textContent.includes('4111');
	})()`)
	b.shot("job-sealed")
	b.route("#/queues/vault/scheduled")
	b.poll("the list's preview is locked", `(() => {
		const c = document.querySelector('tr[data-job="secret-1"] td.payload code');
		return c !== null && c.textContent.startsWith('\u{1F512} <encrypted, 15 bytes') && !document.body.textContent.includes('4111');
	})()`)
	b.route("#/jobs/vault-logs/logged-1")
	b.poll("the sealed log lines are their placeholder under a lock", `(() => {
		const s = document.querySelector('.logs .log-attempt .sealed');
		return s !== null && /^<encrypted, \d+ bytes, key k1>$/.test(s.querySelector('pre.log-lines').textContent) &&
			s.textContent.includes('\u{1F512}') && document.querySelector('.logs .log-attempt > pre') === null &&
			!document.body.textContent.includes('4111');
	})()`)
	b.shot("logs-sealed")

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser console: %s", p)
	}
}
