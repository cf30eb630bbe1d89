package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// attemptView is an attempt of the `status --json` contract's attempts array.
type attemptView struct {
	Attempt   int    `json:"attempt"`
	Worker    string `json:"worker"`
	StartedAt int64  `json:"started_at"`
	EndedAt   int64  `json:"ended_at"`
	Outcome   string `json:"outcome"`
	Error     string `json:"error"`
}

// Issue 20: completed and canceled jobs are listed (newest first, page by page, in the
// `list --json` shape), and a job shows its attempts in `status` and `status --json`.
func TestFinishedE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	srv := redistest.Shared(t)
	c := &cli{bin: buildCLI(t), url: srv.URL(), rdb: srv.Client(t)}
	p := redistest.UniqueName(t)
	q := "done"
	c.start(t, "worker", "--prefix", p, "--queue", q, "--name", "w-e2e", "--backoff-base", "50ms", "--backoff-max", "200ms")
	ids := strings.Fields(c.ok(t, "publish", "--prefix", p, "--queue", q, "--type", "flaky", "--payload", `{"fail_times":2}`, "--count", "3"))
	require.Len(t, ids, 3)
	waitFor(t, 30*time.Second, 50*time.Millisecond, "the flaky jobs to complete", func() bool {
		for _, id := range ids {
			if c.status(t, "--prefix", p, "--queue", q, id).Status != "completed" {
				return false
			}
		}
		return true
	})

	// Completed, two a page: every job once, newest first, each with its attempts.
	var seen []string
	var last int64 = 1 << 62
	args := []string{"--prefix", p, "--queue", q, "--status", "completed", "--limit", "2"}
	for pages := 1; ; pages++ {
		out := c.ok(t, append([]string{"list", "--json"}, args...)...)
		var page struct {
			Jobs []struct {
				ID          string        `json:"id"`
				Status      string        `json:"status"`
				CompletedAt int64         `json:"completed_at"`
				Attempts    []attemptView `json:"attempts"`
			} `json:"jobs"`
			Next *string `json:"next"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &page), out)
		require.NotNil(t, page.Next, "the shape is {\"jobs\": [...], \"next\": \"...\"}: %s", out)
		for _, j := range page.Jobs {
			require.Equal(t, "completed", j.Status)
			require.LessOrEqual(t, j.CompletedAt, last, "newest first")
			last = j.CompletedAt
			require.Len(t, j.Attempts, 3, out)
			for k, a := range j.Attempts {
				require.Equal(t, k+1, a.Attempt)
				require.Equal(t, "w-e2e", a.Worker)
				require.NotZero(t, a.StartedAt)
				require.GreaterOrEqual(t, a.EndedAt, a.StartedAt)
			}
			require.Equal(t, []string{"retry", "retry", "completed"},
				[]string{j.Attempts[0].Outcome, j.Attempts[1].Outcome, j.Attempts[2].Outcome})
			require.Equal(t, "flaky: attempt 1 of the first 2 fails", j.Attempts[0].Error)
			seen = append(seen, j.ID)
		}
		if *page.Next == "" {
			require.Equal(t, 2, pages)
			break
		}
		args = []string{"--prefix", p, "--queue", q, "--status", "completed", "--limit", "2", "--cursor", *page.Next}
	}
	require.ElementsMatch(t, ids, seen)

	// The human output: a table of the attempts.
	out := c.ok(t, "status", "--prefix", p, "--queue", q, ids[0])
	require.Contains(t, out, "attempts:")
	require.Regexp(t, `(?m)^\s+#\s+OUTCOME\s+WORKER\s+STARTED\s+ENDED\s+ERROR$`, out)
	require.Regexp(t, `(?m)^\s+1\s+retry\s+w-e2e\s+\d{4}-.*flaky: attempt 1 of the first 2 fails$`, out)
	require.Regexp(t, `(?m)^\s+3\s+completed\s+w-e2e\s+\d{4}-.*\s+-$`, out)

	// Canceled: listed too, newest first, as a table and as JSON.
	var canceled []string
	for range 2 {
		id := c.publishOne(t, "--prefix", p, "--queue", q, "--type", "echo", "--delay", "1h")
		c.ok(t, "cancel", "--prefix", p, "--queue", q, id)
		canceled = append(canceled, id)
	}
	pg := c.list(t, "--prefix", p, "--queue", q, "--status", "canceled")
	require.Len(t, pg.Jobs, 2)
	require.Empty(t, pg.Next)
	require.ElementsMatch(t, canceled, []string{pg.Jobs[0].ID, pg.Jobs[1].ID})
	table, next := c.listTable(t, "--prefix", p, "--queue", q, "--status", "canceled")
	require.Empty(t, next)
	require.Regexp(t, `^ID +TYPE +STATUS +PRIORITY +ATTEMPT +CANCELED_AT +CREATED_AT\n`, table)
	require.Contains(t, table, canceled[0])
}
