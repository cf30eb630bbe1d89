package dashboard_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Issue 20: the Workers page lists the fixture's live worker from its heartbeat record, with
// its queues, concurrency and the job it runs (hold-1), linked to the job's page.
func TestDashboardWorkersBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	dir := artifactDir(t)
	began := time.Now()
	f := newDashFixture(t)
	b := newBrowser(t, chrome, dir)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }

	b.do("load the workers page", chromedp.Navigate(f.url+"/#/workers"), chromedp.WaitVisible(css("#token-input")))
	b.do("enter the token",
		chromedp.SendKeys(css("#token-input"), dashToken),
		chromedp.Click(css("#token-form button[type=submit]")),
		chromedp.WaitNotVisible(css("#token")))
	row := `tr[data-worker="dash-worker-1"]`
	b.poll("the worker's row links its running job", `(() => {
		const tr = document.querySelector('`+row+`');
		if (!tr) return false;
		const a = tr.querySelector('td[data-field="jobs"] a[href="#/jobs/orders/hold-1"]');
		const cell = (f) => tr.querySelector('td[data-field="' + f + '"]').textContent;
		return a !== null && a.textContent === 'hold-1' && cell('queues') === 'orders, imports' &&
			cell('running') === '1 / 4' && /ago$/.test(cell('heartbeat')) && cell('pid') !== '' && cell('host') !== '';
	})()`)
	if cur := evalJS[string](b, `document.querySelector('#nav-workers').getAttribute('aria-current')`); cur != "page" {
		t.Errorf("the Workers nav entry is aria-current=%q, want page", cur)
	}
	b.noSideScroll("desktop workers")
	b.shot("workers")

	b.do("open the running job from the workers page",
		chromedp.Click(css(row+` td[data-field="jobs"] a`)),
		chromedp.WaitVisible(css(`.badge[data-status="in_progress"]`)))

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser console: %s", p)
	}
	t.Logf("workers browser test took %s; screenshots in %s", time.Since(began).Round(time.Millisecond), dir)
}
