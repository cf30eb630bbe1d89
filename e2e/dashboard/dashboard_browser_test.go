package dashboard_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// The browser test drives the embedded dashboard in headless Chromium against the real API
// handler, a private Redis and a real worker.
//
// Chromium: /usr/bin/chromium (Debian's package chromium), or $CONVEYOR_CHROMIUM. Without it
// the test fails, unless CONVEYOR_BROWSER_TEST=skip says to skip it. Screenshots go to
// test-artifacts/dashboard/ at the repository root, or to $CONVEYOR_TEST_ARTIFACTS/dashboard.

const (
	dashToken   = "dash-s3cret"
	dashOrders  = "orders"  // a queue a worker serves
	dashReports = "reports" // a queue no worker reads: its jobs stay queued
	dashImports = "imports" // a queue a worker serves, for the chart's failures and retries
	dashTicks   = "ticks"   // a queue no worker reads, where the schedules test's heartbeat enqueues

	dashReportsQueued = 30 // a page and a bit
)

// chromiumPath finds the browser, or fails (skips with CONVEYOR_BROWSER_TEST=skip) saying how to
// install it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p := cmp.Or(os.Getenv("CONVEYOR_CHROMIUM"), "/usr/bin/chromium")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CONVEYOR_BROWSER_TEST") == "skip" {
			t.Skipf("dashboard browser test skipped: no Chromium at %s and CONVEYOR_BROWSER_TEST=skip", p)
		}
		t.Fatalf("dashboard browser test needs Chromium at %s: run `apt-get install -y chromium` "+
			"(or set CONVEYOR_CHROMIUM to a Chromium binary; CONVEYOR_BROWSER_TEST=skip skips the test): %v", p, err)
	}
	return p
}

// artifactDir is test-artifacts/dashboard at the repository root (the directory of the go.mod
// above the package), created if needed.
func artifactDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("CONVEYOR_TEST_ARTIFACTS")
	if root == "" {
		dir, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		for {
			if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/conveyorq/conveyor\n")) {
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				t.Fatal("no repository root (go.mod of github.com/conveyorq/conveyor) above the working directory")
			}
			dir = parent
		}
		root = filepath.Join(dir, "test-artifacts")
	}
	dir := filepath.Join(root, "dashboard")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// dashFixture is a private Redis with jobs in every state, a worker and the API server.
type dashFixture struct {
	steps   chan int // the "steps" handler reports each percent sent, and returns when it closes
	insp    *pipeline.Inspector
	client  *pipeline.Client
	failing atomic.Bool // the "charge" handler fails while set
	url     string
}

