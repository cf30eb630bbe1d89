package dashboard_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/keyring"
	"github.com/conveyorq/conveyor/pipeline"
)

// Issue 35: the Redis page's Keys card lists the server's key ids, the sealing one first; its
// "Re-seal with key k2" button is disabled, saying why, for a token that is not the payload
// token; with the payload token it asks, then calls POST /v1/keys/rotate until done (more
// values than one call examines: two calls), and shows the report. Afterwards a rotation finds
// every value current.
func TestDashboardKeysBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	dir := artifactDir(t)
	rdb := redistest.Start(t).Client(t)
	s1 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, keyring.KeySize))
	s2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{6}, keyring.KeySize))
	k1, err := keyring.Parse("k1 " + s1)
	require.NoError(t, err)
	k21, err := keyring.Parse("k2 " + s2 + "\nk1 " + s1)
	require.NoError(t, err)
	old, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Keys: k1})
	require.NoError(t, err)
	const values = 1500 // more than the dashboard's 1,000 a call
	jobtest.Fill(t, old, "vault", "charge", []byte(`{"card":"4111"}`), values)

	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Keys: k21, KeepSealed: true})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	const payToken = "pay-s3cret"
	s, err := api.New(client, insp, api.Config{AuthToken: dashToken, PayloadToken: payToken, Keys: k21, Dashboard: api.Dashboard()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)

	b := newBrowser(t, chrome, dir)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	b.do("load the Redis page", chromedp.Navigate(ts.URL+"/#/redis"), chromedp.WaitVisible(css("#token-input")))
	b.do("enter the API token",
		chromedp.SendKeys(css("#token-input"), dashToken),
		chromedp.Click(css("#token-form button[type=submit]")),
		chromedp.WaitNotVisible(css("#token")))
	b.poll("the keys are listed, k2 seals, and the button says it needs the payload token", `(() => {
		const ids = [...document.querySelectorAll('.keys .key-list li')].map((li) => li.dataset.key);
		const btn = document.querySelector('.keys button.rotate');
		const why = document.querySelector('.keys .rotate-why');
		return ids.join(',') === 'k2,k1' && document.querySelector('.keys li[data-key="k2"] .key-sealing') !== null &&
			document.querySelector('.keys li[data-key="k1"] .key-sealing') === null &&
			btn !== null && btn.disabled && btn.textContent === 'Re-seal with key k2' &&
			why !== null && why.textContent.includes('payload token');
	})()`)
	b.shot("keys-no-payload-token")

	b.do("forget the token", chromedp.Click(css("#forget-token")), chromedp.WaitVisible(css("#token-input")))
	b.do("enter the payload token",
		chromedp.SendKeys(css("#token-input"), payToken),
		chromedp.Click(css("#token-form button[type=submit]")),
		chromedp.WaitNotVisible(css("#token")))
	b.poll("the button is enabled", `(() => {
		const btn = document.querySelector('.keys button.rotate');
		return btn !== null && !btn.disabled && document.querySelector('.keys .rotate-why') === null;
	})()`)
	b.do("ask to re-seal", chromedp.Click(css(".keys button.rotate")), chromedp.WaitVisible(css(".keys .confirm-yes")))
	b.do("confirm", chromedp.Click(css(".keys .confirm-yes")))
	b.poll("the report: every value re-sealed in two calls", `(() => {
		const done = document.querySelector('.keys .rotate-done');
		const queued = document.querySelector('.keys .rotate-report tr[data-place="queued"] td[data-field="resealed"]');
		return done !== null && done.textContent.startsWith('Done: 1,500 values now under key k2, 0 already current (2 calls).') &&
			queued !== null && queued.textContent === '1,500' && !document.body.textContent.includes('4111');
	})()`)
	b.noSideScroll("keys")
	b.shot("keys-rotated")

	rep, err := insp.RotateKeys(context.Background(), "", k21, pipeline.RotateOptions{})
	require.NoError(t, err)
	require.Equal(t, values, rep.Total.Current, "%+v", rep.Total)
	require.Zero(t, rep.Total.Changed())

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser console: %s", p)
	}
}
