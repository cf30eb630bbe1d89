package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/conveyorq/conveyor/doctor"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/rediserr"
	"github.com/conveyorq/conveyor/pipeline"
)

// readyTimeout bounds /readyz's ping.
const readyTimeout = 2 * time.Second

// healthz: GET /healthz. The process is up.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz: GET /readyz. Redis answers a PING.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := s.client.Redis().Ping(ctx).Err(); err != nil {
		if rediserr.IsAuth(err) {
			// Redis answered, with WRONGPASS or NOAUTH: "unreachable" would send the reader
			// to the network. toAPIError names the credentials.
			return toAPIError(rediserr.Wrap("ping", err))
		}
		return &apiError{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			Message: "Redis is unreachable", Op: "ping", cause: err}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

//go:embed openapi.json
var openAPI []byte

// openapi: GET /v1/openapi.json.
func (s *Server) openapi(w http.ResponseWriter, _ *http.Request) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(openAPI)
	return nil
}

// openAPI30 is openapi.json in OpenAPI 3.0.3 form, for the tools that read only 3.0. The api
// package's tests generate it from openapi.json (TestOpenAPI30, which fails when it is stale).
//
//go:embed openapi-3.0.json
var openAPI30 []byte

// openapi30: GET /v1/openapi-3.0.json.
func (s *Server) openapi30(w http.ResponseWriter, _ *http.Request) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(openAPI30)
	return nil
}

// listQueues: GET /v1/queues.
func (s *Server) listQueues(w http.ResponseWriter, r *http.Request) error {
	qs, err := s.inspector.Queues(r.Context())
	if err != nil {
		return err
	}
	if qs == nil {
		qs = []*pipeline.QueueStats{}
	}
	writeJSON(w, http.StatusOK, struct {
		Queues []*pipeline.QueueStats `json:"queues"`
	}{qs})
	return nil
}

