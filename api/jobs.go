package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/internal/tracing"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// jobPath is a job's URL path, for Location headers.
func jobPath(queue, id string) string {
	return "/v1/queues/" + url.PathEscape(queue) + "/jobs/" + url.PathEscape(id)
}

// enqueue: POST /v1/queues/{queue}/jobs.
func (s *Server) enqueue(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	if err := requireJSON(r); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	req, err := decodeJob(r.Body, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	job, err := s.client.Enqueue(traceContext(r), queue, req.task, req.opts...)
	if err != nil {
		return publishError(err, queue)
	}
	w.Header().Set("Location", jobPath(queue, job.ID))
	status := http.StatusAccepted
	if job.Duplicate {
		status = http.StatusOK // a repeat: nothing new was written
	}
	writeJSON(w, status, publishedJob{job, s.publishWarnings(w, r, queue, req.task.Type)})
	return nil
}

// publishedJob is the answer to a one-job publish: the job's JSON (pipeline.Job.MarshalJSON),
// with "warnings" (Inspector.PublishWarnings) when there are any.
type publishedJob struct {
	job      *pipeline.Job
	warnings []string
}

// MarshalJSON adds "warnings" inside the job's object. A struct embedding the job would not
// do: the job's own MarshalJSON would be promoted and write the job alone.
func (p publishedJob) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(p.job)
	if err != nil || len(p.warnings) == 0 {
		return b, err
	}
	ws, err := json.Marshal(p.warnings)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, " \n")
	if len(b) < 2 || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("api: a job's JSON is not an object: %.20q", b)
	}
	out := append(b[:len(b)-1:len(b)-1], `,"warnings":`...)
	return append(append(out, ws...), '}'), nil
}

// traceContext is the request's context with the W3C trace context of its traceparent and
// tracestate headers. The published jobs carry it to their handlers. Under a tracer provider, it
// is their publish span's parent. A malformed traceparent is ignored, as Trace Context asks of a
// receiver.
func traceContext(r *http.Request) context.Context {
	ctx, _ := tracing.FromHeaders(r.Context(), r.Header.Get("traceparent"), r.Header.Get("tracestate"))
	return ctx
}

// publishError names the queue to create when a publish was refused for want of it: a Client
// made with RequireQueues (conveyor serve --create-queues=false) publishes only to known queues.
func publishError(err error, queue string) error {
	if errors.Is(err, pipeline.ErrQueueNotFound) {
		return errorf(http.StatusNotFound, CodeNotFound, "queue %s does not exist, and this server publishes only to "+
			"existing queues (conveyor serve --create-queues=false): create it first with PUT %s or `conveyor queues create %s`",
			queue, "/v1/queues/"+url.PathEscape(queue), queue)
	}
	return err
}

// jobsBody is the JSON of a list of jobs, and of a batch publish's answer with its warnings
// (Inspector.PublishWarnings), omitted when there are none.
type jobsBody struct {
	Jobs     []*pipeline.Job `json:"jobs"`
	Warnings []string        `json:"warnings,omitempty"`
}

// fullReason says which bounds of queue refused fulls: the queue's bound of waiting jobs,
// and the bound per limit key with the keys that held it.
func fullReason(queue string, fulls []*pipeline.QueueFullError) string {
	var parts, keys []string
	queueSeen, keyBound := false, 0
	for _, f := range fulls {
		switch {
		case f.Key == "" && !queueSeen:
			queueSeen = true
			parts = append(parts, fmt.Sprintf("%s holds its bound of waiting jobs (%d)", queue, f.MaxWaiting))
		case f.Key != "" && !slices.Contains(keys, strconv.Quote(f.Key)):
			keyBound = f.MaxWaiting
			keys = append(keys, strconv.Quote(f.Key))
		}
	}
	if len(keys) > 0 {
		parts = append(parts, fmt.Sprintf("%s holds its bound of unfinished jobs per limit key (%d) for key %s",
			queue, keyBound, strings.Join(keys, ", ")))
	}
	return strings.Join(parts, "; ")
}

