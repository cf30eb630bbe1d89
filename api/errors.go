package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/pipeline"
)

// Error codes: the "code" of an error response. They are stable: clients may branch on them.
const (
	CodeInvalidBody          = "invalid_body"           // 400: the body is not the documented JSON
	CodeInvalidArgument      = "invalid_argument"       // 400: a value is refused (a duration, an id, a queue name, a type)
	CodeUnauthorized         = "unauthorized"           // 401: the bearer token is missing or wrong
	CodeForbidden            = "forbidden"              // 403: a mutating request failed the cross-site rule
	CodeNotFound             = "not_found"              // 404: no such job, queue or route
	CodeMethodNotAllowed     = "method_not_allowed"     // 405: the route exists for other methods (see Allow)
	CodeConflict             = "conflict"               // 409: a refused transition, or an id taken by another job
	CodeMisdirected          = "misdirected_request"    // 421: a Host this server does not answer without a token (DNS rebinding)
	CodeQueueFull            = "queue_full"             // 429: the queue holds its bound of waiting jobs (max_waiting); see Retry-After
	CodePayloadTooLarge      = "payload_too_large"      // 413: the body or the payload is over its limit
	CodeUnsupportedMediaType = "unsupported_media_type" // 415: a POST body that is not application/json
	CodeInternal             = "internal"               // 500: a bug; the log has the details
	CodeUnavailable          = "unavailable"            // 503: Redis is unreachable or refusing
)

// Reasons refine CodeConflict (the error's "reason" field), and one CodeForbidden.
const (
	ReasonIDTaken       = "id_taken"        // the id names a job with another type or payload
	ReasonNotCancelable = "not_cancelable"  // the job already finished
	ReasonNotDead       = "not_dead"        // the job is not in the dead set
	ReasonUniqueHeld    = "unique_held"     // another live job holds the job's unique key
	ReasonQueueBusy     = "queue_busy"      // the queue has unfinished jobs
	ReasonTooManyQueues = "too_many_queues" // the queue is new and the known queues are at their maximum
	// ReasonTooManySchedules: the schedule is new and the stored schedules are at their maximum.
	ReasonTooManySchedules = "too_many_schedules"
	ReasonNotScheduled     = "not_scheduled" // run now of a job that is not scheduled (or waits for a limit's slot)
	ReasonNotDeletable     = "not_deletable" // delete of a job that is not scheduled or queued
	ReasonNoKeys           = "no_keys"       // key rotation on a server without keys (Config.Keys)
	// ReasonPayloadTokenRequired refines a 403 (CodeForbidden): key rotation reads the
	// plaintext, so where a PayloadToken is configured it needs it.
	ReasonPayloadTokenRequired = "payload_token_required"
)

// apiError is an error with the status and body it is answered with.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Reason  string `json:"reason,omitempty"`
	// Op is the operation that Redis failed, on a 5xx answer of a Redis failure, and empty
	// otherwise. It is the rediserr.Error.Op of the cause ("enqueue", "get", "stats", "list",
	// "replay", "purge", ...). It is a short stable word a client may log or branch on.
	Op    string `json:"op,omitempty"`
	cause error  // logged, never sent
	// invalidToken marks a 401 for a bearer token that is not the API's (not a missing one):
	// its WWW-Authenticate says error="invalid_token" (RFC 6750, section 3.1).
	invalidToken bool
	// retryAfter, when set, is sent as the Retry-After header (seconds).
	retryAfter string
	// Refused lists, on a batch's 429, the indexes of the jobs the queue refused; Jobs the
	// others, which were written, in the batch's order.
	Refused []int           `json:"refused,omitempty"`
	Jobs    []*pipeline.Job `json:"jobs,omitempty"`
}

func (e *apiError) Error() string { return e.Message }
func (e *apiError) Unwrap() error { return e.cause }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func badBody(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, CodeInvalidBody, format, args...)
}

func badArg(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, CodeInvalidArgument, format, args...)
}

