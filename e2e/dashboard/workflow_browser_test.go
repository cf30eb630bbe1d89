package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

const (
	wfQueue     = "flows"
	wfDiamond   = "diamond-1"
	wfBatch     = "batch-1"
	wfBatchJobs = 120 // more than a page of the tasks table (100) and a drawn layer (30)
	wfBatchDead = 3
	wfIdle      = "flows-idle" // no worker reads it
	wfETL       = "etl-1"
	etlWidth    = 8 // extract and transform tasks
	wfChain     = "chain-1"
	chainLen    = 200 // more layers than the page draws (40)
)

// etlWorkflow has 4 layers: etlWidth extracts, etlWidth transforms each after two extracts,
// etlWidth/2 loads each after two transforms, and a report after every load.
func etlWorkflow() pipeline.Workflow {
	wf := pipeline.Workflow{ID: wfETL, Name: "nightly etl"}
	task := func(name string, after ...string) {
		wf.Tasks = append(wf.Tasks, pipeline.WorkflowTask{Name: name, After: after,
			Task: pipeline.Task{Type: "step", Payload: []byte(`{}`)}})
	}
	var loads []string
	for i := 1; i <= etlWidth; i++ {
		task(fmt.Sprintf("extract-%d", i))
	}
	for i := 1; i <= etlWidth; i++ {
		task(fmt.Sprintf("transform-%d", i), fmt.Sprintf("extract-%d", i), fmt.Sprintf("extract-%d", i%etlWidth+1))
	}
	for i := 1; i <= etlWidth/2; i++ {
		loads = append(loads, fmt.Sprintf("load-%d", i))
		task(loads[i-1], fmt.Sprintf("transform-%d", 2*i-1), fmt.Sprintf("transform-%d", 2*i))
	}
	task("report", loads...)
	return wf
}

// wfFixture is a private Redis, a worker of the flows queue and the API server, with a diamond
// workflow whose task B runs until the test releases it, and a finished batch.
type wfFixture struct {
	client  *pipeline.Client
	url     string
	release chan struct{} // closed (releaseB), it lets task B of the diamond complete
	once    sync.Once
}

func (f *wfFixture) releaseB() { f.once.Do(func() { close(f.release) }) }

func newWFFixture(t *testing.T) *wfFixture {
	t.Helper()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{})
	require.NoError(t, err)
	f := &wfFixture{client: client, release: make(chan struct{})}
	started := make(chan struct{})
	var startedOnce sync.Once // a second attempt of B (a lost lease) must not close it twice
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{
		Queues:          []string{wfQueue},
		Name:            "wf-worker-1",
		Concurrency:     8,
		ShutdownTimeout: 2 * time.Second,
		Logger:          zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	require.NoError(t, err)
	w.Handle("step", func(_ context.Context, j *pipeline.Job) ([]byte, error) { return j.Payload, nil })
	w.Handle("gate", func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
		startedOnce.Do(func() { close(started) }) // the diamond's B is its only job
		select {
		case <-f.release:
			return []byte(`"released"`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	w.Handle("reject", func(context.Context, *pipeline.Job) ([]byte, error) {
		return nil, pipeline.SkipRetry(errors.New("rejected: malformed row"))
	})
	jobtest.RunWorker(t, w)
	t.Cleanup(f.releaseB) // before the worker stops (cleanups run last-in first-out)

	step := func(p string) pipeline.Task { return pipeline.Task{Type: "step", Payload: []byte(p)} }
	_, err = client.Workflow(ctx, wfQueue, pipeline.Workflow{ID: wfDiamond, Name: "diamond", Tasks: []pipeline.WorkflowTask{
		{Name: "A", Task: step(`{"task":"A"}`)},
		{Name: "B", Task: pipeline.Task{Type: "gate", Payload: []byte(`{"task":"B"}`)}, After: []string{"A"}},
		{Name: "C", Task: step(`{"task":"C"}`), After: []string{"A"}},
		{Name: "D", Task: step(`{"task":"D"}`), After: []string{"B", "C"}},
	}})
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("task B of the diamond never started")
	}
	waitWorkflow(t, insp, wfDiamond, func(w *pipeline.WorkflowState) bool {
		st := taskStatuses(w)
		return st["A"] == status.Completed && st["B"] == status.InProgress &&
			st["C"] == status.Completed && st["D"] == status.Waiting
	})

	jobs := make([]pipeline.Task, wfBatchJobs)
	for k := range jobs {
		jobs[k] = step(fmt.Sprintf(`{"row":%d}`, k+1))
		if k < wfBatchDead {
			jobs[k] = pipeline.Task{Type: "reject", Payload: []byte(fmt.Sprintf(`{"row":%d}`, k+1))}
		}
	}
	cb := step(`{"callback":true}`)
	_, err = client.Batch(ctx, wfQueue, pipeline.Batch{ID: wfBatch, Name: "import rows", Jobs: jobs, Callback: &cb})
	require.NoError(t, err)
	waitWorkflow(t, insp, wfBatch, func(w *pipeline.WorkflowState) bool {
		return w.Completed+w.Failed == w.Total && w.Failed == wfBatchDead
	})

	// A wider workflow in a queue no worker reads: its roots stay queued, the rest waiting.
	_, err = client.Workflow(ctx, wfIdle, etlWorkflow())
	require.NoError(t, err)
	links := make([]pipeline.Task, chainLen)
	for k := range links {
		links[k] = step(fmt.Sprintf(`{"link":%d}`, k+1))
	}
	chain := pipeline.Chain(links...)
	chain.ID, chain.Name = wfChain, "long chain"
	_, err = client.Workflow(ctx, wfIdle, chain)
	require.NoError(t, err)

	ts := httptest.NewServer(dashboardAPI(t, client, insp))
	t.Cleanup(ts.Close)
	f.url = ts.URL
	return f
}

func waitWorkflow(t *testing.T, insp *pipeline.Inspector, id string, ok func(*pipeline.WorkflowState) bool) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		w, err := insp.Workflow(context.Background(), wfQueue, id)
		require.NoError(c, err)
		require.True(c, ok(w), "%+v", w)
	}, 15*time.Second, 20*time.Millisecond, "workflow %s never settled", id)
}

