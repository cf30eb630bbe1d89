package dashboard_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/conveyorq/conveyor/pipeline"
)

// The Redis page against the embedded Redis of `conveyor demo --serve` (miniredis), which
// lacks INFO's sections, CONFIG and MEMORY USAGE: the page shows what the server reports and
// says what it does not (it read "Could not read Redis: internal error", its Servers stayed
// "Loading…", and the doctor advised ACL SETUSER +info).
func TestDashboardRedisEmbedded(t *testing.T) {
	chrome := chromiumPath(t)
	dir := artifactDir(t)
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(context.Background(), "demo", pipeline.Task{Type: "echo", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(dashboardAPI(t, client, insp))
	t.Cleanup(ts.Close)
	b := newBrowser(t, chrome, dir)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }

	b.do("load the Redis page", chromedp.Navigate(ts.URL+"/#/redis"), chromedp.WaitVisible(css("#token-input")))
	b.do("enter the token",
		chromedp.SendKeys(css("#token-input"), dashToken),
		chromedp.Click(css("#token-form button[type=submit]")),
		chromedp.WaitNotVisible(css("#token")))
	b.poll("the servers, the queues' jobs and the doctor show, and what the server lacks is named", `(() => {
		const node = document.querySelector('.redis-node');
		const lacks = document.querySelector('.redis-node [data-field="unsupported"]');
		const mem = document.querySelector('.redis-queues [data-field="memory_error"]');
		const jobs = document.querySelector('.redis-queues tr[data-queue="demo"] td[data-field="jobs"]');
		const findings = [...document.querySelectorAll('.redis-doctor tbody tr')];
		return node !== null && document.querySelector('.redis-nodes .loading') === null &&
			lacks !== null && lacks.textContent.includes('CONFIG GET') &&
			mem !== null && mem.textContent.includes('MEMORY USAGE') &&
			jobs !== null && jobs.textContent === '1' &&
			findings.length > 0 && findings.every((tr) => !tr.textContent.includes('ACL SETUSER')) &&
			document.querySelector('.error-box') === null;
	})()`)
	b.noSideScroll("redis embedded")
	b.shot("redis-embedded")

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser console: %s", p)
	}
}