// toAPIError maps an error of the pipeline, of Redis or of reading a body to what the client is
// told. It goes by the error's kind (rediserr.Classify) and operation (rediserr.OpOf), never by
// its text. Messages of pipeline's input errors are the client's own mistakes, and are shown.
// Redis errors and anything unexpected are not (the log has them), but the operation Redis
// failed is (Op).
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: CodePayloadTooLarge,
			Message: fmt.Sprintf("request body over the limit of %d bytes", tooBig.Limit)}
	case errors.Is(err, pipeline.ErrQueueFull):
		return queueFull(err)
	case errors.Is(err, pipeline.ErrPayloadTooLarge):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: CodePayloadTooLarge, Message: message(err)}
	case errors.Is(err, pipeline.ErrConflict):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Reason: ReasonIDTaken, Message: message(err)}
	case errors.Is(err, pipeline.ErrNotCancelable):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Reason: ReasonNotCancelable, Message: message(err)}
	case errors.Is(err, pipeline.ErrNotDead):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Reason: ReasonNotDead, Message: message(err)}
	case errors.Is(err, pipeline.ErrNotScheduled):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Reason: ReasonNotScheduled, Message: message(err)}
	case errors.Is(err, pipeline.ErrNotDeletable):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Reason: ReasonNotDeletable, Message: message(err)}
	case errors.Is(err, pipeline.ErrUniqueHeld):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Reason: ReasonUniqueHeld, Message: message(err)}
	case errors.Is(err, pipeline.ErrTooManyQueues):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Reason: ReasonTooManyQueues, Message: message(err)}
	case errors.Is(err, pipeline.ErrTooManySchedules):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Reason: ReasonTooManySchedules, Message: message(err)}
	case errors.Is(err, pipeline.ErrQueueBusy):
		return &apiError{Status: http.StatusConflict, Code: CodeConflict, Reason: ReasonQueueBusy, Message: message(err)}
	case errors.Is(err, pipeline.ErrNotFound):
		return &apiError{Status: http.StatusNotFound, Code: CodeNotFound, Message: "job not found"}
	case errors.Is(err, pipeline.ErrQueueNotFound):
		return &apiError{Status: http.StatusNotFound, Code: CodeNotFound, Message: "queue not found"}
	case errors.Is(err, pipeline.ErrScheduleNotFound):
		return &apiError{Status: http.StatusNotFound, Code: CodeNotFound, Message: message(err)}
	case errors.Is(err, pipeline.ErrInvalid):
		return &apiError{Status: http.StatusBadRequest, Code: CodeInvalidArgument, Message: message(err)}
	case noAnswer(err):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "Redis is unreachable; try again later", Op: rediserr.OpOf(err), cause: err}
	case errors.Is(err, context.Canceled):
		// The client went away (or the server is closing): nobody reads this answer.
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "request canceled"}
	case rediserr.IsAuth(err):
		// Wrong credentials or database: the server is up and says why; an empty answer
		// would read as an empty system.
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "Redis refused this server's credentials (check its --redis user and password)",
			Op:      rediserr.OpOf(err), cause: err}
	case rediserr.IsRedirect(err):
		// A cluster node sent a key of another node's slot on (MOVED): the server's client is
		// a plain one, which does not follow it. Every request on such a key fails alike.
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "Redis is a Redis Cluster node and sent the command to another node (MOVED): start the server with --cluster",
			Op:      rediserr.OpOf(err), cause: err}
	case refusing(err):
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "Redis is refusing commands (loading, read-only or out of memory); try again later",
			Op:      rediserr.OpOf(err), cause: err}
	}
	return &apiError{Status: http.StatusInternalServerError, Code: CodeInternal,
		Message: "internal error; the server's log has the details", Op: rediserr.OpOf(err), cause: err}
}

// queueNotFound is the 404 of a queue that does not exist (pipeline.Inspector.QueueExists),
// naming it: a typo is then plain to see.
func queueNotFound(queue string) error {
	return &apiError{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("queue %s not found", queue)}
}

// jobErr names the job in a not-found error.
func jobErr(err error, queue, id string) error {
	if errors.Is(err, pipeline.ErrNotFound) {
		return errorf(http.StatusNotFound, CodeNotFound, "job %s not found in queue %s", id, queue)
	}
	return err
}

// message is a pipeline input error's text for a client: without the package prefixes, which
// name our code, not the client's mistake.
func message(err error) string { return rediserr.Message(err) }

// noAnswer reports that Redis gave no answer. It is unreachable (rediserr.Unreachable), our
// client to it is closed, or the request's deadline passed while waiting. The deadline is the
// server's own bound on a request, so it says Redis is too slow to answer.
func noAnswer(err error) bool {
	switch rediserr.Classify(err) {
	case rediserr.Unreachable, rediserr.Closed:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// refusing reports a Redis error that passes with time. Examples: a server loading its data or
// busy with a script, a replica after a failover, a cluster resharding, a full server.
func refusing(err error) bool {
	switch rediserr.Classify(err) {
	case rediserr.Loading, rediserr.Busy, rediserr.ReadOnly, rediserr.ClusterDown, rediserr.OOM:
		return true
	}
	return false
}

// errorBody is the JSON of every error response.
type errorBody struct {
	Error *apiError `json:"error"`
}

// queueFull is the 429 of a publish a bounded queue refused, with Retry-After in whole
// seconds (at least 1) from the refusal's estimate.
func queueFull(err error) *apiError {
	ra, _ := pipeline.RetryAfter(err)
	secs := max(1, int64((ra+time.Second-1)/time.Second))
	return &apiError{Status: http.StatusTooManyRequests, Code: CodeQueueFull, Message: message(err),
		retryAfter: strconv.FormatInt(secs, 10)}
}

// writeError answers err. Errors the client is not told the details of (5xx) are logged at
// error level with their cause.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if q := r.PathValue("queue"); q != "" && errors.Is(err, pipeline.ErrQueueNotFound) {
		// Every route of a queue names it, whichever Inspector call found it missing.
		err = queueNotFound(q)
	}
	ae := toAPIError(err)
	if ae.Status >= 500 && r.Context().Err() == nil {
		s.log.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).
			Int("status", ae.Status).Msg("request failed")
	}
	if ae.retryAfter != "" {
		w.Header().Set("Retry-After", ae.retryAfter)
	}
	if ae.Status == http.StatusUnauthorized {
		challenge := `Bearer realm="conveyor"`
		if ae.invalidToken {
			challenge += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", challenge)
	}
	writeJSON(w, ae.Status, errorBody{ae})
}

// writeJSON answers v as JSON with status. The jobs in it are shown as the request may see
// them (recorder.jobs).
func writeJSON(w http.ResponseWriter, status int, v any) {
	if rec, ok := w.(*recorder); ok && rec.jobs != nil {
		v = viewJobs(v, rec.jobs)
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Our own types always marshal; this is a bug, and the client gets a plain 500.
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"internal error; the server's log has the details"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
