package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/pipeline"
)

// FuzzDecodeWorkflow feeds the workflow body decoder arbitrary bytes, alone and wrapped as a
// batch's. It must never panic; a refusal is a 400 with a stable code and a message, and an
// accepted body has tasks (at most maxWorkflowTasks), each with a type and a
// compact JSON payload. Run it longer with
//
//	go test -fuzz=FuzzDecodeWorkflow ./api/
func FuzzDecodeWorkflow(f *testing.F) {
	for _, s := range []string{
		`{"id":"w","name":"n","tasks":[{"name":"a","type":"echo","payload":{"n":1}},{"name":"b","type":"echo","after":["a"],"finally":true}]}`,
		`{"TASKS":[{"name":"a","type":"e"}],"tasks":null}`,
		`{"tasks":[{"name":"a","type":"e","delay":"1s","metadata":{"k":"v"}}]} `,
		`{"tasks":[{"name":"a","type":"e","after":"b"}]}`,
		"{\"tasks\":[{\"name\":\"a\xff\",\"type\":\"e\"}]}",
		`{"jobs":[{"type":"e"}],"callback":{"type":"e"}}`,
		`{"id":null,"tasks":[{}]}`, `[]`, `null`, `{"tasks":[1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		wf, err := DecodeWorkflow(bytes.NewReader(body))
		if err != nil {
			checkWorkflowRefusal(t, err)
			require.Nil(t, wf.Tasks)
		} else {
			require.NotEmpty(t, wf.Tasks)
			require.LessOrEqual(t, len(wf.Tasks), maxWorkflowTasks)
			for _, task := range wf.Tasks {
				checkTask(t, task.Task)
			}
		}
		b, err := DecodeBatch(bytes.NewReader(body))
		if err != nil {
			checkWorkflowRefusal(t, err)
			return
		}
		require.NotEmpty(t, b.Jobs)
		for _, task := range b.Jobs {
			checkTask(t, task)
		}
		if b.Callback != nil {
			checkTask(t, *b.Callback)
		}
	})
}

func checkWorkflowRefusal(t *testing.T, err error) {
	t.Helper()
	var ae *apiError
	require.True(t, errors.As(err, &ae), "%T %v", err, err)
	require.Equal(t, http.StatusBadRequest, ae.Status, ae.Message)
	require.Contains(t, []string{CodeInvalidBody, CodeInvalidArgument}, ae.Code)
	require.NotEmpty(t, ae.Message)
}

func checkTask(t *testing.T, task pipeline.Task) {
	t.Helper()
	require.NotEmpty(t, task.Type)
	if task.Payload != nil {
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, task.Payload))
		require.Equal(t, compact.Bytes(), []byte(task.Payload))
	}
}

// A task takes the fields of a job body, and they mean the same: DecodeJob's task and options.
func TestDecodeWorkflowTaskIsAJobBody(t *testing.T) {
	t.Parallel()
	job := `"type":"echo","payload":{ "a" : 1 },"metadata":{"k":"v"},"max_retries":3,"timeout":"2s","retention":"1h"`
	wf, err := DecodeWorkflow(strings.NewReader(`{"id":"w","name":"n","tasks":[{"name":"a",` + job + `},{"name":"b","type":"e","after":["a"],"finally":true}]}`))
	require.NoError(t, err)
	want, _, err := DecodeJob([]byte(`{` + job + `}`))
	require.NoError(t, err)
	require.Equal(t, "w", wf.ID)
	require.Equal(t, "n", wf.Name)
	require.Len(t, wf.Tasks, 2)
	got := wf.Tasks[0]
	require.Equal(t, "a", got.Name)
	require.Equal(t, want.Type, got.Type)
	require.Equal(t, want.Payload, got.Payload)
	require.Equal(t, want.Metadata, got.Metadata)
	require.Len(t, got.Opts, len(want.Opts))
	require.Equal(t, []string{"a"}, wf.Tasks[1].After)
	require.True(t, wf.Tasks[1].Finally)

	b, err := DecodeBatch(strings.NewReader(`{"name":"n","jobs":[{` + job + `}],"callback":{"type":"done"}}`))
	require.NoError(t, err)
	require.Len(t, b.Jobs, 1)
	require.Equal(t, want.Payload, b.Jobs[0].Payload)
	require.Equal(t, "done", b.Callback.Type)
}

// A body of more tasks than a workflow may have is refused at the first one too many.
func TestDecodeWorkflowTooManyTasks(t *testing.T) {
	t.Parallel()
	var body bytes.Buffer
	body.WriteString(`{"tasks":[`)
	for i := range maxWorkflowTasks + 10 {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"name":"t","type":"e"}`)
	}
	body.WriteString(`]}`)
	_, err := DecodeWorkflow(&body)
	require.ErrorContains(t, err, "tasks has at least 5001 elements, the limit is 5000")
}

// A workflow body is read one task at a time, as a batch's: 16 MiB of {} or of tasks past the
// limit allocates a small multiple of the body at most. Not parallel: it reads the process's
// allocation counters.
func TestDecodeWorkflowMemoryBounded(t *testing.T) {
	const limit = DefaultMaxBatchBodyBytes
	fill := func(head, elem, tail string) []byte {
		n := (limit - len(head) - len(tail) + 1) / (len(elem) + 1)
		b := append([]byte(head), bytes.Repeat([]byte(elem+","), n)...)
		return append(b[:len(b)-1], tail...)
	}
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"EmptyObjects", fill(`{"tasks":[`, `{}`, `]}`), "tasks[0]: type is required"},
		{"Tasks", fill(`{"tasks":[`, `{"name":"a","type":"e"}`, `]}`), "tasks has at least 5001 elements"},
		{"Numbers", fill(`{"tasks":[`, `1`, `]}`), "tasks[0]: want a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := DecodeWorkflow(bytes.NewReader(tc.body))
			runtime.ReadMemStats(&after)
			require.ErrorContains(t, err, tc.want)
			ratio := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(tc.body))
			t.Logf("%d bytes of body, %.2fx allocated", len(tc.body), ratio)
			require.LessOrEqual(t, ratio, 1.0)
		})
	}
}

// A body naming more dependencies than a workflow may have is refused while it is read, naming
// the bound, before its tasks are built (issue 30: 2.06M dependencies in a 16 MB body were
// decoded, checked and published, 11.6 s and 455 MB of the server's memory).
func TestDecodeWorkflowRefusesTooManyDependencies(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	sb.WriteString(`{"tasks":[`)
	top := make([]string, 142)
	for i := range top {
		top[i] = fmt.Sprintf(`"a%d"`, i)
		fmt.Fprintf(&sb, `{"name":"a%d","type":"t"},`, i)
	}
	after := strings.Join(top, ",")
	for i := range 142 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"name":"b%d","type":"t","after":[%s]}`, i, after)
	}
	sb.WriteString(`]}`)
	_, err := DecodeWorkflow(strings.NewReader(sb.String()))
	checkWorkflowRefusal(t, err)
	require.ErrorContains(t, err, fmt.Sprintf("more than the %d dependencies of a workflow", maxWorkflowDependencies))
}
