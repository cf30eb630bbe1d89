package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/api"
	"github.com/conveyorq/conveyor/handlers"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// sseEvent is one event of a stream: its name and data, or a comment (name "").
type sseEvent struct {
	name, data, comment, id string
}

// sseStream reads a job's events stream with a real HTTP client, an event at a time.
type sseStream struct {
	t      *testing.T
	res    *http.Response
	sc     *bufio.Scanner
	cancel context.CancelFunc
}

// events opens the stream of job id (query: the raw query, or "") and requires a 200.
func (e *apiEnv) events(id, query string, headers ...string) *sseStream {
	e.t.Helper()
	s, status := e.openEvents(id, query, headers...)
	require.Equal(e.t, http.StatusOK, status)
	return s
}

// openEvents opens the stream of job id with the headers given as "Name: value", and returns
// it (nil unless 200) and the answer's status.
func (e *apiEnv) openEvents(id, query string, headers ...string) (*sseStream, int) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.t.Context())
	u := e.jobs() + "/" + id + "/events"
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, "GET", e.http.URL+u, nil)
	require.NoError(e.t, err)
	req.Header.Set("Accept", "text/event-stream")
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ": ")
		require.True(e.t, ok, h)
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { cancel(); res.Body.Close() })
	if res.StatusCode != http.StatusOK {
		return &sseStream{t: e.t, res: res, sc: bufio.NewScanner(res.Body), cancel: cancel}, res.StatusCode
	}
	require.Equal(e.t, "text/event-stream", res.Header.Get("Content-Type"))
	require.Equal(e.t, "no-cache", res.Header.Get("Cache-Control"))
	return &sseStream{t: e.t, res: res, sc: bufio.NewScanner(res.Body), cancel: cancel}, res.StatusCode
}

// next reads the next event or comment; ok is false at the stream's end.
func (s *sseStream) next() (ev sseEvent, ok bool) {
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if ev != (sseEvent{}) {
				return ev, true
			}
		case strings.HasPrefix(line, ":"):
			ev.comment = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, "event: "):
			ev.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			ev.data += line[len("data: "):]
		case strings.HasPrefix(line, "id: "):
			ev.id = line[len("id: "):]
		}
	}
	return ev, false
}

// nextEvent skips comments and returns the next event, which must come.
func (s *sseStream) nextEvent() sseEvent {
	s.t.Helper()
	for {
		ev, ok := s.next()
		require.True(s.t, ok, "the stream ended")
		if ev.name != "" {
			return ev
		}
	}
}

// ended requires the stream to end now.
func (s *sseStream) ended() {
	s.t.Helper()
	ev, ok := s.next()
	require.False(s.t, ok, "more after the final status: %+v", ev)
}

type progressData struct {
	ID              string `json:"id"`
	Status          string `json:"status"`
	Attempt         int    `json:"attempt"`
	Progress        int    `json:"progress"`
	ProgressMessage string `json:"progress_message"`
	ProgressAt      int64  `json:"progress_at"`
}

func (s *sseStream) progress(ev sseEvent) progressData {
	s.t.Helper()
	require.Equal(s.t, "progress", ev.name, "%+v", ev)
	var p progressData
	require.NoError(s.t, json.Unmarshal([]byte(ev.data), &p), ev.data)
	return p
}

func (s *sseStream) status(ev sseEvent) map[string]any {
	s.t.Helper()
	require.Equal(s.t, "status", ev.name, "%+v", ev)
	var j map[string]any
	require.NoError(s.t, json.Unmarshal([]byte(ev.data), &j), ev.data)
	return j
}

