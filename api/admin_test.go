package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// seed makes a job of the env's queue in status through the real scripts.
func (e *apiEnv) seed(status status.Status, opts ...pipeline.Option) string {
	e.t.Helper()
	return jobtest.Seed(e.t, e.rdb, e.queue, status, jobtest.Opts{Prefix: e.prefix, Options: opts,
		Task: pipeline.Task{Type: "echo", Payload: []byte(`{"seeded":true}`)}}).ID
}

func TestQueues(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var empty struct {
		Queues []pipeline.QueueStats `json:"queues"`
	}
	r := e.do("GET", "/v1/queues", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"queues":[]}`, string(r.body))

	e.post(`{"type":"echo"}`, http.StatusAccepted)
	e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted)
	r = e.do("GET", "/v1/queues", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r.json(t, &empty)
	require.Len(t, empty.Queues, 1)
	q := empty.Queues[0]
	require.Equal(t, e.queue, q.Queue)
	require.EqualValues(t, 2, q.Enqueued)
	require.EqualValues(t, 1, q.Queued)
	require.EqualValues(t, 1, q.Scheduled)

	r = e.do("GET", "/v1/queues/"+e.queue, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var one pipeline.QueueStats
	r.json(t, &one)
	// The queued job's latency grew between the two reads; the rest is the same.
	require.Contains(t, string(r.body), `"latency_ms":`)
	require.GreaterOrEqual(t, one.LatencyMS, q.LatencyMS)
	one.LatencyMS = q.LatencyMS
	require.Equal(t, q, one)

	// A queue that does not exist is a 404, as in /v1/throughput (it answered 200 with zeros,
	// which reads as an idle queue); one that exists with nothing in it is all zeros.
	r = e.do("GET", "/v1/queues/never-seen", "")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	ae := r.apiErr(t)
	require.Equal(t, api.CodeNotFound, ae.Code)
	require.Equal(t, "queue never-seen not found", ae.Message, "the 404 names the queue")
	r = e.do("PUT", "/v1/queues/made-empty", `{"partitions":1}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = e.do("GET", "/v1/queues/made-empty", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	one = pipeline.QueueStats{} // a decode into the last one would keep its waiting_for map
	r.json(t, &one)
	require.Equal(t, pipeline.QueueStats{Queue: "made-empty"}, one)
}

// PUT /v1/queues/{queue} sets the partition count: the same count again is a 200, a change
// while a job is unfinished a 409 queue_busy; jobs are found without naming a partition.
func TestCreateQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for range 2 {
		r := e.do("PUT", "/v1/queues/"+e.queue, `{"partitions":3}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.JSONEq(t, `{"queue":"`+e.queue+`","partitions":3}`, string(r.body))
	}
	r := e.do("PUT", "/v1/queues/"+e.queue, `{"partitions":2000}`)
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	var ids []string
	for range 6 {
		ids = append(ids, e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID)
	}
	for _, id := range ids {
		r := e.do("GET", "/v1/queues/"+e.queue+"/jobs/"+id, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	}
	r = e.do("PUT", "/v1/queues/"+e.queue, `{"partitions":4}`)
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Contains(t, string(r.body), "queue_busy")
	var st pipeline.QueueStats
	r = e.do("GET", "/v1/queues/"+e.queue, "")
	r.json(t, &st)
	require.EqualValues(t, 6, st.Scheduled, "the partitions' gauges are summed")
}

func TestList(t *testing.T) {
	t.Parallel()
	e := setup(t)
	dead := []string{e.seed(status.Failed), e.seed(status.Failed)}
	sched := e.seed(status.Scheduled)

	var page struct {
		Jobs []apiJob `json:"jobs"`
		Next string   `json:"next"`
	}
	r := e.do("GET", e.jobs()+"?status=failed&limit=1", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r.json(t, &page)
	require.Len(t, page.Jobs, 1)
	require.NotEmpty(t, page.Next)
	seen := []string{page.Jobs[0].ID}
	r = e.do("GET", e.jobs()+"?status=failed&limit=1&cursor="+page.Next, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r.json(t, &page)
	require.Len(t, page.Jobs, 1)
	seen = append(seen, page.Jobs[0].ID)
	require.ElementsMatch(t, dead, seen)

	r = e.do("GET", e.jobs()+"?status=scheduled", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r.json(t, &page)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, sched, page.Jobs[0].ID)
	require.Empty(t, page.Next)

	// A queue that does not exist is a 404 naming it, as GET /v1/queues/{queue} (an empty page
	// read as an idle queue, and hid a typo); a known queue with no jobs of the status is an
	// empty page, not null.
	for _, st := range []string{"queued", "failed", "in_progress"} {
		r = e.do("GET", "/v1/queues/nothing-here/jobs?status="+st, "")
		require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
		ae := r.apiErr(t)
		require.Equal(t, api.CodeNotFound, ae.Code)
		require.Equal(t, "queue nothing-here not found", ae.Message)
	}
	r = e.do("PUT", "/v1/queues/made-empty", `{"partitions":1}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = e.do("GET", "/v1/queues/made-empty/jobs?status=queued", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"jobs":[],"next":""}`, string(r.body))
	r = e.do("GET", e.jobs()+"?status=completed", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"jobs":[],"next":""}`, string(r.body))

	// limit over the OpenAPI document's maximum (1,000) is refused, not accepted.
	for _, q := range []string{"", "?status=completed&cursor=1-0", "?status=bogus", "?status=failed&limit=0",
		"?status=failed&limit=x", "?status=failed&limit=1001", "?status=failed&limit=100000",
		"?status=failed&cursor=nonsense"} {
		r = e.do("GET", e.jobs()+q, "")
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", q, r.body)
		require.Equal(t, api.CodeInvalidArgument, r.apiErr(t).Code)
	}
}

func TestDeadJobs(t *testing.T) {
	t.Parallel()

	t.Run("ReplayOne", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		id := e.seed(status.Failed)
		r := e.do("POST", "/v1/queues/"+e.queue+"/dead/"+id+"/replay", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		j := r.job(t)
		require.Equal(t, id, j.ID)
		require.Equal(t, "queued", j.Status)

		r = e.do("POST", "/v1/queues/"+e.queue+"/dead/"+id+"/replay", "")
		require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
		require.Equal(t, api.ReasonNotDead, r.apiErr(t).Reason)

		r = e.do("POST", "/v1/queues/"+e.queue+"/dead/nope/replay", "")
		require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	})

	t.Run("ReplayUniqueHeld", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		id := e.seed(status.Failed, pipeline.WithUnique("k", time.Hour))
		e.post(`{"type":"echo","unique":{"key":"k"}}`, http.StatusAccepted)
		r := e.do("POST", "/v1/queues/"+e.queue+"/dead/"+id+"/replay", "")
		require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
		ae := r.apiErr(t)
		require.Equal(t, api.CodeConflict, ae.Code)
		require.Equal(t, api.ReasonUniqueHeld, ae.Reason)

		// Replaying all of them replays what can run and says what stays.
		e.seed(status.Failed)
		r = e.do("POST", "/v1/queues/"+e.queue+"/dead:replay", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var body struct {
			Replayed    int    `json:"replayed"`
			NotReplayed string `json:"not_replayed"`
		}
		r.json(t, &body)
		require.Equal(t, 1, body.Replayed)
		require.Contains(t, body.NotReplayed, id)
	})

	t.Run("ReplayAll", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		for range 3 {
			e.seed(status.Failed)
		}
		r := e.do("POST", "/v1/queues/"+e.queue+"/dead:replay", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.JSONEq(t, `{"replayed":3}`, string(r.body))
		r = e.do("POST", "/v1/queues/"+e.queue+"/dead:replay", "")
		require.JSONEq(t, `{"replayed":0}`, string(r.body))
	})

	t.Run("PurgeOne", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		id := e.seed(status.Failed)
		r := e.do("DELETE", "/v1/queues/"+e.queue+"/dead/"+id, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.JSONEq(t, `{"purged":1}`, string(r.body))
		r = e.do("DELETE", "/v1/queues/"+e.queue+"/dead/"+id, "")
		require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)

		live := e.seed(status.Queued)
		r = e.do("DELETE", "/v1/queues/"+e.queue+"/dead/"+live, "")
		require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
		require.Equal(t, api.ReasonNotDead, r.apiErr(t).Reason)
	})

	t.Run("PurgeAll", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		e.seed(status.Failed)
		e.seed(status.Failed)
		r := e.do("DELETE", "/v1/queues/"+e.queue+"/dead?older_than=1h", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.JSONEq(t, `{"purged":0}`, string(r.body))
		r = e.do("DELETE", "/v1/queues/"+e.queue+"/dead", "")
		require.JSONEq(t, `{"purged":2}`, string(r.body))
		r = e.do("DELETE", "/v1/queues/"+e.queue+"/dead?older_than=x", "")
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	})
}

func TestDeleteQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.post(`{"type":"echo"}`, http.StatusAccepted)
	r := e.do("DELETE", "/v1/queues/"+e.queue, "")
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Equal(t, api.ReasonQueueBusy, r.apiErr(t).Reason)
	r = e.do("DELETE", "/v1/queues/"+e.queue+"?force=true", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"queue":"`+e.queue+`","deleted":true}`, string(r.body))
	r = e.do("DELETE", "/v1/queues/"+e.queue, "")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	r = e.do("DELETE", "/v1/queues/"+e.queue+"?force=maybe", "")
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
}

// A queue is paused and resumed over HTTP; its stats say so, in the listing too.
func TestPauseResumeQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", "/v1/queues/"+e.queue+"/pause", "")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	e.post(`{"type":"echo"}`, http.StatusAccepted)
	for range 2 { // pausing a paused queue does nothing
		r = e.do("POST", "/v1/queues/"+e.queue+"/pause", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.JSONEq(t, `{"queue":"`+e.queue+`","paused":true}`, string(r.body))
	}
	var st pipeline.QueueStats
	r = e.do("GET", "/v1/queues/"+e.queue, "")
	require.NoError(t, json.Unmarshal(r.body, &st))
	require.True(t, st.Paused)
	r = e.do("GET", "/v1/queues", "")
	require.Contains(t, string(r.body), `"queue":"`+e.queue+`"`)
	require.Regexp(t, `"queue":"`+e.queue+`"[^}]*"paused":true`, string(r.body))
	paused, err := e.insp.Paused(t.Context())
	require.NoError(t, err)
	require.Contains(t, paused, e.queue)

	r = e.do("POST", "/v1/queues/"+e.queue+"/resume", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"queue":"`+e.queue+`","paused":false}`, string(r.body))
	r = e.do("GET", "/v1/queues/"+e.queue, "")
	require.NoError(t, json.Unmarshal(r.body, &st))
	require.False(t, st.Paused)
	r = e.do("POST", "/v1/queues/no-such-queue-"+e.queue+"/resume", "")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
}

