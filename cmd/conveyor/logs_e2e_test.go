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

// jobLogsJSON is status --logs --json's output, as far as these tests read it.
type jobLogsJSON struct {
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

func (c *cli) logs(t *testing.T, q, id string) jobLogsJSON {
	t.Helper()
	var got jobLogsJSON
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "status", "--queue", q, "--logs", "--json", id)), &got))
	return got
}

// A job's logs after its worker was SIGKILLed mid-attempt. The "http" handler logs its request
// and reports its progress before it calls, and the report writes the line: while the call is
// held the line shows as the running attempt's, and once the worker is killed as a lost
// attempt's. The recovered attempt's lines are kept with its outcome. Shown by status --logs,
// in text and --json. A line logged after the last report would be lost with the worker (the
// lines wait in its memory until the outcome or the next report).
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
	// The report was written before the call went out.
	running := c.logs(t, q, id)
	require.Len(t, running.Logs, 1)
	require.Equal(t, 1, running.Logs[0].Attempt)
	require.Equal(t, status.AttemptRunning, running.Logs[0].Outcome)
	require.Len(t, running.Logs[0].Lines, 1)
	require.Contains(t, running.Logs[0].Lines[0], `"message":"request"`)
	doomed.kill(t)

	c.start(t, workerArgs(q, "rescuer", "--http-allow", "127.0.0.1")...)
	waitFor(t, 30*time.Second, 10*time.Millisecond, "the recovered attempt calling", func() bool { return call.calls.Load() >= 2 })
	call.release()
	waitFor(t, 30*time.Second, 20*time.Millisecond, "the job completed", func() bool {
		return c.job(t, q, id).Status == status.Completed
	})

	got := c.logs(t, q, id)
	require.Equal(t, id, got.ID)
	require.Len(t, got.Logs, 2, "the killed attempt's line, written with its report, and the recovered attempt's")
	lost, done := got.Logs[0], got.Logs[1]
	require.Equal(t, 1, lost.Attempt)
	require.Equal(t, status.AttemptLost, lost.Outcome)
	require.Len(t, lost.Lines, 1)
	require.Contains(t, lost.Lines[0], `"message":"request"`)
	require.Equal(t, 2, done.Attempt)
	require.Equal(t, status.AttemptCompleted, done.Outcome)
	require.NotZero(t, done.EndedAt)
	require.Zero(t, done.Cut)
	require.Len(t, done.Lines, 2)
	require.Contains(t, done.Lines[0], `"message":"request"`)
	require.Contains(t, done.Lines[1], `"status":200`)

	text := c.ok(t, "status", "--queue", q, "--logs", id)
	require.Contains(t, text, "logs:\n  attempt 1 (lost):\n    ")
	require.Contains(t, text, "  attempt 2 (completed):\n")
	require.Contains(t, text, "INF request method=GET")
	require.Contains(t, text, "INF response bytes=8 status=200")

	res := c.run(t, "status", "--queue", q, "--logs", "--follow", id)
	require.Equal(t, 2, res.code, "--logs and --follow do not go together")
	require.True(t, strings.Contains(res.stderr, "--logs and --follow"), res.stderr)
}