func taskStatuses(w *pipeline.WorkflowState) map[string]status.Status {
	m := map[string]status.Status{}
	for _, t := range w.Tasks {
		m[t.Name] = t.Status
	}
	return m
}

// The workflow pages: a queue's workflows, a diamond drawn as 4 nodes and 4 edges in their
// statuses (live as its held task completes), a node's link to its job and back, a waiting
// job, and a batch's progress with its 120 jobs drawn as one box of counts. Screenshots:
// workflows, workflow-diamond, workflow-waiting-job, workflow-batch.
func TestDashboardWorkflowBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	dir := artifactDir(t)
	began := time.Now()
	f := newWFFixture(t)
	t.Logf("fixture ready in %s", time.Since(began).Round(time.Millisecond))
	b := newBrowser(t, chrome, dir)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }

	b.do("load the workflows of flows", chromedp.Navigate(f.url+"/#/queues/"+wfQueue+"/workflows"),
		chromedp.WaitVisible(css("#token-input")))
	b.do("enter the token",
		chromedp.SendKeys(css("#token-input"), dashToken),
		chromedp.Click(css("#token-form button[type=submit]")),
		chromedp.WaitNotVisible(css("#token")))
	b.poll("the list shows the batch, then the diamond, with their progress", `(() => {
		const rows = [...document.querySelectorAll('table.workflows tbody tr')];
		if (rows.length !== 2 || rows[0].dataset.workflow !== '`+wfBatch+`' || rows[1].dataset.workflow !== '`+wfDiamond+`') return false;
		const cell = (tr, f) => tr.querySelector('[data-field="' + f + '"]').textContent;
		return cell(rows[0], 'progress').trim() === '`+fmt.Sprint(wfBatchJobs+1-wfBatchDead)+`/`+fmt.Sprint(wfBatchJobs+1)+`' &&
			cell(rows[0], 'failed') === '`+fmt.Sprint(wfBatchDead)+`' && cell(rows[0], 'kind') === 'batch' &&
			rows[0].dataset.status === 'failed' &&
			cell(rows[1], 'progress').trim() === '2/4' && rows[1].dataset.status === 'running' &&
			rows[1].querySelector('th a').textContent === 'diamond' &&
			document.querySelector('.tabs a[aria-current="page"]').dataset.state === 'workflows';
	})()`)
	b.noSideScroll("workflows")
	b.shot("workflows")

	// The diamond: A -> B, C -> D, with B held running.
	b.do("open the diamond", chromedp.Click(css(`tr[data-workflow="`+wfDiamond+`"] th a`)))
	nodes := `(() => Object.fromEntries([...document.querySelectorAll('svg.dag a.node')].map((n) => [n.dataset.task, n.dataset.status])))()`
	edges := `[...document.querySelectorAll('svg.dag path.edge')].map((e) => e.dataset.from + '>' + e.dataset.to).sort().join(' ')`
	b.poll("the diamond is drawn: 4 nodes in their statuses, 4 edges", `(() => {
		const n = `+nodes+`;
		return Object.keys(n).length === 4 && n.A === 'completed' && n.B === 'in_progress' && n.C === 'completed' &&
			n.D === 'waiting' && (`+edges+`) === 'A>B A>C B>D C>D' &&
			document.querySelector('.wf-status').dataset.wfStatus === 'running' &&
			document.querySelectorAll('table.wf-task-table tbody tr').length === 4;
	})()`)
	if got := evalJS[string](b, `[...document.querySelectorAll('table.wf-task-table tbody tr')].map((r) => r.dataset.task).join(',')`); got != "A,B,C,D" {
		t.Errorf("the tasks table lists %s, want A,B,C,D (topological order)", got)
	}
	b.noSideScroll("workflow diamond")
	b.shot("workflow-diamond")

	// A node links to its task's job; the job page shows the waiting status and links back.
	b.do("open the waiting task D from its node", chromedp.Click(css(`svg.dag a.node[data-task="D"]`)),
		chromedp.WaitVisible(css(`.job-status .badge[data-status="waiting"]`)))
	if got := evalJS[string](b, `location.hash`); got != "#/jobs/"+wfQueue+"/"+wfDiamond+".D" {
		t.Errorf("the node led to %s", got)
	}
	b.poll("the waiting job explains itself and links its workflow", `(() => {
		const a = document.querySelector('[data-field="workflow"] a');
		return a !== null && a.getAttribute('href') === '#/queues/`+wfQueue+`/workflows/`+wfDiamond+`' &&
			a.textContent === '`+wfDiamond+`' && document.querySelector('[data-field="workflow"]').textContent.includes('task D') &&
			(document.querySelector('.waiting-for[data-kind="dependencies"] [data-field="tasks"]')?.textContent.includes('B') ||
			 document.querySelector('.wait-note') !== null);
	})()`) // issue 33: the Waiting for card names the tasks; a server that gives no reason, the note
	b.shot("workflow-waiting-job")
	b.do("back to the workflow from the job", chromedp.Click(css(`[data-field="workflow"] a`)),
		chromedp.WaitVisible(css(`svg.dag a.node[data-task="D"]`)))

	// Releasing B completes B, then D: the page follows by polling.
	f.releaseB()
	b.poll("the page follows the diamond to completed", `(() => {
		const n = `+nodes+`;
		return ['A', 'B', 'C', 'D'].every((k) => n[k] === 'completed') &&
			document.querySelector('.wf-status').dataset.wfStatus === 'completed' &&
			document.querySelector('.wf-bar-text').dataset.final === '4';
	})()`)
	b.do("open task B from its node", chromedp.Click(css(`svg.dag a.node[data-task="B"]`)),
		chromedp.WaitVisible(css(`.job-status .badge[data-status="completed"]`)),
		chromedp.WaitVisible(css(`[data-field="workflow"] a`)))

	// The batch: its progress, its 120 jobs as one box of counts before the callback, and a
	// table of the first 100 tasks until all are asked for.
	b.route("#/queues/" + wfQueue + "/workflows/" + wfBatch)
	total := wfBatchJobs + 1 // and the callback
	b.poll("the batch shows its progress and a collapsed layer", fmt.Sprintf(`(() => {
		const bar = document.querySelector('.wf-bar-text');
		const group = document.querySelector('svg.dag g.node.group');
		const count = (st) => { const c = group && group.querySelector('.node-count[data-status="' + st + '"]'); return c ? c.textContent : ''; };
		return bar !== null && bar.dataset.final === bar.dataset.total && bar.dataset.total === '%d' &&
			document.querySelector('svg.wf-bar rect[data-seg="completed"]') !== null &&
			document.querySelector('svg.wf-bar rect[data-seg="failed"]') !== null &&
			document.querySelector('.wf-status').dataset.wfStatus === 'failed' &&
			document.querySelector('[data-field="failed"] dd').textContent === '%d' &&
			group !== null && group.dataset.count === '%d' && count('completed') === '%d completed' && count('failed') === '%d dead' &&
			document.querySelectorAll('svg.dag a.node').length === 1 &&
			document.querySelector('svg.dag a.node').dataset.task === 'callback' &&
			document.querySelectorAll('svg.dag path.edge').length === 1 &&
			document.querySelectorAll('table.wf-task-table tbody tr').length === 100 &&
			document.querySelector('button.wf-show-all') !== null;
	})()`, total, wfBatchDead, wfBatchJobs, wfBatchJobs-wfBatchDead, wfBatchDead))
	b.noSideScroll("workflow batch")
	b.shot("workflow-batch")
	b.do("show all the batch's tasks", chromedp.Click(css("button.wf-show-all")))
	b.poll("every task is listed, the dead ones with their error", fmt.Sprintf(`(() => {
		const rows = document.querySelectorAll('table.wf-task-table tbody tr');
		const dead = document.querySelectorAll('table.wf-task-table tbody tr[data-status="failed"]');
		return rows.length === %d && dead.length === %d &&
			dead[0].querySelector('[data-field="last_error"]').textContent === 'rejected: malformed row' &&
			rows[rows.length - 1].dataset.task === 'callback';
	})()`, total, wfBatchDead))

	// A wider workflow stays readable: every task drawn, in 4 columns, inside the page.
	b.route("#/queues/" + wfIdle + "/workflows/" + wfETL)
	nTasks, nEdges := 2*etlWidth+etlWidth/2+1, 2*etlWidth+etlWidth+etlWidth/2
	b.poll("the wider workflow is drawn whole", fmt.Sprintf(`(() => {
		const n = [...document.querySelectorAll('svg.dag a.node')];
		const xs = new Set(n.map((a) => a.querySelector('rect').getAttribute('x')));
		return n.length === %d && document.querySelectorAll('svg.dag path.edge').length === %d && xs.size === 4 &&
			n.filter((a) => a.dataset.status === 'queued').length === %d &&
			n.filter((a) => a.dataset.status === 'waiting').length === %d;
	})()`, nTasks, nEdges, etlWidth, nTasks-etlWidth))
	b.noSideScroll("workflow etl")
	b.do("scroll to the graph", chromedp.ScrollIntoView(css("section.dag-card")))
	b.shot("workflow-etl")

	// A chain of 200: its first 40 layers are drawn, the rest are in the table.
	b.route("#/queues/" + wfIdle + "/workflows/" + wfChain)
	b.poll("the long chain is drawn in part", fmt.Sprintf(`(() => {
		const cut = document.querySelector('.dag-cut');
		return document.querySelectorAll('svg.dag a.node').length === 40 &&
			document.querySelectorAll('svg.dag path.edge').length === 39 &&
			cut !== null && cut.dataset.layers === '%d' && cut.dataset.hidden === '%d' &&
			document.querySelectorAll('table.wf-task-table tbody tr').length === 100;
	})()`, chainLen, chainLen-40))
	b.noSideScroll("workflow chain")

	// A phone's width: the graph scrolls in its box, the page does not scroll sideways.
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulatePortrait, chromedp.EmulateMobile))
	b.poll("the graph keeps its size in a box that scrolls", `(() => {
		const box = document.querySelector('.dag-wrap');
		return box !== null && box.scrollWidth > box.clientWidth && box.getBoundingClientRect().width <= 390;
	})()`)
	b.noSideScroll("phone workflow")
	b.shot("phone-workflow")
	b.route("#/queues/" + wfQueue + "/workflows")
	b.do("phone workflows", chromedp.WaitVisible(css(`tr[data-workflow="`+wfBatch+`"]`)))
	b.noSideScroll("phone workflows")
	b.shot("phone-workflows")

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("browser console: %s", p)
	}
	t.Logf("workflow browser test took %s; screenshots in %s", time.Since(began).Round(time.Millisecond), dir)
}