// A server whose Redis credentials are wrong answers 503 with the reason, not an empty list of
// queues (it answered 200 {"queues":[]}, the wrong password read as an empty system).
func TestQueuesWrongCredentials(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	require.NoError(t, srv.Client(t).Do(t.Context(), "ACL", "SETUSER", "u", "on", ">right", "~*", "+@all").Err())
	wrong := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "u", Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { _ = wrong.Close() })
	e := setup(t, setupOpts{rdb: wrong})
	for _, path := range []string{"/v1/queues", "/v1/queues/" + e.queue + "/jobs?status=queued"} {
		r := e.do("GET", path, "")
		require.Equal(t, http.StatusServiceUnavailable, r.status, "%s: %s", path, r.body)
		require.Contains(t, r.apiErr(t).Message, "credentials", path)
	}
}

// /readyz with wrong credentials names the credentials: it said "Redis is unreachable", which
// sends the on-call engineer to the network while Redis answers every PING with WRONGPASS.
func TestReadyzWrongCredentials(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	require.NoError(t, srv.Client(t).Do(t.Context(), "ACL", "SETUSER", "u", "on", ">right", "~*", "+@all").Err())
	wrong := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "u", Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { _ = wrong.Close() })
	e := setup(t, setupOpts{rdb: wrong})
	r := e.do("GET", "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.body)
	ae := r.apiErr(t)
	require.Equal(t, api.CodeUnavailable, ae.Code)
	require.Contains(t, ae.Message, "credentials")
	require.NotContains(t, ae.Message, "unreachable")
	require.Equal(t, "ping", ae.Op)
}

// A server whose client is a plain one on a Redis Cluster node: a key of another node's slot
// is a MOVED, which the answer explains ("start the server with --cluster") instead of an
// internal error. Of ten queues, some hash to the two other masters.
func TestMovedSaysCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	plain := redis.NewClient(&redis.Options{Addr: cl.Addrs[0], MaxRetries: -1})
	t.Cleanup(func() { _ = plain.Close() })
	e := setup(t, setupOpts{rdb: plain})
	var moved *apiResp
	for i := 0; i < 10 && moved == nil; i++ {
		r := e.do("POST", "/v1/queues/"+e.queue+string(rune('a'+i))+"/jobs", `{"type":"echo"}`)
		if r.status != http.StatusAccepted {
			moved = &r
		}
	}
	require.NotNil(t, moved, "no publish was sent to another node")
	require.Equal(t, http.StatusServiceUnavailable, moved.status, "%s", moved.body)
	ae := moved.apiErr(t)
	require.Equal(t, api.CodeUnavailable, ae.Code)
	require.Contains(t, ae.Message, "start the server with --cluster")
	require.NotEmpty(t, ae.Op)
}

// Every route of a queue answers a queue that does not exist with a 404 naming it, as GET
// /v1/queues/{queue} does: a bare "queue not found" hid which name was wrong (a typo, or the
// other of two queues a script touches).
func TestQueueRoutesNameTheMissingQueue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	q := "no-such-" + e.queue
	for _, rt := range []struct{ method, path, body string }{
		{"POST", "/pause", ""},
		{"POST", "/resume", ""},
		{"GET", "/limits", ""},
		{"PUT", "/limits", `{"concurrency":1}`},
		{"GET", "/groups", ""},
		{"PUT", "/groups", `{"window":2}`},
	} {
		r := e.do(rt.method, "/v1/queues/"+q+rt.path, rt.body)
		require.Equal(t, http.StatusNotFound, r.status, "%s %s: %s", rt.method, rt.path, r.body)
		ae := r.apiErr(t)
		require.Equal(t, api.CodeNotFound, ae.Code, "%s %s", rt.method, rt.path)
		require.Equal(t, "queue "+q+" not found", ae.Message, "%s %s", rt.method, rt.path)
	}
}
