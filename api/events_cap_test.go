package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
)

// Every event has an id naming the state it reports (attempt, status, progress time); a
// reconnect with Last-Event-ID gets the current state, less what that id says the client has
// (nothing at all, 204, for a job whose final status it had), and an older id the current state.
func TestJobEventsIDsAndReconnect(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID

	s := e.events(id, "heartbeat=100ms")
	first := s.nextEvent()
	require.Equal(t, "status", first.name)
	require.NotEmpty(t, first.id, "every event has an id")
	s.cancel()

	// The same state: no event again, only heartbeats, until the job changes.
	again := e.events(id, "heartbeat=100ms", "Last-Event-ID: "+first.id)
	ev, ok := again.next()
	require.True(t, ok)
	require.Equal(t, "heartbeat", ev.comment, "the client has this state: %+v", ev)
	r := e.do("POST", e.jobs()+"/"+id+"/run", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	moved := again.nextEvent()
	require.Equal(t, "queued", again.status(moved)["status"])
	require.NotEqual(t, first.id, moved.id)
	again.cancel()

	// An older id than the job's state: the current state (what happened between is not
	// replayed; the id tells the client it missed something).
	old := e.events(id, "", "Last-Event-ID: "+first.id)
	require.Equal(t, "queued", old.status(old.nextEvent())["status"])
	old.cancel()

	// A job that finished: its final status, then at a reconnect with that id, 204 (an
	// EventSource stops reconnecting).
	done := e.post(`{"type":"echo","payload":{"x":1}}`, http.StatusAccepted).job(t).ID
	e.worker()
	r = e.do("GET", e.jobs()+"/"+done+"?wait=30s", "")
	require.Equal(t, "completed", r.job(t).Status, "%s", r.body)
	fin := e.events(done, "")
	final := fin.nextEvent()
	require.Equal(t, "completed", fin.status(final)["status"])
	fin.ended()
	_, status := e.openEvents(done, "", "Last-Event-ID: "+final.id)
	require.Equal(t, http.StatusNoContent, status)
}

// Open event streams are bounded (Config.MaxEventStreams): one past the bound is a 503 with
// Retry-After, in the API's error format, and a closed stream makes room.
func TestJobEventsCap(t *testing.T) {
	t.Parallel()
	e := setup(t, setupOpts{cfg: api.Config{MaxEventStreams: 2}})
	id := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID
	a := e.events(id, "")
	a.nextEvent()
	b := e.events(id, "")
	b.nextEvent()
	over, status := e.openEvents(id, "")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.NotEmpty(t, over.res.Header.Get("Retry-After"))
	body, err := io.ReadAll(over.res.Body)
	require.NoError(t, err)
	var eb struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &eb), "%s", body)
	require.Equal(t, api.CodeUnavailable, eb.Error.Code)
	require.Contains(t, eb.Error.Message, "2 event streams")

	a.cancel()
	require.Eventually(t, func() bool {
		s, status := e.openEvents(id, "")
		if status == http.StatusOK {
			s.cancel()
		}
		return status == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "a closed stream makes room")
	b.cancel()
}