func newDashFixture(t *testing.T) *dashFixture {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	f := &dashFixture{insp: insp, client: client, steps: make(chan int)}
	f.failing.Store(true)
	// The worker serves orders and imports: echo completes, charge fails while failing is set
	// (with no retries: a poison job goes straight to the dead set), hold runs until the test
	// ends, flaky fails its first attempt, reject always fails for good.
	release := make(chan struct{})
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{
		Queues:          []string{dashOrders, dashImports},
		Name:            "dash-worker-1",
		Concurrency:     4,
		Backoff:         pipeline.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		ShutdownTimeout: 2 * time.Second,
		HistoryInterval: 100 * time.Millisecond, // the chart's history: in Redis within 0.1 s
		Logger:          zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	require.NoError(t, err)
	w.Handle("echo", func(_ context.Context, j *pipeline.Job) ([]byte, error) { return j.Payload, nil })
	w.Handle("charge", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		if f.failing.Load() {
			return nil, errors.New("card declined by the test's payment stub")
		}
		return []byte(`{"charged":true,"receipt":"r-` + j.ID + `"}`), nil
	})
	w.Handle("flaky", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		j.Logf("flaky: attempt %d", j.Attempt) // the job page's logs (finished_browser_test.go)
		if j.Attempt == 1 {
			return nil, errors.New("flaky: first attempts fail")
		}
		return []byte(`"ok"`), nil
	})
	w.Handle("reject", func(context.Context, *pipeline.Job) ([]byte, error) {
		return nil, pipeline.SkipRetry(errors.New("rejected: malformed import"))
	})
	w.Handle("hold", func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	})
	w.Handle("steps", func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		for {
			select {
			case p, ok := <-f.steps:
				if !ok {
					return []byte(`"stepped"`), nil
				}
				if err := j.Progress(ctx, p, fmt.Sprintf("step %d of 100", p)); err != nil {
					return nil, err
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	})
	jobtest.RunWorker(t, w)
	// Cleanups run last-in first-out: the held job is released before the worker is stopped.
	t.Cleanup(func() { close(release) })

	publish := f.publish
	for k := 1; k <= 3; k++ {
		publish(t, dashOrders, fmt.Sprintf("order-%d", k), "echo", fmt.Sprintf(`{"order":%d,"to":"ada@example.com"}`, k),
			pipeline.WithMetadata(map[string]string{"source": "dashboard-test"}))
	}
	for _, id := range []string{"charge-7", "charge-8", "charge-9"} {
		publish(t, dashOrders, id, "charge", `{"amount":1999,"currency":"EUR"}`, pipeline.WithMaxRetries(0))
	}
	publish(t, dashOrders, "hold-1", "hold", `{"seconds":3600}`)
	publish(t, dashOrders, "later-1", "echo", `{"reminder":"renew","to":"ada@example.com"}`, pipeline.WithDelay(time.Hour))
	// A canceled job, so that the overview's Canceled column has a count to show.
	publish(t, dashOrders, "dropped-1", "echo", `{"reminder":"dropped"}`, pipeline.WithDelay(time.Hour))
	require.NoError(t, client.Cancel(context.Background(), dashOrders, "dropped-1"))
	// More queued reports than a page of the dashboard's lists (25) holds.
	for k := 1; k <= dashReportsQueued; k++ {
		payload := fmt.Sprintf(`{"report":%d}`, k)
		if k == 2 {
			payload = "plain text, not JSON"
		}
		publish(t, dashReports, fmt.Sprintf("report-%d", k), "render", payload)
	}
	publish(t, dashReports, "report-later", "render", `{"month":"2026-11"}`, pipeline.WithDelay(2*time.Hour))

	// Every state is present once the worker has settled.
	f.waitStats(t, dashOrders, func(s *pipeline.QueueStats) bool {
		return s.Completed == 3 && s.Dead == 3 && s.InProgress == 1 && s.Scheduled == 1 && s.Queued == 0
	})
	f.waitStats(t, dashReports, func(s *pipeline.QueueStats) bool { return s.Queued == dashReportsQueued && s.Scheduled == 1 })

	ts := httptest.NewServer(dashboardAPI(t, client, f.insp))
	t.Cleanup(ts.Close)
	f.url = ts.URL
	return f
}

func (f *dashFixture) publish(t *testing.T, queue, id, typ, payload string, opts ...pipeline.Option) {
	t.Helper()
	opts = append([]pipeline.Option{pipeline.WithID(id)}, opts...)
	if _, err := f.client.Enqueue(context.Background(), queue, pipeline.Task{Type: typ, Payload: []byte(payload)}, opts...); err != nil {
		t.Fatalf("publish %s/%s: %v", queue, id, err)
	}
}

// burst makes traffic for the throughput chart: completions in orders, retries and failures
// in imports. The dead jobs of orders stay as they are.
func (f *dashFixture) burst(t *testing.T) {
	t.Helper()
	before, err := f.insp.Stats(context.Background(), dashOrders)
	if err != nil {
		t.Fatal(err)
	}
	const bulk, flaky, reject = 150, 20, 8
	for k := range bulk {
		f.publish(t, dashOrders, fmt.Sprintf("bulk-%d", k), "echo", fmt.Sprintf(`{"bulk":%d}`, k))
	}
	for k := range flaky {
		f.publish(t, dashImports, fmt.Sprintf("flaky-%d", k), "flaky", `{}`, pipeline.WithMaxRetries(2))
	}
	for k := range reject {
		f.publish(t, dashImports, fmt.Sprintf("reject-%d", k), "reject", `{}`)
	}
	f.waitStats(t, dashOrders, func(s *pipeline.QueueStats) bool { return s.Completed == before.Completed+bulk })
	f.waitStats(t, dashImports, func(s *pipeline.QueueStats) bool {
		return s.Completed == flaky && s.Retried == flaky && s.Dead == reject
	})
}

func (f *dashFixture) waitStats(t *testing.T, queue string, ok func(*pipeline.QueueStats) bool) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s, err := f.insp.Stats(context.Background(), queue)
		require.NoError(c, err)
		require.True(c, ok(s), "%+v", s)
	}, 15*time.Second, 20*time.Millisecond, "queue %s never settled", queue)
}

