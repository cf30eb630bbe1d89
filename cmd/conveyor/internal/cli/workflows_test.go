package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// writeFile writes body into a file of the test's own and returns its path.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "doc.json")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestWorkflowsCommands(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	ok, refused := c.ok, c.refused
	diamond := writeFile(t, `{"id":"wf-1","name":"diamond","tasks":[
		{"name":"a","type":"echo","payload":{"n":1}},
		{"name":"b","type":"echo","after":["a"],"max_retries":2},
		{"name":"c","type":"echo","after":["a"]},
		{"name":"d","type":"echo","after":["b","c"],"finally":true}]}`)

	require.Equal(t, "no workflows in queue q\n", ok("workflows", "list", "-q", "q"))
	require.Equal(t, "wf-1\n", ok("workflows", "publish", "-q", "q", "--file", diamond))

	out := ok("workflows", "get", "-q", "q", "wf-1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Equal(t, `workflow wf-1 "diamond" in queue q: running, 0/4 final (0 completed, 0 dead, 0 canceled)`, lines[0])
	require.True(t, strings.HasPrefix(lines[1], "created "), lines[1])
	require.Regexp(t, `^TASK +STATUS +AFTER +ATTEMPT +LAST_ERROR$`, lines[2])
	require.Regexp(t, `^a +queued +- +0 +-$`, lines[3])
	require.Regexp(t, `^b +waiting +a +0 +-$`, lines[4])
	require.Regexp(t, `^d +waiting +b,c \(finally\) +0 +-$`, lines[6])

	var st struct {
		ID    string `json:"id"`
		Kind  string `json:"kind"`
		Total int    `json:"total"`
		Tasks []struct {
			Name   string `json:"name"`
			JobID  string `json:"job_id"`
			Status string `json:"status"`
		} `json:"tasks"`
		Duplicate bool `json:"duplicate"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok("workflows", "get", "-q", "q", "wf-1", "--json")), &st))
	require.Equal(t, "workflow", st.Kind)
	require.Len(t, st.Tasks, 4)
	require.Equal(t, "wf-1.d", st.Tasks[3].JobID)
	require.Equal(t, "waiting", st.Tasks[3].Status)

	// Again: the same workflow, nothing written.
	again, stderr, code := c.run("workflows", "publish", "-q", "q", "--file", diamond, "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "not published again")
	require.NoError(t, json.Unmarshal([]byte(again), &st))
	require.True(t, st.Duplicate)
	// A task is a job: status reads it.
	require.Contains(t, ok("status", "-q", "q", "wf-1.b"), "waiting")

	// A batch, from standard input, shown by 'batches get' and listed with the workflows.
	stdout, stderr, code := runInProcess(t, `{"id":"b-1","jobs":[{"type":"echo"},{"type":"echo"}],"callback":{"type":"echo"}}`,
		"batches", "publish", "-q", "q", "--file", "-", "--redis", c.url, "--prefix", c.prefix)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "b-1\n", stdout)
	out = ok("batches", "get", "-q", "q", "b-1")
	require.True(t, strings.HasPrefix(out, "batch b-1 in queue q: running, 0/3 final (0 completed, 0 dead, 0 canceled)\n"), out)
	require.Regexp(t, `(?m)^callback +waiting +1,2 \(finally\) +0 +-$`, out)

	out = ok("workflows", "list", "-q", "q")
	require.Regexp(t, `(?m)^ID +NAME +KIND +STATUS +PROGRESS +CREATED$`, out)
	require.Regexp(t, `(?m)^wf-1 +diamond +workflow +running +0/4 `, out)
	require.Regexp(t, `(?m)^b-1 +- +batch +running +0/3 `, out)
	var list struct {
		Workflows []map[string]any `json:"workflows"`
	}
	require.NoError(t, json.Unmarshal([]byte(ok("workflows", "list", "-q", "q", "--limit", "1", "--json")), &list))
	require.Len(t, list.Workflows, 1)
	require.NotContains(t, list.Workflows[0], "tasks", "a summary has no tasks")
	require.Equal(t, "{\"workflows\":[]}\n", ok("workflows", "list", "-q", "empty", "--json"))

	// Refusals: the library's (exit 2), the system's (exit 1).
	refused(1, "workflow nope not found in queue \"q\"", "workflows", "get", "-q", "q", "nope")
	refused(1, "batch nope not found in queue \"q\"", "batches", "get", "-q", "q", "nope")
	refused(1, "workflow wf-1", "workflows", "publish", "-q", "q", "--file", writeFile(t, `{"id":"wf-1","tasks":[{"name":"x","type":"echo"}]}`))
	refused(2, "the workflow has a cycle through tasks a, b", "workflows", "publish", "-q", "q", "--file",
		writeFile(t, `{"tasks":[{"name":"a","type":"e","after":["b"]},{"name":"b","type":"e","after":["a"]}]}`))
	refused(2, "task a: a workflow's task cannot take WithDelay", "workflows", "publish", "-q", "q", "--file",
		writeFile(t, `{"tasks":[{"name":"a","type":"e","delay":"1m"}]}`))
	refused(2, `tasks[0]: unknown field "wait"`, "workflows", "publish", "-q", "q", "--file",
		writeFile(t, `{"tasks":[{"name":"a","type":"e","wait":["b"]}]}`))
	refused(2, "malformed JSON", "batches", "publish", "-q", "q", "--file", writeFile(t, `{"jobs":[}`))
	refused(2, "--file: open", "batches", "publish", "-q", "q", "--file", filepath.Join(t.TempDir(), "none.json"))
	require.Equal(t, "no workflows in queue q2\n", ok("workflows", "list", "-q", "q2"), "a refused publish writes nothing")
}

// A file over the limit is refused as such, not as JSON cut short.
func TestWorkflowsPublishHugeFile(t *testing.T) {
	t.Parallel()
	huge := `{"tasks":[{"name":"a","type":"e","payload":"` + strings.Repeat("x", int(maxWorkflowFile)) + `"}]}`
	_, stderr, code := runInProcess(t, huge, "workflows", "publish", "--file", "-", "--redis", noRedis)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "standard input (--file -): it holds more than 16777216 bytes")
}

// The table says "dead" for a failed task, as every table does, and counts purged tasks.
func TestPrintWorkflowDead(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	st := &pipeline.WorkflowState{ID: "w", Queue: "q", Kind: "workflow", Status: pipeline.WorkflowFailed,
		CreatedAt: time.Now(), Total: 3, Completed: 1, Failed: 1, Purged: 1, Tasks: []pipeline.WorkflowTaskState{
			{Name: "a", Status: status.Completed, Attempt: 1},
			{Name: "b", Status: status.Failed, After: []string{"a"}, Attempt: 3, LastError: "boom\nat line 2"},
			{Name: "c", Status: "purged", After: []string{"a"}, Attempt: 1}}}
	require.NoError(t, printWorkflow(&b, st))
	out := b.String()
	require.Contains(t, out, "workflow w in queue q: failed, 3/3 final (1 completed, 1 dead, 0 canceled, 1 purged)\n")
	require.Regexp(t, `(?m)^b +dead +a +3 +boom at line 2$`, out)
	require.Regexp(t, `(?m)^c +purged +a +1 +-$`, out)
}

// 'workflows get' completes the ids of the queue's newest workflows.
func TestWorkflowIDCompletion(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	c.ok("workflows", "publish", "-q", "q", "--file", writeFile(t, `{"id":"wf-7","name":"nightly","tasks":[{"name":"a","type":"echo"}]}`))
	// The word to complete comes last: the connection's flags go before it.
	stdout, stderr, code := runInProcess(t, "", "__complete", "--redis", c.url, "--prefix", c.prefix, "workflows", "get", "-q", "q", "wf")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "wf-7\tworkflow nightly: running\n:4\n", stdout)
}

// A workflow (or batch) published again under its id with the same tasks writes nothing and
// says so, as 'conveyor publish' does for a job: the id on stdout, exit 0, and on stderr that
// it was not published again (issue 30: it exited 0 saying nothing).
func TestWorkflowsPublishDuplicateSaysSo(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	doc := writeFile(t, `{"id":"wf-d","tasks":[{"name":"a","type":"echo"}]}`)
	stdout, stderr, code := c.run("workflows", "publish", "-q", "q", "--file", doc)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "wf-d\n", stdout)
	require.Empty(t, stderr)

	stdout, stderr, code = c.run("workflows", "publish", "-q", "q", "--file", doc)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "wf-d\n", stdout)
	require.Equal(t, "conveyor: workflow wf-d not published again: it exists already, with the same tasks and payloads\n", stderr)

	batch := writeFile(t, `{"id":"b-d","jobs":[{"type":"echo"}]}`)
	_, _, code = c.run("batches", "publish", "-q", "q", "--file", batch)
	require.Equal(t, 0, code)
	stdout, stderr, code = c.run("batches", "publish", "-q", "q", "--file", batch, "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"duplicate":true`)
	require.Equal(t, "conveyor: batch b-d not published again: it exists already, with the same jobs and payloads\n", stderr)
}