// enqueueBatch: POST /v1/queues/{queue}/jobs:batch.
func (s *Server) enqueueBatch(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	if err := requireJSON(r); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBatchBodyBytes)
	reqs, err := decodeBatch(r.Body, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	tasks := make([]pipeline.Task, len(reqs))
	for i, req := range reqs {
		tasks[i] = req.task
		tasks[i].Opts = req.opts
	}
	jobs, err := s.client.EnqueueBatch(traceContext(r), queue, tasks)
	if err != nil {
		if fulls := pipeline.QueueFullErrors(err); len(fulls) > 0 && !errors.Is(err, pipeline.ErrConflict) && !noAnswer(err) {
			// Admitted in part, or not at all: the body says which were refused (one line, not
			// one per job) and holds the jobs written.
			ae := queueFull(err)
			ae.Message = fmt.Sprintf("%d of the batch's %d jobs refused: %s; the others were accepted",
				len(fulls), len(tasks), fullReason(queue, fulls))
			if len(fulls) == len(tasks) {
				ae.Message = fmt.Sprintf("the batch's %d jobs refused: %s", len(tasks), fullReason(queue, fulls))
			}
			refused := make(map[int]bool, len(fulls))
			for _, f := range fulls {
				ae.Refused = append(ae.Refused, f.Task)
				refused[f.Task] = true
			}
			ae.Jobs = []*pipeline.Job{}
			for i, j := range jobs {
				if !refused[i] {
					ae.Jobs = append(ae.Jobs, j)
				}
			}
			return ae
		}
		if errors.Is(err, pipeline.ErrConflict) && !noAnswer(err) {
			return &apiError{Status: http.StatusConflict, Code: CodeConflict, Reason: ReasonIDTaken,
				Message: message(err) + "\nthe batch's other jobs were accepted: send it again without these to read them"}
		}
		return batchError(publishError(err, queue))
	}
	status := http.StatusOK // every job was a repeat, unless one was new
	for _, j := range jobs {
		if !j.Duplicate {
			status = http.StatusAccepted
			break
		}
	}
	types := make([]string, len(tasks))
	for i, t := range tasks {
		types[i] = t.Type
	}
	writeJSON(w, status, jobsBody{Jobs: jobs, Warnings: s.publishWarnings(w, r, queue, types...)})
	return nil
}

// getJob: GET /v1/queues/{queue}/jobs/{id}[?wait=30s[&until=progress]].
func (s *Server) getJob(w http.ResponseWriter, r *http.Request) error {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	wait, err := s.waitParam(r)
	if err != nil {
		return err
	}
	onChange, err := untilParam(r.URL.Query())
	if err != nil {
		return err
	}
	var job *pipeline.Job
	switch {
	case wait > 0 && onChange:
		job, err = s.waits.waitChange(r.Context(), jobRef{queue, id}, wait)
	case wait > 0:
		job, err = s.wait(r, jobRef{queue, id}, wait)
	}
	if job == nil && err == nil {
		// The Inspector's read: the job with why it is not running (waiting_for).
		job, err = s.inspector.Get(r.Context(), queue, id)
	} else if err == nil {
		err = s.inspector.Explain(r.Context(), job) // a wait that ended before the job did
	}
	if err != nil {
		return jobErr(err, queue, id)
	}
	writeJSON(w, http.StatusOK, job)
	return nil
}

// jobLogsJSON is the body of GET /v1/queues/{queue}/jobs/{id}/logs.
type jobLogsJSON struct {
	ID    string                `json:"id"`
	Queue string                `json:"queue"`
	Logs  []pipeline.AttemptLog `json:"logs"`
}

// jobLogs answers the lines a job's handler logged, an attempt at a time, oldest first
// (Inspector.JobLogs): an empty list for a job that never logged, 404 for no such job.
func (s *Server) jobLogs(w http.ResponseWriter, r *http.Request) error {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	logs, err := s.inspector.JobLogs(r.Context(), queue, id)
	if err != nil {
		return jobErr(err, queue, id)
	}
	if logs == nil {
		logs = []pipeline.AttemptLog{}
	}
	s.viewLogs(w, id, logs)
	writeJSON(w, http.StatusOK, jobLogsJSON{ID: id, Queue: queue, Logs: logs})
	return nil
}

// waitParam reads ?wait=, cut to MaxWait; zero when absent.
func (s *Server) waitParam(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := duration("wait", v)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, badArg("wait %s is negative", v)
	}
	return min(d, s.cfg.MaxWait), nil
}