// queueStats: GET /v1/queues/{queue}. A queue that does not exist (Inspector.QueueExists) is a
// 404, as in /v1/throughput: all zeros would read as an idle queue, and hide a typo.
func (s *Server) queueStats(w http.ResponseWriter, r *http.Request) error {
	st, err := s.inspector.Stats(r.Context(), r.PathValue("queue"))
	if err != nil {
		return err
	}
	if st.Empty() {
		ok, err := s.inspector.QueueExists(r.Context(), r.PathValue("queue"))
		if err != nil {
			return err
		}
		if !ok {
			return queueNotFound(r.PathValue("queue"))
		}
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// createQueue: PUT /v1/queues/{queue} with {"partitions": P}. It creates the queue, or sets
// its partition count (the same count again is a no-op; a change while jobs are unfinished is
// a 409 queue_busy).
func (s *Server) createQueue(w http.ResponseWriter, r *http.Request) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	var body struct {
		Partitions int `json:"partitions"`
	}
	if err := decodeJSON(r.Body, &body); err != nil {
		return err
	}
	info, err := s.inspector.CreateQueue(r.Context(), r.PathValue("queue"), pipeline.QueueOptions{Partitions: body.Partitions})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

// deleteQueue: DELETE /v1/queues/{queue}[?force=true].
func (s *Server) deleteQueue(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	force, err := boolParam(r, "force")
	if err != nil {
		return err
	}
	if err := s.inspector.DeleteQueue(r.Context(), queue, force); err != nil {
		if errors.Is(err, pipeline.ErrQueueNotFound) {
			return errorf(http.StatusNotFound, CodeNotFound, "queue %s not found", queue)
		}
		return err
	}
	body := map[string]any{"queue": queue, "deleted": true}
	// Live workers that still read the queue make it again at their next read: say so. The
	// lookup is advice; its failure leaves the warning out.
	if readers, err := s.inspector.QueueReaders(r.Context(), queue); err == nil && len(readers) > 0 {
		names := make([]string, len(readers))
		for k, wk := range readers {
			names[k] = wk.Name
		}
		body["readers"] = names
		body["warning"] = fmt.Sprintf("%d live worker(s) still read queue %s (%s): each makes its stream and consumer group "+
			"again, empty, at its next read, and runs any job published to it; stop them or restart them without the queue",
			len(readers), queue, strings.Join(names, ", "))
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// listWorkers: GET /v1/workers.
func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.inspector.Workers(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		Workers []pipeline.WorkerInfo `json:"workers"`
	}{ws})
	return nil
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badArg("%s %q: want true or false", name, v)
	}
	return b, nil
}

// replay: POST /v1/queues/{queue}/dead/{id}/replay.
func (s *Server) replay(w http.ResponseWriter, r *http.Request) error {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	if err := s.inspector.Replay(r.Context(), queue, id); err != nil {
		return jobErr(err, queue, id)
	}
	job, err := s.client.Get(r.Context(), queue, id)
	if err != nil {
		return jobErr(err, queue, id)
	}
	writeJSON(w, http.StatusOK, job)
	return nil
}

// replayAll: POST /v1/queues/{queue}/dead:replay. Dead jobs that cannot run again stay, and
// not_replayed says why; the others are replayed all the same.
func (s *Server) replayAll(w http.ResponseWriter, r *http.Request) error {
	queue := r.PathValue("queue")
	if err := keys.ValidateQueue(queue); err != nil {
		// Checked here: ReplayAll's ErrInvalid otherwise means jobs that stay dead.
		return badArg("%s", err)
	}
	n, err := s.inspector.ReplayAll(r.Context(), queue)
	body := struct {
		Replayed    int    `json:"replayed"`
		NotReplayed string `json:"not_replayed,omitempty"`
	}{Replayed: n}
	if err != nil {
		stay := errors.Is(err, pipeline.ErrUniqueHeld) || errors.Is(err, pipeline.ErrInvalid)
		if !stay || noAnswer(err) || refusing(err) {
			return err
		}
		body.NotReplayed = message(err)
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// purge: DELETE /v1/queues/{queue}/dead/{id}[?dry_run=true].
func (s *Server) purge(w http.ResponseWriter, r *http.Request) error {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	dry, err := boolParam(r, "dry_run")
	if err != nil {
		return err
	}
	if dry {
		if _, err := s.inspector.PurgeDryRun(r.Context(), queue, id); err != nil {
			return jobErr(err, queue, id)
		}
		writeJSON(w, http.StatusOK, wouldPurge{WouldPurge: 1, IDs: []string{id}})
		return nil
	}
	n, err := s.inspector.Purge(r.Context(), queue, id)
	if err != nil {
		return jobErr(err, queue, id)
	}
	writeJSON(w, http.StatusOK, map[string]int{"purged": n})
	return nil
}

// wouldPurge is the answer of a purge's dry run.
type wouldPurge struct {
	WouldPurge int      `json:"would_purge"`
	IDs        []string `json:"ids"`
}

// purgeAll: DELETE /v1/queues/{queue}/dead[?older_than=24h][&dry_run=true].
func (s *Server) purgeAll(w http.ResponseWriter, r *http.Request) error {
	var age time.Duration
	if v := r.URL.Query().Get("older_than"); v != "" {
		d, err := duration("older_than", v)
		if err != nil {
			return err
		}
		if d < 0 {
			return badArg("older_than %s is negative", v)
		}
		age = d
	}
	dry, err := boolParam(r, "dry_run")
	if err != nil {
		return err
	}
	if dry {
		// Ids only: the answer names no more, and reading the records cost every payload.
		ids, err := s.inspector.PurgeAllDryRunIDs(r.Context(), r.PathValue("queue"), age)
		if err != nil {
			return err
		}
		if ids == nil {
			ids = []string{}
		}
		writeJSON(w, http.StatusOK, wouldPurge{WouldPurge: len(ids), IDs: ids})
		return nil
	}
	n, err := s.inspector.PurgeAll(r.Context(), r.PathValue("queue"), age)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int{"purged": n})
	return nil
}

// doctor: GET /v1/doctor. The checks of `conveyor doctor`; a failed check is a finding in a
// 200 answer, not an error.
func (s *Server) doctor(w http.ResponseWriter, r *http.Request) error {
	report, err := s.doc.Check(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, report)
	return nil
}

// redisBody is the JSON of GET /v1/redis: doctor.Doctor.Info and the doctor's findings.
type redisBody struct {
	*doctor.Info
	Doctor doctor.Report `json:"doctor"`
}

// redisInfo: GET /v1/redis. The dashboard's Redis page.
func (s *Server) redisInfo(w http.ResponseWriter, r *http.Request) error {
	info, err := s.doc.Info(r.Context())
	if err != nil {
		return err
	}
	report, err := s.doc.Check(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, redisBody{Info: info, Doctor: report})
	return nil
}

// pauseQueue: POST /v1/queues/{queue}/pause. Workers stop taking the queue's jobs
// (pipeline.Inspector.Pause); 404 for a queue that does not exist.
func (s *Server) pauseQueue(w http.ResponseWriter, r *http.Request) error {
	return s.setPaused(w, r, true)
}

// resumeQueue: POST /v1/queues/{queue}/resume.
func (s *Server) resumeQueue(w http.ResponseWriter, r *http.Request) error {
	return s.setPaused(w, r, false)
}

func (s *Server) setPaused(w http.ResponseWriter, r *http.Request, pause bool) error {
	queue := r.PathValue("queue")
	var err error
	if pause {
		err = s.inspector.Pause(r.Context(), queue)
	} else {
		err = s.inspector.Resume(r.Context(), queue)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"queue": queue, "paused": pause})
	return nil
}
