package api_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// jobContractFields are the fields of the job JSON (`status --json`).
var jobContractFields = []string{"id", "queue", "type", "status", "attempt", "max_retries", "priority", "timeout_ms",
	"payload", "metadata", "result", "last_error", "worker", "entry", "version", "created_at", "run_at",
	"enqueued_at", "started_at", "completed_at"}

func TestEnqueue(t *testing.T) {
	t.Parallel()

	t.Run("AcceptedWithLocationAndJobJSON", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		r := e.post(`{"type":"echo","payload":{"n": 1, "s": "x"}}`, http.StatusAccepted)
		j := r.job(t)
		require.Equal(t, "/v1/queues/"+e.queue+"/jobs/"+j.ID, r.header.Get("Location"))
		require.Equal(t, e.queue, j.Queue)
		require.Equal(t, "echo", j.Type)
		require.Equal(t, "queued", j.Status)
		require.JSONEq(t, `{"n":1,"s":"x"}`, string(j.Payload))

		// The body is exactly Job.MarshalJSON of the stored job (the enqueue answer carries
		// what was written; the stored record reads the same), and the warnings: no worker
		// reads this queue.
		stored, err := e.client.Get(t.Context(), e.queue, j.ID)
		require.NoError(t, err)
		want, err := json.Marshal(stored)
		require.NoError(t, err)
		var fields map[string]json.RawMessage
		r.json(t, &fields)
		require.Contains(t, string(fields["warnings"]), "no worker has read queue")
		delete(fields, "warnings")
		job, err := json.Marshal(fields)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(job))
		for _, f := range jobContractFields {
			require.Contains(t, fields, f)
		}
		require.Equal(t, `{"n":1,"s":"x"}`, string(stored.Payload), "the payload is stored as compact JSON text")

		// GET is the Inspector's read: the stored job, with why it is not running.
		got := e.do("GET", r.header.Get("Location"), "")
		require.Equal(t, http.StatusOK, got.status, "%s", got.body)
		insp, err := e.insp.Get(t.Context(), e.queue, j.ID)
		require.NoError(t, err)
		require.NotNil(t, insp.WaitingFor)
		want, err = json.Marshal(insp)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(got.body))
	})

	t.Run("Priority", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		j := e.post(`{"type":"echo","priority":3}`, http.StatusAccepted).job(t)
		require.Equal(t, 3, j.Priority)
		stored, err := e.client.Get(t.Context(), e.queue, j.ID)
		require.NoError(t, err)
		require.Equal(t, 3, stored.Priority)
		got := e.do("GET", "/v1/queues/"+e.queue+"/jobs/"+j.ID, "")
		require.Equal(t, http.StatusOK, got.status, "%s", got.body)
		require.Equal(t, 3, got.job(t).Priority)
		require.Equal(t, 1, e.post(`{"type":"echo"}`, http.StatusAccepted).job(t).Priority, "the default level")
	})

	t.Run("AnyJSONPayload", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		for _, p := range []string{`"text"`, `42`, `[1,2]`, `true`, `{"a":{"b":[null]}}`} {
			j := e.post(`{"type":"echo","payload":`+p+`}`, http.StatusAccepted).job(t)
			require.JSONEq(t, p, string(j.Payload))
		}
		for _, body := range []string{`{"type":"echo"}`, `{"type":"echo","payload":null}`} {
			j := e.post(body, http.StatusAccepted).job(t)
			require.Equal(t, "null", string(j.Payload))
		}
	})

	t.Run("Options", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		before := time.Now()
		j := e.post(`{"type":"echo","delay":"1h","max_retries":2,"timeout":"30s","metadata":{"tenant":"acme"}}`,
			http.StatusAccepted).job(t)
		require.Equal(t, "scheduled", j.Status)
		require.GreaterOrEqual(t, j.RunAt, before.Add(time.Hour).UnixMilli())
		require.Equal(t, 2, j.MaxRetries)
		require.EqualValues(t, 30_000, j.TimeoutMS)
		require.Equal(t, map[string]string{"tenant": "acme"}, j.Metadata)

		at := time.Now().Add(2 * time.Hour).UnixMilli()
		j = e.post(fmt.Sprintf(`{"type":"echo","run_at":%d}`, at), http.StatusAccepted).job(t)
		require.Equal(t, "scheduled", j.Status)
		require.Equal(t, at, j.RunAt)

		// run_at as RFC 3339 too (it took unix milliseconds only), with an offset, rounded up
		// to the millisecond: never before the time sent.
		rfc := time.UnixMilli(at).Add(time.Hour + 500*time.Microsecond).In(time.FixedZone("", 2*3600))
		j = e.post(fmt.Sprintf(`{"type":"echo","run_at":%q}`, rfc.Format(time.RFC3339Nano)), http.StatusAccepted).job(t)
		require.Equal(t, "scheduled", j.Status)
		require.Equal(t, at+3_600_000+1, j.RunAt)

		j = e.post(`{"type":"echo","id":"order:42.a-b_c"}`, http.StatusAccepted).job(t)
		require.Equal(t, "order:42.a-b_c", j.ID)
		got := e.do("GET", e.jobs()+"/order:42.a-b_c", "")
		require.Equal(t, http.StatusOK, got.status, "%s", got.body)
	})

	t.Run("IdempotencyKey", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		first := e.post(`{"type":"echo","payload":{"n":1}}`, http.StatusAccepted, "Idempotency-Key: pay-7").job(t)
		require.Equal(t, "pay-7", first.ID)
		// The same request again (formatted differently): the same job, 200, nothing new.
		again := e.post(`{ "payload": {"n": 1}, "type": "echo" }`, http.StatusOK, "Idempotency-Key: pay-7")
		require.Equal(t, first.ID, again.job(t).ID)
		require.Equal(t, e.jobs()+"/pay-7", again.header.Get("Location"))
		st, err := e.insp.Stats(t.Context(), e.queue)
		require.NoError(t, err)
		require.EqualValues(t, 1, st.Enqueued)

		// Another payload or type under the key: 409.
		for _, body := range []string{`{"type":"echo","payload":{"n":2}}`, `{"type":"other","payload":{"n":1}}`} {
			ae := e.post(body, http.StatusConflict, "Idempotency-Key: pay-7").apiErr(t)
			require.Equal(t, api.CodeConflict, ae.Code)
			require.Equal(t, api.ReasonIDTaken, ae.Reason)
		}
		// The body's id works the same way.
		e.post(`{"type":"echo","id":"pay-8"}`, http.StatusAccepted)
		e.post(`{"type":"echo","id":"pay-8"}`, http.StatusOK)
		e.post(`{"type":"echo","id":"pay-8"}`, http.StatusOK, "Idempotency-Key: pay-8")
		ae := e.post(`{"type":"echo","id":"pay-9"}`, http.StatusBadRequest, "Idempotency-Key: pay-8").apiErr(t)
		require.Equal(t, api.CodeInvalidArgument, ae.Code)
		require.Contains(t, ae.Message, "Idempotency-Key")
	})

	t.Run("Unique", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		first := e.post(`{"type":"echo","unique":{"key":"user-1","ttl":"1m"},"delay":"1h"}`, http.StatusAccepted).job(t)
		again := e.post(`{"type":"echo","payload":"other","unique":{"key":"user-1"}}`, http.StatusOK).job(t)
		require.Equal(t, first.ID, again.ID)
	})
}

func TestEnqueueRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{cfg: api.Config{MaxBodyBytes: 4096}, clientCfg: pipeline.ClientConfig{MaxPayloadBytes: 1000}})
	long := strings.Repeat("x", 129)
	for _, tc := range []struct {
		name, body string
		status     int
		code, msg  string
	}{
		{"Malformed", `{"type":`, 400, api.CodeInvalidBody, "ends in the middle"},
		{"Syntax", `{"type" "echo"}`, 400, api.CodeInvalidBody, "malformed JSON"},
		{"Empty", ``, 400, api.CodeInvalidBody, "empty"},
		{"NotAnObject", `[1]`, 400, api.CodeInvalidBody, "want a JSON object"},
		{"UnknownField", `{"type":"echo","urgency":1}`, 400, api.CodeInvalidBody, `unknown field "urgency"`},
		{"PriorityTooLow", `{"type":"echo","priority":0}`, 400, api.CodeInvalidArgument, "priority 0 is out of range"},
		{"PriorityTooHigh", `{"type":"echo","priority":5}`, 400, api.CodeInvalidArgument, "levels are 1"},
		{"PriorityNotANumber", `{"type":"echo","priority":"high"}`, 400, api.CodeInvalidBody, "priority"},
		{"WrongType", `{"type":"echo","max_retries":"3"}`, 400, api.CodeInvalidBody, "max_retries"},
		{"MetadataNotStrings", `{"type":"echo","metadata":{"a":1}}`, 400, api.CodeInvalidBody, "metadata"},
		{"TwoValues", `{"type":"echo"}{"type":"echo"}`, 400, api.CodeInvalidBody, "more than one"},
		{"NoType", `{"payload":1}`, 400, api.CodeInvalidArgument, "type is required"},
		{"BadType", `{"type":"two words"}`, 400, api.CodeInvalidArgument, "space"},
		{"BadDelay", `{"type":"echo","delay":"soon"}`, 400, api.CodeInvalidArgument, "not a duration"},
		{"NegativeDelay", `{"type":"echo","delay":"-1s"}`, 400, api.CodeInvalidArgument, "negative"},
		{"DelayAndRunAt", `{"type":"echo","delay":"1s","run_at":1}`, 400, api.CodeInvalidArgument, "together"},
		{"BadRunAt", `{"type":"echo","run_at":-5}`, 400, api.CodeInvalidArgument, "run_at"},
		{"RunAtNotRFC3339", `{"type":"echo","run_at":"tomorrow"}`, 400, api.CodeInvalidArgument, "RFC 3339"},
		{"RunAtFloat", `{"type":"echo","run_at":1.5}`, 400, api.CodeInvalidBody, "run_at"},
		{"RunAtBool", `{"type":"echo","run_at":true}`, 400, api.CodeInvalidBody, "run_at"},
		{"RunAtTooLate", `{"type":"echo","run_at":9000000000000000}`, 400, api.CodeInvalidArgument, "after"},
		{"BadTimeout", `{"type":"echo","timeout":"30"}`, 400, api.CodeInvalidArgument, "timeout"},
		{"TooManyRetries", `{"type":"echo","max_retries":5000}`, 400, api.CodeInvalidArgument, "max retries"},
		{"BadID", `{"type":"echo","id":"a b"}`, 400, api.CodeInvalidArgument, "job id"},
		{"LongID", `{"type":"echo","id":"` + long + `"}`, 400, api.CodeInvalidArgument, "job id"},
		{"ReservedMetadata", `{"type":"echo","metadata":{"_x":"1"}}`, 400, api.CodeInvalidArgument, "metadata key"},
		{"UniqueWithoutKey", `{"type":"echo","unique":{"ttl":"1h"}}`, 400, api.CodeInvalidArgument, "unique.key"},
		{"UniqueBadTTL", `{"type":"echo","unique":{"key":"k","ttl":"0s"}}`, 400, api.CodeInvalidArgument, "positive"},
		{"PayloadOverLimit", `{"type":"echo","payload":"` + strings.Repeat("x", 1500) + `"}`, 413, api.CodePayloadTooLarge, "limit is 1000"},
		{"BodyOverLimit", `{"type":"echo","payload":"` + strings.Repeat("x", 5000) + `"}`, 413, api.CodePayloadTooLarge, "4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.request("POST", e.jobs(), tc.body, "Content-Type: application/json")
			require.Equal(t, tc.status, r.status, "%s", r.body)
			ae := r.apiErr(t)
			require.Equal(t, tc.code, ae.Code)
			require.Contains(t, ae.Message, tc.msg)
			require.NotContains(t, ae.Message, "pipeline:")
		})
	}

	t.Run("BadQueueName", func(t *testing.T) {
		r := e.do("POST", "/v1/queues/a:b/jobs", `{"type":"echo"}`)
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
		require.Equal(t, api.CodeInvalidArgument, r.apiErr(t).Code)
	})
	t.Run("NotJSON", func(t *testing.T) {
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/jsonx"} {
			r := e.request("POST", e.jobs(), `{"type":"echo"}`, "Content-Type: "+ct, "X-Conveyor-Request: 1")
			require.Equal(t, http.StatusUnsupportedMediaType, r.status, "%s: %s", ct, r.body)
			require.Equal(t, api.CodeUnsupportedMediaType, r.apiErr(t).Code)
		}
		r := e.request("POST", e.jobs(), `{"type":"echo"}`)
		require.Equal(t, http.StatusUnsupportedMediaType, r.status, "%s", r.body)
		// With parameters, it is JSON.
		r = e.request("POST", e.jobs(), `{"type":"echo"}`, "Content-Type: application/json; charset=utf-8")
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	})
	t.Run("NothingWritten", func(t *testing.T) {
		st, err := e.insp.Stats(t.Context(), e.queue)
		require.NoError(t, err)
		require.EqualValues(t, 1, st.Enqueued, "only the charset request above was accepted")
	})
}

