package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// The events stream's heartbeat: a comment line sent when no event was. Proxies and load
// balancers cut a connection idle for a minute or so; the heartbeat keeps the stream open. It
// also lets a client learn of a dead connection.
const (
	DefaultHeartbeat = 15 * time.Second
	MinHeartbeat     = 100 * time.Millisecond
	MaxHeartbeat     = time.Minute
)

// streamsRetryAfter is the Retry-After (seconds) of a stream refused past MaxEventStreams.
const streamsRetryAfter = "5"

// eventsWriteSlack is how long past the next heartbeat a write of the stream may take. Each
// write moves the connection's write deadline on. A server's WriteTimeout bounds a whole
// response, and would cut every stream.
const eventsWriteSlack = 30 * time.Second

// eventsQuery is what GET .../jobs/{id}/events takes from its query.
type eventsQuery struct {
	heartbeat time.Duration
}

// parseEventsQuery reads the events stream's query: heartbeat, a duration from MinHeartbeat to
// MaxHeartbeat (default DefaultHeartbeat). Other parameters are ignored, as on every route.
func parseEventsQuery(q url.Values) (eventsQuery, error) {
	e := eventsQuery{heartbeat: DefaultHeartbeat}
	if vs, ok := q["heartbeat"]; ok {
		if len(vs) != 1 {
			return e, badArg("heartbeat is given %d times: give it once", len(vs))
		}
		d, err := duration("heartbeat", vs[0])
		if err != nil {
			return e, err
		}
		if d < MinHeartbeat || d > MaxHeartbeat {
			return e, badArg("heartbeat %s is out of range: from %s to %s", vs[0], MinHeartbeat, MaxHeartbeat)
		}
		e.heartbeat = d
	}
	return e, nil
}

// progressEvent is the data of a progress event: the job's progress and where it is.
type progressEvent struct {
	ID              string        `json:"id"`
	Queue           string        `json:"queue"`
	Status          status.Status `json:"status"`
	Attempt         int           `json:"attempt"`
	Progress        int           `json:"progress"`
	ProgressMessage string        `json:"progress_message"`
	ProgressAt      int64         `json:"progress_at"`
}

