package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/pipeline"
)

// apiWorkflow is the workflow JSON (pipeline.WorkflowState's wire form).
type apiWorkflow struct {
	ID         string `json:"id"`
	Queue      string `json:"queue"`
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Status     string `json:"status"`
	CreatedAt  int64  `json:"created_at"`
	FinishedAt int64  `json:"finished_at"`
	Total      int    `json:"total"`
	Completed  int    `json:"completed"`
	Failed     int    `json:"failed"`
	Canceled   int    `json:"canceled"`
	Purged     int    `json:"purged"`
	Duplicate  bool   `json:"duplicate"`
	Tasks      []struct {
		Name      string   `json:"name"`
		JobID     string   `json:"job_id"`
		Type      string   `json:"type"`
		After     []string `json:"after"`
		Finally   bool     `json:"finally"`
		Status    string   `json:"status"`
		Attempt   int      `json:"attempt"`
		LastError string   `json:"last_error"`
	} `json:"tasks"`
}

// waitFor and tick bound the waits for a workflow's worker: events, not margins.
const waitFor, tick = 10 * time.Second, 5 * time.Millisecond

// workflow publishes a workflow of one task into the env's queue and returns its id.
func (e *apiEnv) workflow() string {
	e.t.Helper()
	st, err := e.client.Workflow(e.t.Context(), e.queue, pipeline.Workflow{Tasks: []pipeline.WorkflowTask{
		{Name: "a", Task: pipeline.Task{Type: "echo"}}}})
	require.NoError(e.t, err)
	return st.ID
}

func (e *apiEnv) workflows() string { return "/v1/queues/" + e.queue + "/workflows" }
func (e *apiEnv) batches() string   { return "/v1/queues/" + e.queue + "/batches" }

// diamond is a workflow body: a, then b and c, then d.
const diamond = `{"id":"wf-1","name":"diamond","tasks":[
	{"name":"a","type":"echo","payload":{"n":1}},
	{"name":"b","type":"echo","after":["a"],"max_retries":2,"timeout":"5s","metadata":{"k":"v"}},
	{"name":"c","type":"echo","after":["a"],"retention":"1h"},
	{"name":"d","type":"echo","after":["b","c"]}]}`

// Every refusal of a workflow body is a 400 (413 over the limit) with the library's or the
// decoder's reason, and writes nothing.
func TestWorkflowBodies(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{cfg: api.Config{MaxBatchBodyBytes: 4096}})
	for _, tc := range []struct {
		name, body string
		status     int
		code, msg  string
	}{
		{"Cycle", `{"tasks":[{"name":"a","type":"echo","after":["b"]},{"name":"b","type":"echo","after":["a"]}]}`, 400, api.CodeInvalidArgument, "cycle through tasks a, b"},
		{"UnknownDep", `{"tasks":[{"name":"a","type":"echo","after":["z"]}]}`, 400, api.CodeInvalidArgument, `waits for "z", which is no task`},
		{"BadName", `{"tasks":[{"name":"a b","type":"echo"}]}`, 400, api.CodeInvalidArgument, `task name "a b"`},
		{"NoName", `{"tasks":[{"type":"echo"}]}`, 400, api.CodeInvalidArgument, `task name ""`},
		{"DuplicateName", `{"tasks":[{"name":"a","type":"echo"},{"name":"a","type":"echo"}]}`, 400, api.CodeInvalidArgument, `two tasks are named "a"`},
		{"DelayRefused", `{"tasks":[{"name":"a","type":"echo","delay":"1m"}]}`, 400, api.CodeInvalidArgument, "task a: a workflow's task cannot take WithDelay"},
		{"IDRefused", `{"tasks":[{"name":"a","type":"echo","id":"x"}]}`, 400, api.CodeInvalidArgument, "cannot take WithID"},
		{"PriorityRefused", `{"tasks":[{"name":"a","type":"echo","priority":2}]}`, 400, api.CodeInvalidArgument, "WithPriority"},
		{"FinallyAlone", `{"tasks":[{"name":"a","type":"echo","finally":true}]}`, 400, api.CodeInvalidArgument, "Finally but waits for no task"},
		{"NoType", `{"tasks":[{"name":"a"}]}`, 400, api.CodeInvalidArgument, "tasks[0]: type is required"},
		{"BadDuration", `{"tasks":[{"name":"a","type":"echo"},{"name":"b","type":"echo","timeout":"soon"}]}`, 400, api.CodeInvalidArgument, `tasks[1]: timeout "soon" is not a duration`},
		{"BadWorkflowID", `{"id":"a b","tasks":[{"name":"a","type":"echo"}]}`, 400, api.CodeInvalidArgument, "workflow id"},
		{"UnknownField", `{"tasks":[{"name":"a","type":"echo"}],"extra":1}`, 400, api.CodeInvalidBody, `unknown field "extra"`},
		{"UnknownTaskField", `{"tasks":[{"name":"a","type":"echo","wait":["b"]}]}`, 400, api.CodeInvalidBody, `tasks[0]: unknown field "wait"`},
		{"AfterNotArray", `{"tasks":[{"name":"a","type":"echo","after":"b"}]}`, 400, api.CodeInvalidBody, "tasks[0]: field after"},
		{"Malformed", `{"tasks":[{"name":"a",`, 400, api.CodeInvalidBody, "the body ends in the middle"},
		{"Syntax", `{"tasks":[}`, 400, api.CodeInvalidBody, "malformed JSON"},
		{"NoTasks", `{"tasks":[]}`, 400, api.CodeInvalidArgument, "no tasks"},
		{"NullTasks", `{"tasks":null}`, 400, api.CodeInvalidBody, `want {"tasks":[...]}`},
		{"Empty", `{}`, 400, api.CodeInvalidBody, `want {"tasks":[...]}`},
		{"Array", `[]`, 400, api.CodeInvalidBody, "want a JSON object, got array"},
		{"Trailing", `{"tasks":[{"name":"a","type":"echo"}]} {}`, 400, api.CodeInvalidBody, "more than one JSON value"},
		{"Oversize", `{"tasks":[{"name":"a","type":"echo","payload":"` + strings.Repeat("x", 5000) + `"}]}`, 413, api.CodePayloadTooLarge, "4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := e.do("POST", e.workflows(), tc.body)
			require.Equal(t, tc.status, r.status, "%s", r.body)
			ae := r.apiErr(t)
			require.Equal(t, tc.code, ae.Code, ae.Message)
			require.Contains(t, ae.Message, tc.msg)
			require.NotContains(t, ae.Message, "pipeline:")
		})
	}
	r := e.do("GET", e.workflows(), "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"workflows":[]}`, string(r.body), "nothing was written")
}