// dashboardAPI is the API handler with the dashboard, behind dashToken. Its chart reads the
// history the fixture's workers keep in Redis (flushed every 100 ms: HistoryInterval).
func dashboardAPI(t *testing.T, client *pipeline.Client, insp *pipeline.Inspector) http.Handler {
	t.Helper()
	s, err := api.New(client, insp, api.Config{
		AuthToken: dashToken,
		Dashboard: api.Dashboard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// browser drives one Chromium tab; every step has a deadline and saves a screenshot when it
// fails.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string

	mu       sync.Mutex
	problems []string // console errors and uncaught exceptions
}

func newBrowser(t *testing.T, chrome, dir string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx, dir: dir}
	var consoleDone chan struct{} // the console reader's, once it runs
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		_ = chromedp.Cancel(cctx)
		cancel()
		acancel()
		if consoleDone != nil {
			<-consoleDone
		}
	})
	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil { // starts the browser
		t.Fatalf("start Chromium (%s): %v", chrome, err)
	}
	t.Logf("Chromium started in %s", time.Since(start).Round(time.Millisecond))
	msgs := chromedp.Console(ctx)
	consoleDone = make(chan struct{})
	go func() {
		defer close(consoleDone)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type != chromedp.ConsoleError && !m.IsException() && !strings.Contains(m.Text, "Content Security Policy") {
				continue
			}
			if m.Source == "network" && strings.Contains(m.Text, "401") {
				continue // the API asking for the token: expected
			}
			b.mu.Lock()
			if m.URL != "" {
				m.Text += fmt.Sprintf(" (%s:%d)", m.URL, m.Line+1)
			}
			b.problems = append(b.problems, m.String())
			b.mu.Unlock()
		}
	}()
	return b
}

// do runs actions with a deadline; on failure it saves a screenshot named after the step.
func (b *browser) do(step string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.shot("failed-" + step)
		b.t.Fatalf("%s: %v", step, err)
	}
}

// poll waits until the JavaScript expression is truthy.
func (b *browser) poll(step, expr string) {
	b.t.Helper()
	b.do(step, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond),
		chromedp.WithPollingTimeout(15*time.Second)))
}

// eval evaluates a JavaScript expression into T.
func evalJS[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// shot saves a screenshot of the viewport as <dir>/<name>.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot %s", p)
}

// route moves the page to a hash route, as a link would.
func (b *browser) route(hash string) {
	b.t.Helper()
	b.do("open "+hash, chromedp.Evaluate[chromedp.Void](fmt.Sprintf("location.hash = %q", hash)))
}

// noSideScroll checks the page does not scroll sideways at the current width.
func (b *browser) noSideScroll(where string) {
	b.t.Helper()
	w := evalJS[[]int](b, `[document.documentElement.scrollWidth, document.documentElement.clientWidth]`)
	if w[0] > w[1] {
		b.shot("overflow-" + where)
		b.t.Errorf("%s: the page scrolls sideways: %d px of content in %d px", where, w[0], w[1])
	}
}

func TestDashboardBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	dir := artifactDir(t)
	began := time.Now()
	f := newDashFixture(t)
	t.Logf("fixture ready in %s", time.Since(began).Round(time.Millisecond))
	b := newBrowser(t, chrome, dir)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }

	// The API wants a token: the page asks for it, refuses a wrong one, keeps the right one.
	b.do("load the dashboard", chromedp.Navigate(f.url+"/#/queues"), chromedp.WaitVisible(css("#token-input")))
	b.shot("desktop-token")
	b.do("enter a wrong token",
		chromedp.SendKeys(css("#token-input"), "not-the-token"),
		chromedp.Click(css("#token-form button[type=submit]")),
		chromedp.WaitVisible(css("#token-error")),
		chromedp.WaitVisible(css("#token-input")))
	b.do("enter the token",
		chromedp.SendKeys(css("#token-input"), dashToken),
		chromedp.Click(css("#token-form button[type=submit]")),
		chromedp.WaitVisible(css(`tr[data-queue="orders"]`)),
		chromedp.WaitNotVisible(css("#token")))
	if got := evalJS[string](b, `sessionStorage.getItem('conveyor.token')`); got != dashToken {
		t.Errorf("sessionStorage keeps token %q, want %q", got, dashToken)
	}

	// The queue table shows what Redis says.
	want := map[string]map[string]int64{}
	for _, q := range []string{dashOrders, dashReports} {
		s, err := f.insp.Stats(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		want[q] = map[string]int64{"scheduled": s.Scheduled, "queued": s.Queued, "in_progress": s.InProgress,
			"dead": s.Dead, "enqueued": s.Enqueued, "completed": s.Completed, "failed": s.Failed, "retried": s.Retried,
			"canceled": s.Canceled}
		if q == dashOrders && (s.Completed == 0 || s.Canceled == 0) {
			t.Fatalf("fixture: queue %s has %d completed and %d canceled jobs; the check below needs some of each", q, s.Completed, s.Canceled)
		}
	}
	wantJSON, _ := json.Marshal(want)
	// Every column reads a field (the Completed and Canceled state columns read none, and always
	// showed 0 beside a second Completed column that read the counter), and no two share a heading.
	b.poll("the queue table's columns each have a field and a heading of their own", `(() => {
		const heads = [...document.querySelectorAll('table.queues thead th')].map((th) => th.textContent.trim());
		const cells = [...document.querySelectorAll('tr[data-queue="orders"] td')];
		return heads.length > 1 && new Set(heads).size === heads.length && cells.length === heads.length - 1 &&
			cells.every((td) => td.dataset.field && td.dataset.field !== 'undefined');
	})()`)
	b.poll("queue counts match Inspector.Stats "+string(wantJSON), `(() => {
		const want = `+string(wantJSON)+`;
		for (const [q, fields] of Object.entries(want)) {
			const tr = document.querySelector('tr[data-queue="' + q + '"]');
			if (!tr) return false;
			for (const [k, v] of Object.entries(fields)) {
				const td = tr.querySelector('td[data-field="' + k + '"]');
				if (!td || td.textContent.replace(/[^0-9]/g, '') !== String(v)) return false;
			}
		}
		return true;
	})()`)
	b.poll("the throughput chart has axes and a legend",
		`document.querySelector('svg.chart .axis text') && document.querySelectorAll('.legend li').length === 3`)

	// Traffic shows on the chart: the worker adds to the history every 100 ms, the API reads
	// its whole 5 s buckets, the page redraws every 3 s.
	f.burst(t)
	b.poll("the chart draws completions, failures and retries", `(() => {
		const d = document.querySelector('svg.chart desc');
		return d !== null && document.querySelectorAll('svg.chart .series').length === 3 &&
			['completed', 'went dead', 'retried'].every((k) => d.textContent.includes(k + ' peaked at') &&
				!d.textContent.includes(k + ' peaked at 0 per'));
	})()`)
	b.noSideScroll("desktop queues")
	b.shot("desktop-queues")

	// A job's page from a list: the scheduled list of orders, then its job.
	b.do("open the scheduled jobs of orders",
		chromedp.Click(css(`tr[data-queue="orders"] td[data-field="scheduled"] a`)),
		chromedp.WaitVisible(css(`tr[data-job="later-1"] a`)))
	b.do("open a scheduled job", chromedp.Click(css(`tr[data-job="later-1"] a`)),
		chromedp.WaitVisible(css(".payload pre")))
	b.poll("the job page shows the pretty-printed payload",
		`document.querySelector('.payload pre').textContent.includes('"to": "ada@example.com"') &&
		 document.querySelector('.badge[data-status="scheduled"]') !== null &&
		 /UTC[+-]\d\d:\d\d/.test(document.querySelector('[data-field="run_at"] dd').textContent)`)
	b.shot("desktop-job-scheduled")

	// Paging: Next and Previous through the queued reports, 25 a page.
	b.route("#/queues/reports/queued")
	rows := `document.querySelectorAll('table.jobs tbody tr[data-job]')`
	b.poll("the first page of queued reports",
		rows+`.length === 25 && `+rows+`[0].dataset.job === 'report-1' && document.querySelector('button.prev').disabled`)
	b.do("next page", chromedp.Click(css("button.next")))
	b.poll("the second page of queued reports",
		rows+`.length === 5 && `+rows+`[0].dataset.job === 'report-26' && document.querySelector('button.next').disabled &&
		 document.querySelector('.page-no').textContent === 'Page 2'`)
	b.do("previous page", chromedp.Click(css("button.prev")))
	b.poll("back on the first page", rows+`.length === 25 && `+rows+`[0].dataset.job === 'report-1'`)

	// Pause and resume a queue from its page: the badge and the button follow, and Redis has
	// the state.
	paused := func(want bool) {
		t.Helper()
		s, err := f.insp.Stats(context.Background(), dashReports)
		if err != nil {
			t.Fatal(err)
		}
		if s.Paused != want {
			t.Errorf("queue %s paused = %v, want %v", dashReports, s.Paused, want)
		}
	}
	b.route("#/queues/" + dashReports)
	b.do("pause reports", chromedp.WaitVisible(css(`.pause-box button[data-action="pause"]`)),
		chromedp.Click(css(`.pause-box button[data-action="pause"]`)),
		chromedp.WaitVisible(css(`.pause-box .badge.paused`)),
		chromedp.WaitVisible(css(`.pause-box button[data-action="resume"]`)))
	paused(true)
	b.shot("desktop-queue-paused")
	b.route("#/queues")
	b.poll("the queue table marks reports paused",
		`document.querySelector('tr[data-queue="`+dashReports+`"] .badge.paused') !== null &&
		 document.querySelector('tr[data-queue="`+dashOrders+`"] .badge.paused') === null`)
	// Issue 33: beside each queue's latency, its queue wait percentiles (publish to start) from
	// its own history: the burst's jobs of orders waited.
	b.poll("the queue table shows the queue wait percentiles of orders",
		`/^wait .+ \/ .+$/.test(document.querySelector('tr[data-queue="`+dashOrders+`"] td[data-field="latency_ms"] .wait-pct')?.textContent || '')`)
	b.route("#/queues/" + dashReports)
	b.do("resume reports", chromedp.WaitVisible(css(`.pause-box button[data-action="resume"]`)),
		chromedp.Click(css(`.pause-box button[data-action="resume"]`)),
		chromedp.WaitVisible(css(`.pause-box button[data-action="pause"]`)))
	b.poll("the paused badge is gone", `document.querySelector('.pause-box .badge.paused') === null`)
	// replaceChildren renders a null child as the text "null": the running queue's box once
	// showed it beside its button.
	b.poll("the pause box says only its button", `document.querySelector('.pause-box').textContent.trim() === 'Pause'`)
	paused(false)

	// The running job shows its worker and lease.
	b.route("#/queues/orders/in_progress")
	b.poll("the in-progress list shows the worker",
		`(() => { const tr = document.querySelector('tr[data-job="hold-1"]'); return tr && tr.textContent.includes('dash-worker-1'); })()`)

	// The dead list: reason, replay (the handler now succeeds), purge with confirmation.
	b.route("#/queues/orders")
	b.do("open the dead list", chromedp.Click(css(`.tabs a[data-state="failed"]`)),
		chromedp.WaitVisible(css(`tr[data-job="charge-7"] button.replay`)))
	b.poll("the dead list shows the reason",
		`document.querySelector('tr[data-job="charge-7"] .reason').textContent.includes('card declined') &&
		 document.querySelectorAll('tbody tr[data-job]').length === 3`)
	b.noSideScroll("desktop dead list")
	b.shot("desktop-dead")
	f.failing.Store(false)
	b.do("replay a dead job",
		chromedp.Click(css(`tr[data-job="charge-7"] button.replay`)),
		chromedp.WaitNotPresent(css(`tr[data-job="charge-7"]`)),
		chromedp.WaitVisible(css(`#notice a`)))
	b.do("open the replayed job", chromedp.Click(css(`#notice a`)), chromedp.WaitVisible(css(".job-status .badge")))
	b.poll("the replayed job completes",
		`document.querySelector('.badge[data-status="completed"]') !== null &&
		 document.querySelector('.result pre').textContent.includes('"receipt": "r-charge-7"')`)
	b.shot("desktop-job-completed")
	if j, err := f.insp.Get(context.Background(), dashOrders, "charge-7"); err != nil || j.Status != status.Completed {
		t.Errorf("charge-7 after replay: %+v, %v; want completed", j, err)
	}

	b.route("#/queues/orders/failed")
	b.do("ask to purge a dead job",
		chromedp.Click(css(`tr[data-job="charge-8"] button.purge`)),
		chromedp.WaitVisible(css(`tr[data-job="charge-8"] button.confirm-yes`)))
	b.shot("desktop-purge-confirm")
	if _, err := f.insp.Get(context.Background(), dashOrders, "charge-8"); err != nil {
		t.Fatalf("charge-8 is gone before the purge was confirmed: %v", err)
	}
	b.do("confirm the purge",
		chromedp.Click(css(`tr[data-job="charge-8"] button.confirm-yes`)),
		chromedp.WaitNotPresent(css(`tr[data-job="charge-8"]`)))
	if _, err := f.insp.Get(context.Background(), dashOrders, "charge-8"); !errors.Is(err, pipeline.ErrNotFound) {
		t.Errorf("charge-8 after purge: %v, want ErrNotFound", err)
	}

	// The queue page's limits: set one from the form, see it listed (and stored), delete it.
	// Per key, on a type: it holds no job of the fixture (none has a limit key).
	b.route("#/queues/orders")
	b.do("the limits card shows no limits", chromedp.WaitVisible(css(`#limit-form`)),
		chromedp.WaitVisible(css(`.limits-list .muted`)))
	b.do("set a limit from the form",
		chromedp.SendKeys(css("#limit-type"), "charge"),
		chromedp.Click(css("#limit-per-key")),
		chromedp.SendKeys(css("#limit-rate"), "10"),
		chromedp.SetValue(css("#limit-unit"), "m"),
		chromedp.SendKeys(css("#limit-concurrency"), "2"),
		chromedp.Click(css(`#limit-form button[type=submit]`)),
		chromedp.WaitVisible(css(`tr[data-type="charge"][data-per-key="true"]`)))
	b.poll("the limit is listed as set",
		`(() => {
			const tr = document.querySelector('tr[data-type="charge"][data-per-key="true"]');
			return tr.querySelector('td[data-field="rate"]').textContent === '10 / 1m' &&
				tr.querySelector('td[data-field="concurrency"]').textContent === '2';
		})()`)
	if ls, err := f.insp.Limits(context.Background(), dashOrders); err != nil || len(ls) != 1 ||
		ls[0] != (pipeline.Limit{Type: "charge", PerKey: true, Rate: 10, Interval: time.Minute, Concurrency: 2}) {
		t.Errorf("limits after the form: %+v, %v", ls, err)
	}
	b.noSideScroll("desktop queue limits")
	b.shot("desktop-limits")
	b.do("delete the limit",
		chromedp.Click(css(`tr[data-type="charge"] button.delete-limit`)),
		chromedp.WaitVisible(css(`tr[data-type="charge"] button.confirm-yes`)),
		chromedp.Click(css(`tr[data-type="charge"] button.confirm-yes`)),
		chromedp.WaitNotPresent(css(`tr[data-type="charge"]`)))
	if ls, err := f.insp.Limits(context.Background(), dashOrders); err != nil || len(ls) != 0 {
		t.Errorf("limits after the delete: %+v, %v", ls, err)
	}

	// The queue page's groups: set the window and a weight from the form (stored), then two
	// held jobs of one group: the window holds one, the other waits, and the card shows both.
	b.do("the groups card shows the default window", chromedp.WaitVisible(css(`#group-form`)),
		chromedp.WaitVisible(css(`.groups-list .group-window[data-window="20"]`)))
	b.do("set the window and a weight from the form",
		chromedp.SendKeys(css("#group-window"), "1"),
		chromedp.SendKeys(css("#group-name"), "tenant-7"),
		chromedp.SendKeys(css("#group-weight"), "2"),
		chromedp.Click(css(`#group-form button[type=submit]`)),
		chromedp.WaitVisible(css(`.groups-list .group-window[data-window="1"]`)),
		chromedp.WaitVisible(css(`tr[data-group="tenant-7"]`)))
	if gs, err := f.insp.Groups(context.Background(), dashOrders); err != nil || gs.Window != 1 ||
		len(gs.Groups) != 1 || gs.Groups[0] != (pipeline.GroupInfo{Group: "tenant-7", Weight: 2}) {
		t.Errorf("groups after the form: %+v, %v", gs, err)
	}
	for _, id := range []string{"tenant-job-1", "tenant-job-2"} {
		f.publish(t, dashOrders, id, "hold", `{"seconds":3600}`, pipeline.WithGroup("tenant-42"))
	}
	b.route("#/queues/reports")
	b.do("leave the queue page", chromedp.WaitVisible(css(`.groups-list .group-window[data-window="20"]`)))
	b.route("#/queues/orders")
	b.poll("the groups card lists the group's jobs in the window and waiting",
		`(() => {
			const tr = document.querySelector('tr[data-group="tenant-42"]');
			return tr !== null && tr.querySelector('td[data-field="in_window"]').textContent === '1' &&
				tr.querySelector('td[data-field="waiting"]').textContent === '1' &&
				tr.querySelector('td[data-field="weight"]').textContent === '1';
		})()`)
	b.noSideScroll("desktop queue groups")
	b.shot("desktop-groups")

	// The schedules page: a running @every 1s schedule shows its last job (linked) and next
	// run, a paused one its badge; pause and resume from the page reach Redis.
	schedule := func(name string) *pipeline.Schedule {
		t.Helper()
		sc, err := f.insp.GetSchedule(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	if err := f.insp.CreateSchedule(context.Background(), pipeline.Periodic{Name: "heartbeat", Spec: "@every 1s",
		Queue: dashTicks, Type: "echo", Payload: []byte(`{"beat":true}`)}); err != nil {
		t.Fatal(err)
	}
	if err := f.insp.CreateSchedule(context.Background(), pipeline.Periodic{Name: "nightly-report",
		Spec: "CRON_TZ=Europe/Berlin 0 0 3 * * *", Queue: dashReports, Type: "render", Missed: pipeline.MissedRunOnce}); err != nil {
		t.Fatal(err)
	}
	if err := f.insp.PauseSchedule(context.Background(), "nightly-report"); err != nil {
		t.Fatal(err)
	}
	b.do("open the schedules", chromedp.Click(css(`#nav-schedules`)), chromedp.WaitVisible(css(`tr[data-schedule="heartbeat"]`)))
	b.poll("the schedules list shows both, the running one with its last job",
		`(() => {
			const hb = document.querySelector('tr[data-schedule="heartbeat"]');
			const nr = document.querySelector('tr[data-schedule="nightly-report"]');
			if (!hb || !nr) return false;
			const job = hb.querySelector('td[data-field="last_job"] a');
			return document.querySelector('#nav-schedules').getAttribute('aria-current') === 'page' &&
				hb.querySelector('td[data-field="spec"]').textContent === '@every 1s' &&
				hb.querySelector('td[data-field="queue"] a').getAttribute('href') === '#/queues/`+dashTicks+`' &&
				job !== null && /^cron:heartbeat:\d+$/.test(job.textContent) &&
				hb.querySelector('td[data-field="next_run_at"] time') !== null &&
				hb.querySelector('.badge.paused') === null &&
				nr.querySelector('.badge.paused') !== null &&
				nr.querySelector('td[data-field="missed"]').textContent === 'run once' &&
				nr.querySelector('td[data-field="last_job"]').textContent === '—' &&
				nr.querySelector('td[data-field="next_run_at"]').textContent === '—';
		})()`)
	b.noSideScroll("desktop schedules")
	b.shot("desktop-schedules")
	b.do("pause the heartbeat",
		chromedp.Click(css(`tr[data-schedule="heartbeat"] button[data-action="pause"]`)),
		chromedp.WaitVisible(css(`tr[data-schedule="heartbeat"] .badge.paused`)))
	if !schedule("heartbeat").Paused {
		t.Error("heartbeat is not paused in Redis after the page paused it")
	}
	b.do("resume the nightly report",
		chromedp.Click(css(`tr[data-schedule="nightly-report"] button[data-action="resume"]`)),
		chromedp.WaitVisible(css(`tr[data-schedule="nightly-report"] button[data-action="pause"]`)))
	if sc := schedule("nightly-report"); sc.Paused || sc.NextRunAt.IsZero() {
		t.Errorf("nightly-report after the page resumed it: paused %v, next run %v", sc.Paused, sc.NextRunAt)
	}
	b.do("open the heartbeat's last job", chromedp.Click(css(`tr[data-schedule="heartbeat"] td[data-field="last_job"] a`)),
		chromedp.WaitVisible(css(".payload pre")))
	b.poll("the last job's page shows its payload and schedule metadata",
		`location.hash.startsWith('#/jobs/`+dashTicks+`/cron%3Aheartbeat%3A') &&
		 document.querySelector('.payload pre').textContent.includes('"beat": true') &&
		 document.querySelector('table.kv').textContent.includes('schedule_tick')`)

	// The search box finds a job in any queue by id.
	b.do("search a job by id",
		chromedp.SendKeys(css("#search-id"), "report-2"),
		chromedp.Click(css("#search button[type=submit]")),
		chromedp.WaitVisible(css(".payload pre")))
	b.poll("the search opens the job's page",
		`location.hash === '#/jobs/reports/report-2' &&
		 document.querySelector('.payload pre').textContent === 'plain text, not JSON' &&
		 document.querySelector('.badge[data-status="queued"]') !== null`)
	b.do("search a completed job",
		chromedp.SetValue(css("#search-id"), "order-2"),
		chromedp.Click(css("#search button[type=submit]")),
		chromedp.WaitVisible(css(`.badge[data-status="completed"]`)))
	b.poll("the completed job shows its result and metadata",
		`location.hash === '#/jobs/orders/order-2' &&
		 document.querySelector('.result pre').textContent.includes('"order": 2') &&
		 document.querySelector('table.kv').textContent.includes('dashboard-test')`)
	b.shot("desktop-job-search")

	// A debounced job's page shows its window: two publishes with one key, one job.
	var db *pipeline.Job
	for _, rev := range []string{"1", "2"} {
		j, err := f.client.Enqueue(t.Context(), dashReports, pipeline.Task{Type: "render", Payload: []byte(`{"rev":` + rev + `}`)},
			pipeline.WithDebounce("doc-7", time.Hour, 2*time.Hour))
		require.NoError(t, err)
		db = j
	}
	require.True(t, db.Debounced)
	b.route("#/jobs/reports/" + db.ID)
	b.do("open a debounced job", chromedp.WaitVisible(css(".debounce dl")))
	b.poll("the debounced job shows its key, window and publishes",
		`document.querySelector('[data-field="debounce_key"] dd').textContent === 'doc-7' &&
		 document.querySelector('[data-field="debounce_publishes"] dd').textContent === '2' &&
		 /UTC[+-]\d\d:\d\d/.test(document.querySelector('[data-field="debounce_until"] dd').textContent) &&
		 document.querySelector('.payload pre').textContent.includes('"rev": 2') &&
		 !document.body.innerText.includes('null')`) // a card left out is not written as "null"
	b.shot("desktop-job-debounced")

	// A running job's page shows a live progress bar, fed by the job's events stream: each
	// report moves the bar in place (the page is not rebuilt, and polling waits while the
	// stream is open), and the end shows the final status with the last report.
	f.publish(t, dashOrders, "progress-1", "steps", `{"steps":2}`)
	f.steps <- 30
	b.route("#/jobs/orders/progress-1")
	b.poll("the running job's page follows its events",
		`document.querySelector('.job')?.dataset.live === 'on' &&
		 document.querySelector('.progress-card progress')?.dataset.progress === '30' &&
		 document.querySelector('.progress-text').textContent.includes('step 30 of 100')`)
	evalJS[bool](b, `(window.__bar = document.querySelector('.progress-card progress'), true)`)
	b.shot("desktop-job-progress")
	f.steps <- 70
	b.poll("the bar moves live, in place",
		`document.querySelector('.progress-card progress').dataset.progress === '70' &&
		 document.querySelector('.progress-card progress') === window.__bar &&
		 document.querySelector('.progress-card progress').value === 70 &&
		 document.querySelector('.progress-text').textContent.includes('step 70 of 100')`)
	close(f.steps)
	b.poll("the end arrives live, with the last report",
		`document.querySelector('.badge[data-status="completed"]') !== null &&
		 document.querySelector('.job').dataset.live === undefined &&
		 document.querySelector('.progress-card progress').dataset.progress === '70' &&
		 document.querySelector('#j-prog').textContent === 'Last progress' &&
		 document.querySelector('.result pre').textContent.includes('stepped')`)
	b.noSideScroll("desktop job progress")
	b.shot("desktop-job-progress-done")

	// A phone's width: readable, nothing scrolls sideways.
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulatePortrait, chromedp.EmulateMobile))
	b.route("#/queues")
	b.do("phone queues", chromedp.WaitVisible(css(`tr[data-queue="orders"]`)), chromedp.WaitVisible(css(`svg.chart`)))
	b.poll("the chart fits the phone", `document.querySelector('svg.chart').getBoundingClientRect().width <= 390`)
	b.noSideScroll("phone queues")
	b.shot("phone-queues")
	b.route("#/queues/orders/failed")
	b.do("phone dead list", chromedp.WaitVisible(css(`tr[data-job="charge-9"] button.replay`)))
	b.noSideScroll("phone dead list")
	b.shot("phone-dead")
	b.route("#/queues/orders")
	b.do("phone queue page", chromedp.WaitVisible(css(`#limit-form`)), chromedp.WaitVisible(css(`.limits-list .muted`)))
	b.noSideScroll("phone queue page")
	b.shot("phone-queue")
	b.route("#/jobs/orders/charge-7")
	b.do("phone job page", chromedp.WaitVisible(css(`.badge[data-status="completed"]`)))
	b.noSideScroll("phone job page")
	b.shot("phone-job")

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser console: %s", p)
	}
	t.Logf("browser test took %s; screenshots in %s", time.Since(began).Round(time.Millisecond), dir)
}