// jobEvents: GET /v1/queues/{queue}/jobs/{id}/events[?heartbeat=15s], Server-Sent Events.
//
// The stream opens with a status event (the job, as GET returns it). A progress event follows
// when the running attempt reported any. Then a status event comes each time the job's status or
// attempt changes, and a progress event each time its handler's report does. The stream ends
// after the status event of the final status (completed, failed, canceled). Reports made between
// two reads arrive as the latest only. A stream ends at once when the client goes or the server
// closes. An unknown job is a 404 before any event.
//
// Every event has an id naming the state it reports (eventID). A reconnect's Last-Event-ID
// leaves out what the client has. When that is the job's final status, the answer is a 204, and
// an EventSource then stops reconnecting. Otherwise it is the current state less the events of
// that id. What changed while the client was away is not replayed: the server keeps no log of a
// job's events. An id of another attempt or status than the first event's tells the client it
// missed some.
func (s *Server) jobEvents(w http.ResponseWriter, r *http.Request) error {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	eq, err := parseEventsQuery(r.URL.Query())
	if err != nil {
		return err
	}
	// Each stream holds a connection, a goroutine and buffers for as long as its job runs: a
	// bound keeps many followers from exhausting the server.
	if n := s.streams.Add(1); n > int64(s.cfg.MaxEventStreams) {
		s.streams.Add(-1)
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, retryAfter: streamsRetryAfter,
			Message: fmt.Sprintf("this server has %d event streams open, its most (conveyor serve --max-event-streams): "+
				"try again later, or poll the job (GET with ?wait=)", s.cfg.MaxEventStreams)}
	}
	defer s.streams.Add(-1)
	lastID := r.Header.Get("Last-Event-ID")
	if s.waits.ctx.Err() != nil {
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "the server is shutting down")
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.waits.ctx, cancel) // Close ends the streams, as the long polls
	defer stop()

	jobs := make(chan *pipeline.Job)
	done := make(chan error, 1)
	go func() {
		done <- s.waits.waiter.Follow(ctx, queue, id, func(j *pipeline.Job) error {
			select {
			case jobs <- j:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	// The job as it is, or why not, before any header: an unknown job is a plain 404.
	var j *pipeline.Job
	select {
	case j = <-jobs:
	case err := <-done:
		if err == nil || ctx.Err() != nil {
			return nil // the client went, or the server closed: nobody to answer
		}
		return jobErr(err, queue, id)
	}
	// What the client has, by its Last-Event-ID: the job's state as it is (no event for it),
	// or its status without its progress.
	var last *pipeline.Job
	switch {
	case lastID == "":
	case lastID == progressEventID(j):
		last = j
	case lastID == statusEventID(j):
		c := *j
		c.Reported = nil
		last = &c
	}
	if last != nil && j.Status.Final() {
		w.WriteHeader(http.StatusNoContent) // it had the final status: nothing more will come
		return nil
	}
	s.waits.n.Add(1)
	defer s.waits.n.Add(-1)
	es := &eventStream{w: w, rc: http.NewResponseController(w), heartbeat: eq.heartbeat}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil // the headers say what a GET would get; a HEAD must not wait for the job's end
	}
	beat := time.NewTicker(eq.heartbeat)
	defer beat.Stop()
	for {
		if j != nil {
			if statusEvent(last, j) {
				// A status event carries why the job is not running, as GET does: one read
				// more per change of a job that waits, none for a running one's progress.
				if err := s.inspector.Explain(ctx, j); err != nil && ctx.Err() == nil {
					s.log.Debug().Err(err).Str("queue", queue).Str("job_id", id).Msg("events: no waiting_for")
				}
			}
			if err := es.job(last, j); err != nil {
				return nil // the client went
			}
			if j.Status.Final() {
				return nil
			}
			last, j = j, nil
			beat.Reset(eq.heartbeat)
		}
		select {
		case j = <-jobs:
		case <-beat.C:
			if es.write(": heartbeat\n\n") != nil {
				return nil
			}
		case err := <-done:
			if err != nil && ctx.Err() == nil {
				// Gone while followed (its retention ended), or a bug: say so, then end.
				msg := message(err)
				if errors.Is(err, pipeline.ErrNotFound) {
					msg = fmt.Sprintf("job %s is gone from queue %s", id, queue)
				}
				b, _ := json.Marshal(map[string]string{"message": msg})
				_ = es.write("event: error\ndata: " + string(b) + "\n\n")
			}
			return nil
		}
	}
}

// eventStream writes one events response.
type eventStream struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	heartbeat time.Duration
}

// job writes the events that j's change from last (nil: none sent yet) makes.
func (es *eventStream) job(last, j *pipeline.Job) error {
	if statusEvent(last, j) {
		shown := j
		if rec, ok := es.w.(*recorder); ok && rec.jobs != nil {
			shown = rec.jobs(j)
		}
		b, err := json.Marshal(shown)
		if err != nil {
			return err
		}
		if err := es.write("id: " + statusEventID(j) + "\nevent: status\ndata: " + string(b) + "\n\n"); err != nil {
			return err
		}
	}
	p := j.Reported
	if p == nil || j.Status.Final() || (last != nil && last.Reported != nil && *last.Reported == *p) {
		return nil
	}
	b, err := json.Marshal(progressEvent{ID: j.ID, Queue: j.Queue, Status: j.Status, Attempt: j.Attempt,
		Progress: p.Percent, ProgressMessage: p.Message, ProgressAt: p.At.UnixMilli()})
	if err != nil {
		return err
	}
	return es.write("id: " + progressEventID(j) + "\nevent: progress\ndata: " + string(b) + "\n\n")
}

// statusEvent reports whether j's change from last (nil: none sent yet) makes a status event.
func statusEvent(last, j *pipeline.Job) bool {
	return last == nil || last.Status != j.Status || last.Attempt != j.Attempt || j.Status.Final()
}

// statusEventID is the id of the status event of j's state: "<attempt>-<status>-<unix ms>". The
// time is that of its latest change. So two states differ in id.
func statusEventID(j *pipeline.Job) string {
	at := j.CreatedAt
	for _, t := range []time.Time{j.EnqueuedAt, j.StartedAt, j.CompletedAt} {
		if t.After(at) {
			at = t
		}
	}
	return fmt.Sprintf("%d-%s-%d", j.Attempt, j.Status, at.UnixMilli())
}

// progressEventID is the id of the progress event of j's state: its status event's, and the time
// of the report ("...-p<unix ms>"). With no report, it is its status event's.
func progressEventID(j *pipeline.Job) string {
	if j.Reported == nil {
		return statusEventID(j)
	}
	return statusEventID(j) + "-p" + strconv.FormatInt(j.Reported.At.UnixMilli(), 10)
}

// write sends s and flushes it, with the write deadline moved past the next heartbeat.
func (es *eventStream) write(s string) error {
	// Not every ResponseWriter has deadlines (httptest's has none): without, none is needed.
	_ = es.rc.SetWriteDeadline(time.Now().Add(es.heartbeat + eventsWriteSlack))
	if _, err := es.w.Write([]byte(s)); err != nil {
		return err
	}
	return es.rc.Flush()
}

// untilParam reads ?until=: "final" (the default: a wait returns when the job ends) or
// "progress" (it returns at the job's next change too: a status, an attempt, a progress
// report).
func untilParam(q url.Values) (progress bool, err error) {
	vs, ok := q["until"]
	if !ok {
		return false, nil
	}
	if len(vs) != 1 {
		return false, badArg("until is given %d times: give it once", len(vs))
	}
	switch vs[0] {
	case "final", "":
		return false, nil
	case "progress":
		return true, nil
	}
	return false, badArg("until %q: want final or progress", vs[0])
}

// errChanged stops a Follow at the job's first change.
var errChanged = errors.New("changed")

// waitChange waits up to d for job ref to change from what it is when the wait starts (its
// status, attempt or progress) or end, like waitFor. It returns the job as it is then, or nil
// (the caller reads it) when the wait ended first.
func (p *poller) waitChange(ctx context.Context, ref jobRef, d time.Duration) (*pipeline.Job, error) {
	if p.ctx.Err() != nil {
		return nil, nil
	}
	p.n.Add(1)
	defer p.n.Add(-1)
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	var first, got *pipeline.Job
	err := p.waiter.Follow(wctx, ref.queue, ref.id, func(j *pipeline.Job) error {
		if first == nil {
			first = j
			return nil
		}
		got = j
		return errChanged
	})
	switch {
	case got != nil:
		return got, nil
	case err == nil && first != nil: // it was final already
		return first, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case wctx.Err() != nil:
		return first, nil // no change: the job as it is
	case errors.Is(err, pipeline.ErrNotFound), errors.Is(err, pipeline.ErrInvalid):
		return nil, err
	default:
		p.log.Warn().Err(err).Str("queue", ref.queue).Str("job_id", ref.id).Msg("long poll failed")
		return nil, err
	}
}