func TestWorkflowPublishAndGet(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", e.workflows(), diamond)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	require.Equal(t, e.workflows()+"/wf-1", r.header.Get("Location"))
	var wf apiWorkflow
	r.json(t, &wf)
	require.Equal(t, "wf-1", wf.ID)
	require.Equal(t, e.queue, wf.Queue)
	require.Equal(t, "diamond", wf.Name)
	require.Equal(t, "workflow", wf.Kind)
	require.Equal(t, "running", wf.Status)
	require.Equal(t, 4, wf.Total)
	require.False(t, wf.Duplicate)
	require.Len(t, wf.Tasks, 4)
	require.Equal(t, "a", wf.Tasks[0].Name)
	require.Equal(t, "wf-1.a", wf.Tasks[0].JobID)
	require.Equal(t, "queued", wf.Tasks[0].Status)
	require.Equal(t, []string{}, wf.Tasks[0].After)
	require.Equal(t, "d", wf.Tasks[3].Name)
	require.Equal(t, []string{"b", "c"}, wf.Tasks[3].After)
	require.Equal(t, "waiting", wf.Tasks[3].Status)

	// A task is a job like any other, and takes a job body's options.
	j := e.do("GET", e.jobs()+"/wf-1.b", "").job(t)
	require.Equal(t, "waiting", j.Status)
	require.Equal(t, 2, j.MaxRetries)
	require.Equal(t, int64(5000), j.TimeoutMS)
	require.Equal(t, map[string]string{"k": "v"}, j.Metadata)
	var links struct {
		Workflow string `json:"workflow"`
		Task     string `json:"task"`
	}
	e.do("GET", e.jobs()+"/wf-1.b", "").json(t, &links)
	require.Equal(t, "wf-1", links.Workflow)
	require.Equal(t, "b", links.Task)

	// The same workflow again: 200, duplicate, nothing written.
	r = e.do("POST", e.workflows(), diamond)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var again apiWorkflow
	r.json(t, &again)
	require.True(t, again.Duplicate)
	require.Equal(t, wf.CreatedAt, again.CreatedAt)

	// The same id with other tasks: 409.
	r = e.do("POST", e.workflows(), `{"id":"wf-1","tasks":[{"name":"x","type":"echo"}]}`)
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Equal(t, api.CodeConflict, r.apiErr(t).Code)

	r = e.do("GET", e.workflows()+"/wf-1", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var got apiWorkflow
	r.json(t, &got)
	require.Len(t, got.Tasks, 4)
	require.False(t, got.Duplicate)

	r = e.do("GET", e.workflows()+"/nope", "")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	ae := r.apiErr(t)
	require.Equal(t, api.CodeNotFound, ae.Code)
	require.Equal(t, "workflow nope not found in queue "+e.queue, ae.Message)

	// Run it: every task completes, in order.
	e.worker()
	require.Eventually(t, func() bool {
		var st apiWorkflow
		e.do("GET", e.workflows()+"/wf-1", "").json(t, &st)
		return st.Status == "completed" && st.Completed == 4 && st.FinishedAt > 0
	}, waitFor, tick)
}

func TestWorkflowList(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, id := range []string{"w1", "w2", "w3"} {
		r := e.do("POST", e.workflows(), `{"id":"`+id+`","tasks":[{"name":"a","type":"echo"}]}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	}
	list := func(query string) []apiWorkflow {
		t.Helper()
		r := e.do("GET", e.workflows()+query, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var body struct {
			Workflows []apiWorkflow `json:"workflows"`
		}
		r.json(t, &body)
		return body.Workflows
	}
	all := list("")
	require.Len(t, all, 3)
	ids := map[string]bool{}
	for i, w := range all {
		ids[w.ID] = true
		require.Nil(t, w.Tasks, "a summary has no tasks")
		require.Equal(t, 1, w.Total)
		if i > 0 {
			require.LessOrEqual(t, w.CreatedAt, all[i-1].CreatedAt, "newest first")
		}
	}
	require.Len(t, ids, 3)
	require.Len(t, list("?limit=2"), 2)
	for _, bad := range []string{"0", "x", "1001"} {
		r := e.do("GET", e.workflows()+"?limit="+bad, "")
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
		require.Contains(t, r.apiErr(t).Message, "want 1 to 1000")
	}
}

func TestBatchPublish(t *testing.T) {
	t.Parallel()
	e := setup(t)
	body := `{"id":"b-1","name":"mails","jobs":[{"type":"echo","payload":1},{"type":"fail"}],"callback":{"type":"echo","max_retries":0}}`
	r := e.do("POST", e.batches(), body)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	require.Equal(t, e.workflows()+"/b-1", r.header.Get("Location"))
	var b apiWorkflow
	r.json(t, &b)
	require.Equal(t, "batch", b.Kind)
	require.Equal(t, 3, b.Total)
	require.Equal(t, "callback", b.Tasks[2].Name)
	require.True(t, b.Tasks[2].Finally)
	require.Equal(t, []string{"1", "2"}, b.Tasks[2].After)

	r = e.do("POST", e.batches(), body)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r.json(t, &b)
	require.True(t, b.Duplicate)

	for _, tc := range []struct{ name, body, code, msg string }{
		{"DelayRefused", `{"jobs":[{"type":"echo"},{"type":"echo","delay":"1m"}]}`, api.CodeInvalidArgument, "jobs[1]: a workflow's task cannot take WithDelay"},
		{"CallbackRefused", `{"jobs":[{"type":"echo"}],"callback":{"type":"echo","unique":{"key":"k"}}}`, api.CodeInvalidArgument, "callback: a workflow's task cannot take WithUnique"},
		{"CallbackNoType", `{"jobs":[{"type":"echo"}],"callback":{}}`, api.CodeInvalidArgument, "callback: type is required"},
		{"CallbackUnknownField", `{"jobs":[{"type":"echo"}],"callback":{"type":"echo","x":1}}`, api.CodeInvalidBody, `callback: unknown field "x"`},
		{"NoJobs", `{"jobs":[]}`, api.CodeInvalidArgument, "no jobs"},
		{"JobsMissing", `{"callback":{"type":"echo"}}`, api.CodeInvalidBody, `want {"jobs":[...]}`},
		{"UnknownField", `{"jobs":[{"type":"echo"}],"tasks":[]}`, api.CodeInvalidBody, `unknown field "tasks"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", e.batches(), tc.body)
			require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
			ae := r.apiErr(t)
			require.Equal(t, tc.code, ae.Code, ae.Message)
			require.Contains(t, ae.Message, tc.msg)
		})
	}

	// The callback runs once both jobs are final, one of them dead.
	e.worker()
	require.Eventually(t, func() bool {
		var st apiWorkflow
		e.do("GET", e.workflows()+"/b-1", "").json(t, &st)
		return st.Status == "failed" && st.Completed == 2 && st.Failed == 1
	}, waitFor, tick)
}
