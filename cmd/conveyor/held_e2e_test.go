package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// heldCall is an HTTP endpoint whose calls the test answers: an "http" job that calls it runs
// until release, however slow the machine. A sleep job of a fixed length stands in badly for
// a running job: on a loaded machine it can end before the test's next step (a status poll,
// a signal), and the test fails on a wall-clock margin. Workers reach it with --http-allow
// 127.0.0.1.
type heldCall struct {
	url     string
	calls   atomic.Int64 // calls received, answered or not
	release func()       // answers every call, those to come at once; idempotent
}

func newHeldCall(t *testing.T) *heldCall {
	t.Helper()
	h := &heldCall{}
	released := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.calls.Add(1)
		select {
		case <-released:
			_, _ = io.WriteString(w, "released")
		case <-r.Context().Done():
		}
	}))
	h.url = srv.URL
	h.release = sync.OnceFunc(func() { close(released) })
	t.Cleanup(srv.Close)
	t.Cleanup(h.release) // before the server closes: Close waits for the calls under way
	return h
}

// payload is an "http" job's payload calling h.
func (h *heldCall) payload() string { return `{"url":"` + h.url + `"}` }
