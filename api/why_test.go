package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/status"
)

// waitingView is the job JSON's waiting_for.
type waitingView struct {
	Kind     status.Reason `json:"kind"`
	Detail   string        `json:"detail"`
	Cause    string        `json:"cause"`
	Until    int64         `json:"until"`
	Scope    string        `json:"scope"`
	Held     int           `json:"held"`
	Slots    int           `json:"slots"`
	Group    string        `json:"group"`
	Position int           `json:"position"`
	Tasks    []string      `json:"tasks"`
	Jobs     int64         `json:"jobs"`
}

func waitingOf(t *testing.T, body []byte) *waitingView {
	t.Helper()
	var j struct {
		Status     status.Status `json:"status"`
		WaitingFor *waitingView  `json:"waiting_for"`
	}
	require.NoError(t, json.Unmarshal(body, &j), "%s", body)
	return j.WaitingFor
}

// Issue 33's mistakes, as the API shows them: a job published to a queue no live worker reads
// (POST /v1/queues/emials/jobs answers 202) carries waiting_for no_worker_queue in GET, the
// listing, the queue's stats and the status event of its events stream; a job of a type no
// live worker handles ("ecoh", the worker reading its queue) carries no_worker_type while it
// waits for its retries.
func TestWaitingForAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", "/v1/queues/emials/jobs", `{"type":"send"}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	id := r.job(t).ID

	got := e.do("GET", "/v1/queues/emials/jobs/"+id, "")
	require.Equal(t, http.StatusOK, got.status)
	w := waitingOf(t, got.body)
	require.NotNil(t, w, "%s", got.body)
	require.Equal(t, status.NoReader, w.Kind)
	require.Equal(t, "no live worker reads queue emials", w.Detail)
	require.Equal(t, w, waitingOf(t, e.do("GET", "/v1/jobs/"+id, "").body), "GET /v1/jobs/{id} says the same")

	var page struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	e.do("GET", "/v1/queues/emials/jobs?status=queued", "").json(t, &page)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, w, waitingOf(t, page.Jobs[0]))

	var st struct {
		WaitingFor map[status.Reason]int64 `json:"waiting_for"`
	}
	e.do("GET", "/v1/queues/emials", "").json(t, &st)
	require.Equal(t, map[status.Reason]int64{status.NoReader: 1}, st.WaitingFor)

	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, "GET", e.http.URL+"/v1/queues/emials/jobs/"+id+"/events", nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	s := &sseStream{t: t, res: res, sc: bufio.NewScanner(res.Body), cancel: cancel}
	ev := s.nextEvent()
	cancel()
	res.Body.Close()
	require.Equal(t, "status", ev.name)
	require.Equal(t, w, waitingOf(t, []byte(ev.data)), "the status event carries waiting_for")

	// A type no live worker handles: the worker takes it, fails the attempt (no handler), and
	// the retry waits with the reason.
	e.worker()
	ecoh := e.post(`{"type":"ecoh"}`, http.StatusAccepted).job(t).ID
	require.Eventually(t, func() bool {
		w := waitingOf(t, e.do("GET", e.jobs()+"/"+ecoh, "").body)
		return w != nil && w.Kind == status.NoHandler
	}, 30*time.Second, 10*time.Millisecond, "ecoh waits for a worker that handles its type")
	w = waitingOf(t, e.do("GET", e.jobs()+"/"+ecoh, "").body)
	require.Contains(t, w.Detail, "handles type ecoh (they handle echo, fail)")

	// A job that ended has none.
	done := e.post(`{"type":"echo"}`, http.StatusAccepted).job(t).ID
	final := e.do("GET", e.jobs()+"/"+done+"?wait=30s", "")
	require.Equal(t, http.StatusOK, final.status)
	require.Nil(t, waitingOf(t, final.body), "%s", final.body)
}
