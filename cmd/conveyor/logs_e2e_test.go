package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/status"
)

// A job's logs after its worker was SIGKILLed mid-attempt: the killed attempt's lines were in
// its worker's memory (they go to Redis with the outcome) and are lost, as documented; the
// recovered attempt's lines are kept, shown by status --logs, in text and --json. The "http"
// handler logs its request before it calls, and the held call keeps each attempt running until
// the test has seen it.
func TestLogsAfterSIGKILLE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills worker processes")
	}
	srv := redistest.Shared(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}
	q := redistest.UniqueName(t)
	call := newHeldCall(t)
	id := publishIDs(t, c, "--queue", q, "--type", "http", "--payload", call.payload())[0]

	doomed := c.start(t, workerArgs(q, "doomed", "--http-allow", "127.0.0.1")...)
	waitFor(t, 20*time.Second, 5*time.Millisecond, "the first attempt calling", func() bool { return call.calls.Load() >= 1 })
	doomed.kill(t) // it logged its request line, held in its memory

	c.start(t, workerArgs(q, "rescuer", "--http-allow", "127.0.0.1")...)
	waitFor(t, 30*time.Second, 10*time.Millisecond, "the recovered attempt calling", func() bool { return call.calls.Load() >= 2 })
	call.release()
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the job completed", func() bool {
		return c.job(t, q, id).Status == status.Completed
	})

	var got struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Logs   []struct {
			Attempt int      `json:"attempt"`
			Outcome string   `json:"outcome"`
			EndedAt int64    `json:"ended_at"`
			Cut     int      `json:"cut"`
			Lines   []string `json:"lines"`
		} `json:"logs"`
	}
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "status", "--queue", q, "--logs", "--json", id)), &got))
	require.Equal(t, id, got.ID)
	require.Len(t, got.Logs, 1, "only the recovered attempt's lines: the killed one's were lost with its worker")
	l := got.Logs[0]
	require.Equal(t, 2, l.Attempt)
	require.Equal(t, status.AttemptCompleted, l.Outcome)
	require.NotZero(t, l.EndedAt)
	require.Zero(t, l.Cut)
	require.Len(t, l.Lines, 2)
	require.Contains(t, l.Lines[0], `"message":"request"`)
	require.Contains(t, l.Lines[1], `"status":200`)

	text := c.ok(t, "status", "--queue", q, "--logs", id)
	require.Contains(t, text, "logs:\n  attempt 2 (completed):\n")
	require.Contains(t, text, "INF request method=GET")
	require.Contains(t, text, "INF response bytes=8 status=200")
	require.NotContains(t, text, "attempt 1 (")

	res := c.run(t, "status", "--queue", q, "--logs", "--follow", id)
	require.Equal(t, 2, res.code, "--logs and --follow do not go together")
	require.True(t, strings.Contains(res.stderr, "--logs and --follow"), res.stderr)
}