func TestBatch(t *testing.T) {
	t.Parallel()
	e := setup(t)
	path := e.jobs() + ":batch"

	r := e.do("POST", path, `{"jobs":[{"type":"echo","payload":1},{"type":"echo","payload":2,"delay":"1h"},{"type":"echo","id":"b-3"}]}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	var got struct {
		Jobs []apiJob `json:"jobs"`
	}
	r.json(t, &got)
	require.Len(t, got.Jobs, 3)
	require.Equal(t, "queued", got.Jobs[0].Status)
	require.Equal(t, "scheduled", got.Jobs[1].Status)
	require.Equal(t, "b-3", got.Jobs[2].ID)
	require.JSONEq(t, "2", string(got.Jobs[1].Payload))

	// One bad job: nothing written, and the message names it.
	r = e.do("POST", path, `{"jobs":[{"type":"echo"},{"type":"echo","delay":"x"}]}`)
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	require.Contains(t, r.apiErr(t).Message, "jobs[1]")
	r = e.do("POST", path, `{"jobs":[{"type":"echo"},{"type":"bad type"}]}`)
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	st, err := e.insp.Stats(t.Context(), e.queue)
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Enqueued)

	// Limits and shapes.
	many := `{"jobs":[` + strings.Repeat(`{"type":"echo"},`, api.MaxBatchJobs) + `{"type":"echo"}]}`
	r = e.do("POST", path, many)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.apiErr(t).Message, "1001 jobs")
	for _, body := range []string{`{"jobs":[]}`, `{}`, `{"jobs":[{"type":"echo","x":1}]}`, `[]`} {
		r = e.do("POST", path, body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", body, r.body)
	}

	// An Idempotency-Key names every job: the batch sent again is all repeats (200).
	body := `{"jobs":[{"type":"echo","payload":1},{"type":"echo","payload":2}]}`
	r = e.do("POST", path, body, "Idempotency-Key: batch-1")
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	r.json(t, &got)
	require.Equal(t, "batch-1.0", got.Jobs[0].ID)
	require.Equal(t, "batch-1.1", got.Jobs[1].ID)
	r = e.do("POST", path, body, "Idempotency-Key: batch-1")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = e.do("POST", path, `{"jobs":[{"type":"echo","payload":1},{"type":"echo","payload":3}]}`, "Idempotency-Key: batch-1")
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	ae := r.apiErr(t)
	require.Equal(t, api.ReasonIDTaken, ae.Reason)
	require.Contains(t, ae.Message, "batch-1.1")
}

func TestGetAndWait(t *testing.T) {
	t.Parallel()

	t.Run("WaitReturnsCompletedJob", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		e.worker()
		id := e.post(`{"type":"echo","payload":{"hello":"world"}}`, http.StatusAccepted).job(t).ID
		r := e.do("GET", e.jobs()+"/"+id+"?wait=10s", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		j := r.job(t)
		require.Equal(t, "completed", j.Status)
		require.JSONEq(t, `{"hello":"world"}`, string(j.Result))
		require.Equal(t, 1, j.Attempt)
	})

	t.Run("WaitReturnsFailedJob", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		e.worker()
		id := e.post(`{"type":"fail"}`, http.StatusAccepted).job(t).ID
		j := e.do("GET", e.jobs()+"/"+id+"?wait=10s", "").job(t)
		require.Equal(t, "failed", j.Status)
		require.NotEmpty(t, j.LastError)
	})

	t.Run("WaitEndsWithJobAsItIs", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		id := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID
		r := e.do("GET", e.jobs()+"/"+id+"?wait=150ms", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, "scheduled", r.job(t).Status)
	})

	t.Run("WaitIsCutToMaxWait", func(t *testing.T) {
		t.Parallel()
		e := setup(t, setupOpts{cfg: api.Config{MaxWait: 100 * time.Millisecond}})
		id := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID
		r := e.getWithin(pollDeadline, e.jobs()+"/"+id+"?wait=1h", "?wait=1h is not cut to MaxWait (100ms)")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, "scheduled", r.job(t).Status)
	})

	t.Run("WaitOnFinalJobAnswersAtOnce", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		id := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID
		e.do("DELETE", e.jobs()+"/"+id, "")
		j := e.getWithin(pollDeadline, e.jobs()+"/"+id+"?wait=60s", "a long poll on a final job waits").job(t)
		require.Equal(t, "canceled", j.Status)
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		for _, q := range []string{"", "?wait=60s"} {
			r := e.do("GET", e.jobs()+"/nope"+q, "")
			require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
			require.Equal(t, api.CodeNotFound, r.apiErr(t).Code)
		}
	})

	t.Run("BadArguments", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		for _, path := range []string{e.jobs() + "/x?wait=soon", e.jobs() + "/x?wait=-1s",
			e.jobs() + "/a%20b", "/v1/queues/a%7Bb/jobs/x", "/v1/queues/a%7Bb/jobs/x?wait=1s"} {
			r := e.do("GET", path, "")
			require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", path, r.body)
			require.Equal(t, api.CodeInvalidArgument, r.apiErr(t).Code)
		}
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID
	r := e.do("DELETE", e.jobs()+"/"+id, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, "canceled", r.job(t).Status)

	r = e.do("DELETE", e.jobs()+"/"+id, "")
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	ae := r.apiErr(t)
	require.Equal(t, api.CodeConflict, ae.Code)
	require.Equal(t, api.ReasonNotCancelable, ae.Reason)

	r = e.do("DELETE", e.jobs()+"/nope", "")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
}

func TestFind(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID
	r := e.do("GET", "/v1/jobs/"+id, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, e.queue, r.job(t).Queue)

	r = e.do("GET", "/v1/jobs/nope", "")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	ae := r.apiErr(t)
	require.Equal(t, api.CodeNotFound, ae.Code)
	require.Contains(t, ae.Message, e.queue, "the message names the queues searched")

	r = e.do("GET", "/v1/jobs/a%20b", "")
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
}

// pollDeadline bounds a long poll that must end long before its ?wait=: far above any answer
// time on a loaded machine, far below the wait (and the test binary's -timeout), so a broken
// cap fails in seconds with what broke rather than hanging the package.
const pollDeadline = 20 * time.Second

// getWithin GETs path and fails the test with why when no answer comes within d.
func (e *apiEnv) getWithin(d time.Duration, path, why string) apiResp {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), d)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.http.URL+path, nil)
	require.NoError(e.t, err)
	r, err := e.roundTrip(req)
	if ctx.Err() != nil {
		e.t.Fatalf("GET %s: no answer within %s: %s", path, d, why)
	}
	require.NoError(e.t, err)
	return r
}

// TestEnqueueDebounce: publishes with one debounce key answer one job, the later ones with
// debounced true and the last payload; the job page's JSON carries the window.
func TestEnqueueDebounce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	type answer struct {
		ID        string `json:"id"`
		Status    string `json:"status"`
		RunAt     int64  `json:"run_at"`
		Debounced bool   `json:"debounced"`
		Debounce  *struct {
			Key       string `json:"key"`
			FirstAt   int64  `json:"first_at"`
			Until     int64  `json:"until"`
			Publishes int    `json:"publishes"`
		} `json:"debounce"`
		Payload json.RawMessage `json:"payload"`
	}
	var first answer
	for n := range 3 {
		var a answer
		e.post(`{"type":"echo","payload":{"n":`+strconv.Itoa(n)+`},"debounce":{"key":"doc-1","quiet":"1h","max_wait":"2h"}}`,
			http.StatusAccepted).json(t, &a)
		require.Equal(t, n > 0, a.Debounced)
		require.Equal(t, "scheduled", a.Status)
		require.NotNil(t, a.Debounce)
		require.Equal(t, "doc-1", a.Debounce.Key)
		require.Equal(t, n+1, a.Debounce.Publishes)
		require.Equal(t, a.Debounce.FirstAt+2*3600_000, a.Debounce.Until)
		if n == 0 {
			first = a
		}
		require.Equal(t, first.ID, a.ID)
	}
	var stored answer
	got := e.do("GET", e.jobs()+"/"+first.ID, "")
	require.Equal(t, http.StatusOK, got.status, "%s", got.body)
	got.json(t, &stored)
	require.JSONEq(t, `{"n":2}`, string(stored.Payload))
	require.False(t, stored.Debounced, "debounced is a publish's answer, not stored")
	require.Equal(t, 3, stored.Debounce.Publishes)
}

// GET /v1/jobs/{id} looks through every known queue at a cost that does not grow a script call
// per queue: which queues hold a hash of that id is asked first (EXISTS over chunks of keys),
// and only those are read (4,003 commands with 2,000 queues, a script per queue, before).
// findQueues is how many queues TestFindCostAcrossManyQueues makes: more to measure the cost at
// scale (docs/BENCHMARKS.md), with bounds scaled to match.
var findQueues = flag.Int("find-queues", 300, "queues of TestFindCostAcrossManyQueues")

func TestFindCostAcrossManyQueues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rdb  func(*testing.T) redis.UniversalClient
		most int64 // commands a lookup may cost, for 300 queues
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }, 40},
		// A multi-key EXISTS must stay in one slot: one EXISTS per queue, still no script.
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }, 320},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.rdb(t)
			e := setup(t, setupOpts{rdb: rdb})
			queues := *findQueues
			for k := range queues {
				_, err := e.insp.CreateQueue(t.Context(), fmt.Sprintf("q%03d", k), pipeline.QueueOptions{})
				require.NoError(t, err)
			}
			id := e.do("POST", "/v1/queues/q150/jobs", `{"type":"echo","delay":"1h"}`).job(t).ID
			cmds := redistest.CountCommands(rdb.(interface{ AddHook(redis.Hook) })).Record()
			r := e.do("GET", "/v1/jobs/"+id, "")
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			require.Equal(t, "q150", r.job(t).Queue)
			require.LessOrEqual(t, cmds.Scripts(), int64(2), "one get script (and its EVAL if the server had not cached it)")
			n, trips := cmds.All(), cmds.RoundTrips()
			t.Logf("GET /v1/jobs/{id} with %d queues: %d commands in %d round trips", queues, n, trips)
			if queues == 300 {
				require.LessOrEqual(t, n, tc.most, "%v", cmds.Take())
			} else {
				require.Less(t, n, int64(queues)+20, "no more than an EXISTS per queue: %v", cmds.Take())
			}

			r = e.do("GET", "/v1/jobs/nope", "")
			require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
		})
	}
}
