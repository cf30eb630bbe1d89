package dashboard_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/conveyorq/conveyor/pipeline"
)

// Issue 20: a queue's Completed and Canceled tabs list its finished jobs, and a job's page
// shows its attempts; issue 35: and what each attempt logged. Screenshots: completed, attempts,
// logs.
func TestDashboardFinished(t *testing.T) {
	chrome := chromiumPath(t)
	dir := artifactDir(t)
	f := newDashFixture(t)
	// A job of imports that fails its first attempt and completes its second (the worker's
	// "flaky" handler), and a canceled job of orders.
	f.publish(t, dashImports, "flaky-attempts", "flaky", `{"import":"attempts"}`, pipeline.WithMaxRetries(2))
	f.waitStats(t, dashImports, func(s *pipeline.QueueStats) bool { return s.Completed == 1 })
	if err := f.client.Cancel(context.Background(), dashOrders, "later-1"); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, chrome, dir)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }

	b.do("load the completed jobs of orders", chromedp.Navigate(f.url+"/#/queues/orders/completed"),
		chromedp.WaitVisible(css("#token-input")))
	b.do("enter the token",
		chromedp.SendKeys(css("#token-input"), dashToken),
		chromedp.Click(css("#token-form button[type=submit]")),
		chromedp.WaitNotVisible(css("#token")))
	rows := `document.querySelectorAll('table.jobs tbody tr[data-job]')`
	b.poll("the Completed tab lists the three orders, with their worker",
		rows+`.length === 3 && ['order-1', 'order-2', 'order-3'].every((id) => document.querySelector('tr[data-job="' + id + '"]')) &&
		 document.querySelector('tr[data-job="order-1"] td[data-label="Worker"]').textContent === 'dash-worker-1' &&
		 document.querySelector('.tabs a[aria-current="page"]').dataset.state === 'completed'`)
	b.noSideScroll("completed")
	b.shot("completed")

	b.do("open the Canceled tab", chromedp.Click(css(`.tabs a[data-state="canceled"]`)))
	// Newest first: later-1, canceled here, then the fixture's dropped-1.
	b.poll("the Canceled tab lists the canceled jobs",
		rows+`.length === 2 && `+rows+`[0].dataset.job === 'later-1' && `+rows+`[1].dataset.job === 'dropped-1'`)

	b.route("#/jobs/imports/flaky-attempts")
	b.poll("the job page shows two attempts: retried with its error, then completed", `(() => {
		const tr = document.querySelectorAll('table.attempts-table tbody tr');
		return tr.length === 2 &&
			tr[0].dataset.outcome === 'retry' && tr[0].dataset.attempt === '1' &&
			tr[0].querySelector('[data-field="error"]').textContent === 'flaky: first attempts fail' &&
			tr[1].dataset.outcome === 'completed' && tr[1].dataset.attempt === '2' &&
			[...tr].every((r) => r.querySelector('td[data-label="Worker"]').textContent === 'dash-worker-1');
	})()`)
	b.do("scroll to the attempts", chromedp.ScrollIntoView(css("section.attempts")))
	b.noSideScroll("attempts")
	b.shot("attempts")

	// Issue 35: the lines its handler logged, an attempt at a time, beside the attempts.
	b.poll("the job page shows each attempt's logged line", `(() => {
		const as = document.querySelectorAll('section.logs .log-attempt');
		return as.length === 2 &&
			as[0].dataset.attempt === '1' && as[0].dataset.outcome === 'retry' &&
			as[0].querySelector('pre.log-lines').textContent.includes('INFO flaky: attempt 1') &&
			as[1].dataset.attempt === '2' && as[1].dataset.outcome === 'completed' &&
			as[1].querySelector('pre.log-lines').textContent.includes('INFO flaky: attempt 2') &&
			document.querySelector('section.attempts').compareDocumentPosition(document.querySelector('section.logs')) === Node.DOCUMENT_POSITION_FOLLOWING;
	})()`)
	b.do("scroll to the logs", chromedp.ScrollIntoView(css("section.logs")))
	b.noSideScroll("logs")
	b.shot("logs")

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser console: %s", p)
	}
}
