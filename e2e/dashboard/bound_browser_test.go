package dashboard_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// Issue 35: a bounded queue's page shows its bound, the jobs waiting against it and the
// publishes refused at it; its form sets the bound, the policy and the bound per limit key
// (PATCH settings), and a drop at the new bound is counted there too.
func TestDashboardBoundBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	dir := artifactDir(t)
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	_, err = insp.CreateQueue(ctx, "mail", pipeline.QueueOptions{})
	require.NoError(t, err)
	three := 3
	_, err = insp.UpdateQueue(ctx, "mail", pipeline.QueuePatch{MaxWaiting: &three})
	require.NoError(t, err)
	for range 3 {
		_, err = client.Enqueue(ctx, "mail", pipeline.Task{Type: "send"})
		require.NoError(t, err)
	}
	_, err = client.Enqueue(ctx, "mail", pipeline.Task{Type: "send"})
	require.ErrorIs(t, err, pipeline.ErrQueueFull)
	ts := httptest.NewServer(dashboardAPI(t, client, insp))
	t.Cleanup(ts.Close)

	b := newBrowser(t, chrome, dir)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	b.do("load the queue's page", chromedp.Navigate(ts.URL+"/#/queues/mail"), chromedp.WaitVisible(css("#token-input")))
	b.do("enter the token",
		chromedp.SendKeys(css("#token-input"), dashToken),
		chromedp.Click(css("#token-form button[type=submit]")),
		chromedp.WaitNotVisible(css("#token")))
	b.poll("the bound, the count against it and the refusal show", `(() => {
		const l = document.querySelector('.bound-line[data-field="bound"]');
		const r = document.querySelector('.bound-counters [data-field="rejected_full"] dd');
		const d = document.querySelector('.bound-counters [data-field="dropped_full"] dd');
		return l !== null && l.dataset.maxWaiting === '3' && l.textContent.startsWith('3 / 3 waiting') &&
			l.querySelector('.bound-policy').dataset.policy === 'reject' &&
			document.querySelector('meter.bound-meter').value === 3 &&
			r !== null && r.textContent === '1' && d.textContent === '0' &&
			document.querySelector('#bound-max').value === '3' && document.querySelector('#bound-policy').value === 'reject' &&
			document.querySelector('.bound-line[data-field="bound-per-key"]').dataset.maxWaitingPerKey === '0' &&
			document.querySelector('#bound-per-key').value === '0';
	})()`)
	b.noSideScroll("desktop queue bound")
	b.do("show the bound", chromedp.ScrollIntoView(css("section.bound")))
	b.shot("desktop-bound")

	b.do("set the bound from the form",
		chromedp.SetValue(css("#bound-max"), "5"),
		chromedp.SetValue(css("#bound-policy"), "drop-oldest"),
		chromedp.SetValue(css("#bound-per-key"), "4"),
		chromedp.Click(css(`#bound-form button[type=submit]`)))
	b.poll("the new bound shows", `(() => {
		const l = document.querySelector('.bound-line[data-field="bound"]');
		const k = document.querySelector('.bound-line[data-field="bound-per-key"]');
		return l !== null && l.dataset.maxWaiting === '5' && l.textContent.startsWith('3 / 5 waiting') &&
			l.querySelector('.bound-policy').dataset.policy === 'drop-oldest' &&
			k !== null && k.dataset.maxWaitingPerKey === '4' && k.textContent.startsWith('At most 4 unfinished jobs per limit key') &&
			document.querySelector('#bound-per-key').value === '4';
	})()`)
	set, err := insp.QueueSettings(ctx, "mail")
	require.NoError(t, err)
	require.Equal(t, 5, set.MaxWaiting)
	require.Equal(t, pipeline.FullDropOldest, set.FullPolicy)
	require.Equal(t, 4, set.MaxWaitingPerKey)

	// Three more: two fill the new bound, the third drops the oldest to get in.
	for range 3 {
		_, err = client.Enqueue(ctx, "mail", pipeline.Task{Type: "send"})
		require.NoError(t, err)
	}
	b.poll("the drop is counted", `(() => {
		const l = document.querySelector('.bound-line[data-field="bound"]');
		const d = document.querySelector('.bound-counters [data-field="dropped_full"] dd');
		return l.textContent.startsWith('5 / 5 waiting') && d.textContent === '1';
	})()`)

	// The browser's own check stops a negative number (min="0"); an empty field is the page's.
	b.do("an empty bound is refused at the edge",
		chromedp.SetValue(css("#bound-max"), ""),
		chromedp.Click(css(`#bound-form button[type=submit]`)))
	b.poll("the refusal says why", `document.body.textContent.includes('The bound is a whole number of jobs')`)
	set, err = insp.QueueSettings(ctx, "mail")
	require.NoError(t, err)
	require.Equal(t, 5, set.MaxWaiting, "an empty bound changes nothing")

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser console: %s", p)
	}
}
