package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// Issue 19: `conveyor cancel`, a process of its own, stops a job running in a worker process
// within a second: the worker hears the cancel on the queue's job events (its lease renewal,
// every 40 s here, comes far too late to explain it), logs the attempt canceled, and the job
// stays canceled: no retry, no failure. Without --queue the job is looked up, and --json says
// what was canceled. On one server and on a 3-master cluster.
func TestCancelRunningE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildCLI(t)
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Shared(t)
		testCancelRunning(t, &cli{bin: bin, url: srv.URL(), rdb: srv.Client(t)})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t)
		testCancelRunning(t, &cli{bin: bin, url: "redis://" + cl.Addrs[0] + "?addr=" + cl.Addrs[1] + "&addr=" + cl.Addrs[2]},
			"--cluster")
	})
}

func testCancelRunning(t *testing.T, c *cli, flags ...string) {
	q := redistest.UniqueName(t)
	with := func(args ...string) []string { return append(args, flags...) }
	w := c.start(t, with("worker", "--queue", q, "--visibility-timeout", "2m", "--log-format", "json")...)

	for i, args := range [][]string{{"cancel", "--queue", q}, {"cancel", "--json"}} {
		id := c.publishOne(t, with("--queue", q, "--type", "sleep", "--payload", `{"ms":600000}`, "--max-retries", "3")...)
		waitFor(t, 30*time.Second, 20*time.Millisecond, "the job in progress", func() bool {
			return c.status(t, with("--queue", q, id)...).Status == "in_progress"
		})
		begin := time.Now()
		out := c.ok(t, with(append(args, id)...)...)
		if i == 0 {
			require.Equal(t, "canceled "+id+" in queue "+q+"\n", out)
		} else {
			var got struct {
				ID       string `json:"id"`
				Queue    string `json:"queue"`
				Canceled bool   `json:"canceled"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &got), out)
			require.Equal(t, id, got.ID)
			require.Equal(t, q, got.Queue)
			require.True(t, got.Canceled)
		}
		waitFor(t, 20*time.Second, 5*time.Millisecond, "the worker to end the attempt canceled", func() bool {
			return canceledLine(w.output.String(), id)
		})
		t.Logf("cancel %d: the worker ended the attempt %v after the command started", i, time.Since(begin).Round(time.Millisecond))
		j := c.status(t, with("--queue", q, id)...)
		require.Equal(t, "canceled", j.Status)
		require.LessOrEqual(t, j.Attempt, 1)
		c.refused(t, 1, "already finished: it is canceled", with("cancel", "--queue", q, id)...)
	}
	st := c.stats(t, with("--queue", q)...)
	require.EqualValues(t, 2, st.Canceled)
	require.Zero(t, st.Failed)
	require.Zero(t, st.Retried)
	require.Zero(t, st.InProgress)
	require.Equal(t, 0, w.stop(t))
	require.NotContains(t, w.output.String(), "will retry")
	require.NotContains(t, w.output.String(), `"level":"error"`)
}

// canceledLine reports whether the worker's JSON log says job id's attempt ended canceled.
func canceledLine(log, id string) bool {
	for line := range strings.SplitSeq(log, "\n") {
		var e struct {
			JobID   string `json:"job_id"`
			Outcome string `json:"outcome"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.JobID == id && e.Outcome == "canceled" {
			return true
		}
	}
	return false
}