// wait blocks until the job is final, the wait ends or the server closes. It returns the job as
// last read, or nil when that is not the job as it is now; the caller reads it then.
func (s *Server) wait(r *http.Request, ref jobRef, d time.Duration) (*pipeline.Job, error) {
	s.log.Debug().Str("queue", ref.queue).Str("job_id", ref.id).Str("wait", d.String()).Msg("long poll waiting")
	return s.waits.waitFor(r.Context(), ref, d)
}

// cancel: DELETE /v1/queues/{queue}/jobs/{id}.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) error {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	if err := s.inspector.Cancel(r.Context(), queue, id); err != nil {
		return jobErr(err, queue, id)
	}
	job, err := s.client.Get(r.Context(), queue, id)
	if errors.Is(err, pipeline.ErrNotFound) {
		// Its record is already gone (no retention): say what became of it.
		job, err = &pipeline.Job{ID: id, Queue: queue, Status: status.Canceled}, nil
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, job)
	return nil
}

// findNamed bounds the queue names a not-found message lists.
const findNamed = 20

// findJob: GET /v1/jobs/{id}.
func (s *Server) findJob(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	job, searched, err := s.inspector.Find(r.Context(), id)
	if errors.Is(err, pipeline.ErrNotFound) {
		if len(searched) == 0 {
			return errorf(http.StatusNotFound, CodeNotFound, "job %s not found: there are no queues", id)
		}
		names := strings.Join(searched[:min(findNamed, len(searched))], ", ")
		if len(searched) > findNamed {
			names += fmt.Sprintf(" and %d more", len(searched)-findNamed)
		}
		return errorf(http.StatusNotFound, CodeNotFound, "job %s not found in queues %s", id, names)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, job)
	return nil
}

// listArgs reads a listing's query: the status (required; "dead" is "failed"), the cursor and
// the limit (1 to maxPageLimit), with the server's byte budget.
func (s *Server) listArgs(r *http.Request) (status.Status, pipeline.Page, error) {
	q := r.URL.Query()
	want := q.Get("status")
	if want == "" {
		var words []string
		for _, st := range status.Listable() {
			words = append(words, st.Word())
		}
		return "", pipeline.Page{}, badArg("status is required: %s", strings.Join(words, ", "))
	}
	page := pipeline.Page{Cursor: q.Get("cursor"), MaxBytes: s.cfg.MaxPageBytes}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageLimit {
			return "", pipeline.Page{}, badArg("limit %q: want 1 to %d", v, maxPageLimit)
		}
		page.Limit = n
	}
	return status.Parse(want), page, nil
}

// listJobs: GET /v1/queues/{queue}/jobs?status=S&cursor=C&limit=N.
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) error {
	st, page, err := s.listArgs(r)
	if err != nil {
		return err
	}
	queue := r.PathValue("queue")
	p, err := s.inspector.List(r.Context(), queue, st, page)
	if err != nil {
		return err
	}
	if len(p.Jobs) == 0 && p.Next == "" && page.Cursor == "" {
		// Only an empty first page asks whether the queue exists: an empty page of a typo would
		// read as an idle queue.
		ok, err := s.inspector.QueueExists(r.Context(), queue)
		if err != nil {
			return err
		}
		if !ok {
			return queueNotFound(queue)
		}
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// runNow: POST /v1/queues/{queue}/jobs/{id}/run. A scheduled job (delayed, a retry, snoozed)
// goes into its stream now; any other is a 409 not_scheduled.
func (s *Server) runNow(w http.ResponseWriter, r *http.Request) error {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	if err := s.inspector.RunNow(r.Context(), queue, id); err != nil {
		return jobErr(err, queue, id)
	}
	job, err := s.client.Get(r.Context(), queue, id)
	if err != nil {
		return jobErr(err, queue, id)
	}
	writeJSON(w, http.StatusOK, job)
	return nil
}

// deleteJob: POST /v1/queues/{queue}/jobs/{id}/delete. A scheduled or queued job is removed
// with its record (DELETE on the job is a cancel, which keeps the record); any other is a 409
// not_deletable.
func (s *Server) deleteJob(w http.ResponseWriter, r *http.Request) error {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	if err := s.inspector.Delete(r.Context(), queue, id); err != nil {
		return jobErr(err, queue, id)
	}
	writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "id": id, "deleted": true})
	return nil
}
