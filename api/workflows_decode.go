package api

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/conveyorq/conveyor/pipeline"
)

// taskBody is one task of a workflow POST: its name, what it waits for, and the fields of a job
// body (jobBody). So a task takes the same job fields as POST .../jobs. The library refuses for
// a task the options that choose when or where a job runs (ErrInvalid): the workflow decides.
// Those are id, delay, run_at, unique, debounce, group, priority and limit_key.
type taskBody struct {
	Name    string   `json:"name"`
	After   []string `json:"after"`
	Finally bool     `json:"finally"`
	jobBody
}

// DecodeWorkflow reads a workflow as POST /v1/queues/{queue}/workflows takes its body: {"id"?,
// "name"?, "tasks": [{"name", "after"?, "finally"?, ...the fields of a job}]}. It has the
// strictness of every body: unknown fields, bytes that are not UTF-8 and anything after the
// object are refused. It is the CLI's reading of 'workflows publish --file', so a file and an
// HTTP body mean the same workflow. The library checks the rest when it is published: names,
// cycles, the options a task may take. Its errors are the client's, in the API's words.
func DecodeWorkflow(r io.Reader) (pipeline.Workflow, error) {
	var wf pipeline.Workflow
	var tasks []pipeline.WorkflowTask
	seen := false
	err := decodeObject(r, `{"tasks":[...]}`, func(dec *json.Decoder, key string) error {
		switch {
		case strings.EqualFold(key, "id"):
			return decodeString(dec, key, &wf.ID)
		case strings.EqualFold(key, "name"):
			return decodeString(dec, key, &wf.Name)
		case strings.EqualFold(key, "tasks"):
			seen = true
			// Counted as the tasks are read. So a body of millions of dependencies is refused at
			// the first task past the bound, not once all are in memory.
			edges := 0
			var err error
			tasks, err = decodeArray(dec, "tasks", func(dec *json.Decoder, i int) (pipeline.WorkflowTask, error) {
				var b taskBody
				if err := dec.Decode(&b); err != nil {
					return pipeline.WorkflowTask{}, err
				}
				if edges += len(b.After); edges > maxWorkflowDependencies {
					return pipeline.WorkflowTask{}, badArg("the tasks up to this one wait for %d tasks in all, more than the %d dependencies of a workflow",
						edges, maxWorkflowDependencies)
				}
				task, err := b.task()
				if err != nil {
					return pipeline.WorkflowTask{}, err
				}
				return pipeline.WorkflowTask{Name: b.Name, Task: task, After: b.After, Finally: b.Finally}, nil
			})
			return err
		}
		return badBody("unknown field %q", key)
	})
	if err != nil {
		return pipeline.Workflow{}, err
	}
	if !seen || tasks == nil {
		return pipeline.Workflow{}, badBody(`want {"tasks":[...]}`)
	}
	if len(tasks) == 0 {
		return pipeline.Workflow{}, badArg("the workflow has no tasks")
	}
	wf.Tasks = tasks
	return wf, nil
}

// DecodeBatch reads a batch as POST /v1/queues/{queue}/batches takes its body: {"id"?, "name"?,
// "jobs": [job...], "callback"?: job}. Each job has the fields of POST .../jobs. The library
// refuses those a batch's job may not take, as for a workflow task. It is the CLI's reading of
// 'batches publish --file'.
func DecodeBatch(r io.Reader) (pipeline.Batch, error) {
	var b pipeline.Batch
	var jobs []pipeline.Task
	seen := false
	err := decodeObject(r, `{"jobs":[...]}`, func(dec *json.Decoder, key string) error {
		switch {
		case strings.EqualFold(key, "id"):
			return decodeString(dec, key, &b.ID)
		case strings.EqualFold(key, "name"):
			return decodeString(dec, key, &b.Name)
		case strings.EqualFold(key, "jobs"):
			seen = true
			var err error
			jobs, err = decodeArray(dec, "jobs", func(dec *json.Decoder, _ int) (pipeline.Task, error) {
				var jb jobBody
				if err := dec.Decode(&jb); err != nil {
					return pipeline.Task{}, err
				}
				return jb.task()
			})
			return err
		case strings.EqualFold(key, "callback"):
			var jb *jobBody
			if err := dec.Decode(&jb); err != nil {
				return fieldError("callback", jsonError(err))
			}
			if jb == nil {
				b.Callback = nil
				return nil
			}
			t, err := jb.task()
			if err != nil {
				return fieldError("callback", err)
			}
			b.Callback = &t
			return nil
		}
		return badBody("unknown field %q", key)
	})
	if err != nil {
		return pipeline.Batch{}, err
	}
	if !seen || jobs == nil {
		return pipeline.Batch{}, badBody(`want {"jobs":[...]}`)
	}
	if len(jobs) == 0 {
		return pipeline.Batch{}, badArg("the batch has no jobs")
	}
	b.Jobs = jobs
	return b, nil
}

// task is the job body as a pipeline.Task whose Opts carry its options, as DecodeJob gives it.
func (b *jobBody) task() (pipeline.Task, error) {
	req, err := b.request("")
	if err != nil {
		return pipeline.Task{}, err
	}
	// An id is refused by the library for a task; sent through WithID it is, with its reason.
	req.task.Opts = req.opts
	return req.task, nil
}

// decodeObject reads one JSON object from r, handing each key's value to field. It refuses
// anything after it. The text want describes the object, for a body that is not one.
func decodeObject(r io.Reader, want string, field func(dec *json.Decoder, key string) error) error {
	dec := newDecoder(r)
	tok, err := dec.Token()
	switch {
	case err != nil:
		return jsonError(err)
	case tok == nil:
		return badBody("want %s", want)
	case tok != json.Delim('{'):
		return badBody("want a JSON object, got %s", jsonKind(tok))
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return jsonError(err)
		}
		if err := field(dec, key.(string)); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return jsonError(err)
	}
	return end(dec)
}

// decodeString reads a string (or null, for "") into s.
func decodeString(dec *json.Decoder, key string, s *string) error {
	var v *string
	if err := dec.Decode(&v); err != nil {
		return fieldError(key, jsonError(err))
	}
	*s = ""
	if v != nil {
		*s = *v
	}
	return nil
}

// decodeArray reads the value of field: null (nil), or an array of at most
// maxWorkflowTasks elements (a non-nil slice). It reads the elements one at a time. So
// a body's cost is bounded by its largest element and the count it may hold (decodeBatch's
// reason).
func decodeArray[T any](dec *json.Decoder, field string, elem func(*json.Decoder, int) (T, error)) ([]T, error) {
	tok, err := dec.Token()
	switch {
	case err != nil:
		return nil, jsonError(err)
	case tok == nil:
		return nil, nil
	case tok != json.Delim('['):
		return nil, badBody("field %s: want an array, got %s", field, jsonKind(tok))
	}
	out := []T{}
	for i := 0; dec.More(); i++ {
		if i == maxWorkflowTasks {
			return nil, badArg("%s has at least %d elements, the limit is %d", field, i+1, maxWorkflowTasks)
		}
		v, err := elem(dec, i)
		if err != nil {
			return nil, fieldError(fmt.Sprintf("%s[%d]", field, i), jsonError(err))
		}
		out = append(out, v)
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return nil, jsonError(err)
	}
	return out, nil
}

// fieldError names the field (tasks[3], callback) in a refusal of its value.
func fieldError(field string, err error) error {
	ae, ok := err.(*apiError)
	if !ok {
		return err // a failed read or a body over its limit: not the field's
	}
	return &apiError{Status: ae.Status, Code: ae.Code, Message: field + ": " + ae.Message}
}