// stepsWorker runs a worker on e's queue over rdb whose "steps" handler reports each percent
// sent on steps (as "step N"), then returns when steps closes.
func (e *apiEnv) stepsWorker(rdb redis.UniversalClient, steps <-chan int) {
	e.t.Helper()
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{e.queue}, Prefix: e.prefix,
		Logger: zerolog.New(e.log).Level(zerolog.WarnLevel)})
	require.NoError(e.t, err)
	w.Handle("steps", func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		for {
			select {
			case p, ok := <-steps:
				if !ok {
					return []byte(`"done"`), nil
				}
				if err := j.Progress(ctx, p, "step "+itoa(p)); err != nil {
					return nil, err
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	})
	handlers.Register(w)
	jobtest.RunWorker(e.t, w)
}

func itoa(n int) string { return strconv.Itoa(n) }

// The events stream of a running job, read with a real HTTP client: a status event, then a
// progress event per report (each awaited before the next is made, as the rate limit holds
// reports made sooner), then the final status event, carrying the last report, and the end.
// On a standalone server and on a cluster.
func TestJobEventsStream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.rdb(t)
			e := setup(t, setupOpts{rdb: rdb})
			steps := make(chan int)
			e.stepsWorker(rdb, steps)
			stepsOpen := true
			t.Cleanup(func() {
				if stepsOpen {
					close(steps) // a failed test's handler returns
				}
			})
			id := e.post(`{"type":"steps"}`, http.StatusAccepted).job(t).ID
			s := e.events(id, "")
			first := s.status(s.nextEvent())
			require.Equal(t, id, first["id"])
			require.Contains(t, []any{"queued", "in_progress"}, first["status"])
			require.NotContains(t, first, "progress")

			for _, p := range []int{25, 75} {
				steps <- p
				var got progressData
				for { // a status event (the start mark) may come between
					ev := s.nextEvent()
					if ev.name == "progress" {
						got = s.progress(ev)
						break
					}
					require.Equal(t, "in_progress", s.status(ev)["status"])
				}
				require.Equal(t, p, got.Progress)
				require.Equal(t, "step "+itoa(p), got.ProgressMessage)
				require.Equal(t, id, got.ID)
				require.LessOrEqual(t, got.Attempt, 1, "0 until the start mark is written")
				require.NotZero(t, got.ProgressAt)
			}
			close(steps)
			stepsOpen = false
			var last map[string]any
			for {
				last = s.status(s.nextEvent())
				if last["status"] != "in_progress" {
					break
				}
			}
			require.Equal(t, "completed", last["status"])
			require.EqualValues(t, 75, last["progress"], "a finished job keeps its last report")
			require.Equal(t, "done", last["result"])
			s.ended()
		})
	}
}

// The ready sleep handler reports its progress: its stream shows a report under 100 while it
// sleeps, and the final status carries 100.
func TestJobEventsSleepHandler(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.stepsWorker(redistest.Client(t), nil)
	id := e.post(`{"type":"sleep","payload":{"ms":1500}}`, http.StatusAccepted).job(t).ID
	s := e.events(id, "")
	var during []int
	for {
		ev := s.nextEvent()
		if ev.name == "progress" {
			during = append(during, s.progress(ev).Progress)
			continue
		}
		j := s.status(ev)
		if j["status"] == "completed" {
			require.EqualValues(t, 100, j["progress"])
			require.Equal(t, "slept 1.5s", j["progress_message"])
			break
		}
	}
	s.ended()
	require.NotEmpty(t, during, "no progress while it slept")
	require.Less(t, during[0], 100)
}

// A quiet stream sends heartbeat comments; the client going away ends it on the server, and
// Close ends the others at once.
func TestJobEventsHeartbeatDisconnectClose(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID
	s := e.events(id, "heartbeat=100ms")
	require.Equal(t, "scheduled", s.status(s.nextEvent())["status"])
	ev, ok := s.next()
	require.True(t, ok)
	require.Equal(t, sseEvent{comment: "heartbeat"}, ev)
	require.Eventually(t, func() bool { return e.api.Waiting() == 1 }, 10*time.Second, 5*time.Millisecond)

	s.cancel() // the client goes
	require.Eventually(t, func() bool { return e.api.Waiting() == 0 }, 10*time.Second, 5*time.Millisecond,
		"the server noticed the client went")

	s2 := e.events(id, "")
	s2.status(s2.nextEvent())
	require.NoError(t, e.api.Close())
	s2.ended()
	r := e.do("GET", e.jobs()+"/"+id+"/events", "")
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.body)
}

