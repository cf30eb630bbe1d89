package dashboard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// dashConsole is a queue no worker reads, with a retry, delayed, queued and dead jobs for the
// row actions.
const dashConsole = "console"

// Issue 20's actions where the rows are: run now, cancel and delete on scheduled and queued
// rows; a retry marked apart with its folded last error; two dead rows selected and replayed;
// purge all with its confirm; and the Redis page.
func TestDashboardRowActions(t *testing.T) {
	chrome := chromiumPath(t)
	dir := artifactDir(t)
	f := newDashFixture(t)
	ctx := context.Background()
	rdb := f.client.Redis()
	// Seeded in stream order: a seeded retry and dead jobs are read from the stream first.
	longErr := "upstream refused the export: HTTP 503 Service Unavailable\n" + strings.Repeat("stack frame of the failing call\n", 8)
	retry := jobtest.Seed(t, rdb, dashConsole, jobtest.Retry, jobtest.Opts{Reason: longErr,
		Task: pipeline.Task{Type: "export", Payload: []byte(`{"export":"monthly","rows":12000,"format":"csv","to":"ops@example.com"}`)}})
	var dead []string
	for range 4 {
		dead = append(dead, jobtest.Seed(t, rdb, dashConsole, status.Failed, jobtest.Opts{Reason: "import rejected"}).ID)
	}
	f.publish(t, dashConsole, "delayed-1", "remind", `{"to":"ada@example.com"}`, pipeline.WithDelay(time.Hour))
	f.publish(t, dashConsole, "delayed-2", "remind", `{"to":"bob@example.com"}`, pipeline.WithDelay(2*time.Hour))
	f.publish(t, dashConsole, "queued-1", "render", `{"report":1}`)
	f.publish(t, dashConsole, "queued-2", "render", `{"report":2}`)
	jobStatus := func(id string) status.Status {
		t.Helper()
		j, err := f.insp.Get(ctx, dashConsole, id)
		if errors.Is(err, pipeline.ErrNotFound) {
			return "gone"
		}
		if err != nil {
			t.Fatal(err)
		}
		return j.Status
	}

	b := newBrowser(t, chrome, dir)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	b.do("load the dashboard", chromedp.Navigate(f.url+"/#/queues/"+dashConsole+"/scheduled"), chromedp.WaitVisible(css("#token-input")))
	b.do("enter the token",
		chromedp.SendKeys(css("#token-input"), dashToken),
		chromedp.Click(css("#token-form button[type=submit]")),
		chromedp.WaitVisible(css(`tr[data-job="delayed-1"] button.run-now`)))

	// The retry is marked apart from the delayed jobs, with its last error folded.
	row := func(id string) string { return `document.querySelector('tr[data-job="` + id + `"]')` }
	b.poll("the retry is marked, its error folded", `(() => {
		const r = `+row(retry.ID)+`, d = `+row("delayed-1")+`;
		return r && d && r.querySelector('.why-badge').dataset.why === 'retry' &&
			d.querySelector('.why-badge').dataset.why === 'delayed' &&
			r.querySelector('details.fold summary').textContent.startsWith('upstream refused the export') &&
			!r.querySelector('details.fold').open &&
			r.querySelector('.preview').textContent.endsWith('…');
	})()`)
	b.do("unfold the retry's error", chromedp.Click(css(`tr[data-job="`+retry.ID+`"] details.fold summary`)))
	b.poll("the whole error shows", row(retry.ID)+`.querySelector('details.fold').open &&
		`+row(retry.ID)+`.querySelector('details.fold pre').textContent.includes('stack frame')`)
	b.shot("row-actions")

	b.do("run a delayed job now", chromedp.Click(css(`tr[data-job="delayed-1"] button.run-now`)),
		chromedp.WaitNotPresent(css(`tr[data-job="delayed-1"]`)))
	if s := jobStatus("delayed-1"); s != status.Queued {
		t.Errorf("delayed-1 after run now: %s, want queued", s)
	}
	b.do("cancel a delayed job", chromedp.Click(css(`tr[data-job="delayed-2"] button.cancel`)),
		chromedp.WaitVisible(css(`tr[data-job="delayed-2"] button.confirm-yes`)),
		chromedp.Click(css(`tr[data-job="delayed-2"] button.confirm-yes`)),
		chromedp.WaitNotPresent(css(`tr[data-job="delayed-2"]`)))
	if s := jobStatus("delayed-2"); s != status.Canceled {
		t.Errorf("delayed-2 after cancel: %s, want canceled", s)
	}

	b.route("#/queues/" + dashConsole + "/queued")
	b.do("delete a queued job", chromedp.WaitVisible(css(`tr[data-job="queued-2"] button.delete`)),
		chromedp.Click(css(`tr[data-job="queued-2"] button.delete`)),
		chromedp.WaitVisible(css(`tr[data-job="queued-2"] button.confirm-yes`)),
		chromedp.Click(css(`tr[data-job="queued-2"] button.confirm-yes`)),
		chromedp.WaitNotPresent(css(`tr[data-job="queued-2"]`)))
	if s := jobStatus("queued-2"); s != "gone" {
		t.Errorf("queued-2 after delete: %s, want no record", s)
	}

	// The dead list: select two rows and replay them, after a confirm that counts them.
	b.route("#/queues/" + dashConsole + "/failed")
	b.do("select two dead jobs", chromedp.WaitVisible(css(`tr[data-job="`+dead[0]+`"] input.select`)),
		chromedp.Click(css(`tr[data-job="`+dead[0]+`"] input.select`)),
		chromedp.Click(css(`tr[data-job="`+dead[1]+`"] input.select`)))
	b.poll("the selection is counted", `document.querySelector('button.replay-selected').textContent === 'Replay selected (2)' &&
		!document.querySelector('button.replay-selected').disabled`)
	b.do("ask to replay the selection", chromedp.Click(css(`button.replay-selected`)),
		chromedp.WaitVisible(css(`.dead-tools button.confirm-yes`)))
	b.poll("the confirm says how many", `document.querySelector('.dead-tools .confirm-q').textContent.includes('2 selected dead jobs')`)
	b.shot("dead-bulk")
	b.do("confirm the replay", chromedp.Click(css(`.dead-tools button.confirm-yes`)),
		chromedp.WaitNotPresent(css(`tr[data-job="`+dead[0]+`"]`)),
		chromedp.WaitNotPresent(css(`tr[data-job="`+dead[1]+`"]`)))
	b.poll("the summary says both", `document.querySelector('#notice').textContent.includes('Replayed 2 of the 2 selected dead jobs')`)
	for _, id := range dead[:2] {
		if s := jobStatus(id); s != status.Queued {
			t.Errorf("%s after replay: %s, want queued", id, s)
		}
	}

	b.do("ask to purge all", chromedp.WaitVisible(css(`tr[data-job="`+dead[2]+`"]`)),
		chromedp.Click(css(`button.purge-all-btn`)),
		chromedp.WaitVisible(css(`.dead-tools button.confirm-yes`)))
	b.poll("the purge confirm counts the dead jobs",
		`document.querySelector('.dead-tools .confirm-q').textContent.includes('Purge all 2 dead jobs of `+dashConsole+`')`)
	b.do("confirm the purge", chromedp.Click(css(`.dead-tools button.confirm-yes`)),
		chromedp.WaitVisible(css(`.list-body .empty`)))
	for _, id := range dead[2:] {
		if s := jobStatus(id); s != "gone" {
			t.Errorf("%s after purge all: %s, want gone", id, s)
		}
	}

	// The Redis page: the server, the queues' memory and the doctor's findings.
	b.route("#/redis")
	b.do("the Redis page", chromedp.WaitVisible(css(`.redis-node [data-field="memory"]`)),
		chromedp.WaitVisible(css(`.queue-memory tr[data-queue="`+dashConsole+`"]`)),
		chromedp.WaitVisible(css(`.findings tr[data-check="eviction"]`)))
	b.poll("the Redis page names the version and eviction policy",
		`/\d+\.\d+/.test(document.querySelector('.redis-node [data-field="version"] dd').textContent) &&
		 document.querySelector('.redis-node [data-field="eviction"] dd').textContent !== ''`)
	b.noSideScroll("desktop redis")
	b.shot("redis")

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser console: %s", p)
	}
	t.Logf("screenshots in %s", dir)
}
