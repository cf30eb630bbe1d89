package api

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strconv"

	"github.com/conveyorq/conveyor/pipeline"
)

// DefaultWorkflowList is how many workflows GET /v1/queues/{queue}/workflows lists without
// ?limit=.
const DefaultWorkflowList = 50

// workflowPath is a workflow's URL path, for Location headers.
func workflowPath(queue, id string) string {
	return "/v1/queues/" + url.PathEscape(queue) + "/workflows/" + url.PathEscape(id)
}

// publishWorkflow: POST /v1/queues/{queue}/workflows.
func (s *Server) publishWorkflow(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	if err := requireJSON(r); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBatchBodyBytes)
	wf, err := DecodeWorkflow(r.Body)
	if err != nil {
		return err
	}
	st, err := s.client.Workflow(traceContext(r), queue, wf)
	if err != nil {
		return workflowError(publishError(err, queue), nil)
	}
	return answerWorkflow(w, queue, st)
}

// publishBatch: POST /v1/queues/{queue}/batches.
func (s *Server) publishBatch(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	if err := requireJSON(r); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBatchBodyBytes)
	b, err := DecodeBatch(r.Body)
	if err != nil {
		return err
	}
	st, err := s.client.Batch(traceContext(r), queue, b)
	if err != nil {
		return workflowError(publishError(err, queue), batchTaskName)
	}
	return answerWorkflow(w, queue, st)
}

// answerWorkflow answers a published workflow: 201, or 200 when it was published before.
func answerWorkflow(w http.ResponseWriter, queue string, st *pipeline.WorkflowState) error {
	w.Header().Set("Location", workflowPath(queue, st.ID))
	status := http.StatusCreated
	if st.Duplicate {
		status = http.StatusOK // a repeat: nothing new was written
	}
	writeJSON(w, status, st)
	return nil
}

// libraryTask matches the library's name for a workflow's task in its refusals ("task
// build: ").
var libraryTask = regexp.MustCompile(`(^|\n)task ([A-Za-z0-9_-]+): `)

// batchTaskName names a batch's task as the body does: task "3" is jobs[2], "callback" the
// callback.
func batchTaskName(name string) string {
	if name == batchCallback {
		return "callback"
	}
	if n, err := strconv.Atoi(name); err == nil && n >= 1 {
		return "jobs[" + strconv.Itoa(n-1) + "]"
	}
	return "task " + name
}

// workflowError is the answer to a workflow the library refused. With rename, the library's
// "task NAME: " becomes the body's own name for it.
func workflowError(err error, rename func(string) string) error {
	ae := toAPIError(err)
	if ae.Status >= 500 {
		return err
	}
	out := *ae
	if rename != nil {
		out.Message = libraryTask.ReplaceAllStringFunc(ae.Message, func(m string) string {
			sub := libraryTask.FindStringSubmatch(m)
			return sub[1] + rename(sub[2]) + ": "
		})
	}
	return &out
}

// getWorkflow: GET /v1/queues/{queue}/workflows/{id}.
func (s *Server) getWorkflow(w http.ResponseWriter, r *http.Request) error {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	st, err := s.inspector.Workflow(r.Context(), queue, id)
	if errors.Is(err, pipeline.ErrNotFound) {
		return errorf(http.StatusNotFound, CodeNotFound, "workflow %s not found in queue %s", id, queue)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// workflowsBody is the JSON of a list of workflows (summaries, without their tasks).
type workflowsBody struct {
	Workflows []*pipeline.WorkflowState `json:"workflows"`
}

// listWorkflows: GET /v1/queues/{queue}/workflows?limit=N.
func (s *Server) listWorkflows(w http.ResponseWriter, r *http.Request) error {
	limit := DefaultWorkflowList
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxWorkflowList {
			return badArg("limit %q: want 1 to %d", v, maxWorkflowList)
		}
		limit = n
	}
	list, err := s.inspector.Workflows(r.Context(), r.PathValue("queue"), limit)
	if err != nil {
		return err
	}
	if list == nil {
		list = []*pipeline.WorkflowState{}
	}
	writeJSON(w, http.StatusOK, workflowsBody{Workflows: list})
	return nil
}