// An unknown job is a JSON 404 before any event; a bad query a 400.
func TestJobEventsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("GET", e.jobs()+"/nope/events", "")
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "not_found", r.apiErr(t).Code)
	id := e.post(`{"type":"echo","delay":"1h"}`, http.StatusAccepted).job(t).ID
	for _, q := range []string{"heartbeat=abc", "heartbeat=1ms", "heartbeat=2m", "heartbeat=1s&heartbeat=2s", "heartbeat="} {
		r := e.do("GET", e.jobs()+"/"+id+"/events?"+q, "")
		require.Equal(t, http.StatusBadRequest, r.status, q)
		require.Equal(t, "invalid_argument", r.apiErr(t).Code, q)
	}
	// A HEAD answers with the stream's headers at once, not at the job's end.
	head := e.do("HEAD", e.jobs()+"/"+id+"/events", "")
	require.Equal(t, http.StatusOK, head.status)
	require.Equal(t, "text/event-stream", head.header.Get("Content-Type"))
	for _, q := range []string{"wait=1s&until=soon", "wait=1s&until=final&until=progress"} {
		r := e.do("GET", e.jobs()+"/"+id+"?"+q, "")
		require.Equal(t, http.StatusBadRequest, r.status, q)
	}
}

// ?wait=&until=progress answers at the job's first change (a progress report here), not at
// its end; until=final (the default) waits for the end.
func TestLongPollUntilProgress(t *testing.T) {
	t.Parallel()
	e := setup(t)
	steps := make(chan int)
	e.stepsWorker(redistest.Client(t), steps)
	id := e.post(`{"type":"steps"}`, http.StatusAccepted).job(t).ID
	e.waitStatus(id, "in_progress")
	answer := make(chan apiJob, 1)
	go func() { answer <- e.do("GET", e.jobs()+"/"+id+"?wait=20s&until=progress", "").job(t) }()
	// The wait's first read marks the job watched: the job as it was then is what it waits to
	// change from.
	require.Eventually(t, func() bool {
		return e.rdb.HExists(context.Background(), keys.New(e.prefix, e.queue).Job(id), keys.FieldWatched).Val()
	}, 10*time.Second, 5*time.Millisecond)
	steps <- 40
	got := <-answer
	require.Equal(t, "in_progress", got.Status)
	require.NotNil(t, got.Progress)
	require.Equal(t, 40, *got.Progress)
	require.Equal(t, "step 40", got.ProgressMessage)

	go func() { answer <- e.do("GET", e.jobs()+"/"+id+"?wait=20s&until=final", "").job(t) }()
	require.Eventually(t, func() bool { return e.api.Waiting() == 1 }, 10*time.Second, 5*time.Millisecond)
	close(steps)
	require.Equal(t, "completed", (<-answer).Status)
}

// waitStatus waits until job id of e's queue has status.
func (e *apiEnv) waitStatus(id, status string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		j, err := e.client.Get(context.Background(), e.queue, id)
		return err == nil && string(j.Status) == status
	}, 20*time.Second, 5*time.Millisecond)
}

// The query comes from anyone: parsing never panics, and what it accepts is in range.
func FuzzEventsQuery(f *testing.F) {
	for _, s := range []string{"", "heartbeat=15s", "heartbeat=100ms", "heartbeat=abc", "heartbeat=1s&heartbeat=2s",
		"until=progress", "until=final", "until=x", "heartbeat=%zz", "heartbeat=-1s", "heartbeat=1h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		hb, err := api.ParseEventsQuery(q)
		if err == nil && (time.Duration(hb) < api.MinHeartbeat || time.Duration(hb) > api.MaxHeartbeat) {
			t.Fatalf("%q: heartbeat %s accepted", raw, time.Duration(hb))
		}
		progress, err := api.UntilParam(q)
		if err == nil && progress && q.Get("until") != "progress" {
			t.Fatalf("%q: until=progress read from %v", raw, q["until"])
		}
	})
}
