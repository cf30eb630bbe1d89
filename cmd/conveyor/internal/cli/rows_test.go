package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/status"
)

// run-now moves a scheduled job into its stream; delete removes a scheduled or queued job and
// refuses a running one; both find the job's queue when --queue is left out.
func TestRunNowAndDelete(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	delayed := strings.TrimSpace(c.ok("publish", "-q", "emails", "--type", "welcome", "--delay", "1h"))
	queued := strings.TrimSpace(c.ok("publish", "-q", "emails", "--type", "welcome"))

	require.Equal(t, "moved "+delayed+" in queue emails into its stream: it runs now\n", c.ok("run-now", delayed))
	require.Contains(t, c.ok("status", "-q", "emails", delayed), "queued")
	c.refused(1, "job "+delayed+": job is not scheduled (it is queued)", "run-now", "-q", "emails", delayed)

	require.JSONEq(t, `{"id":"`+queued+`","queue":"emails","deleted":true}`, c.ok("delete", "--json", queued))
	c.refused(1, "not found", "status", "-q", "emails", queued)
	c.refused(1, "not found", "delete", "-q", "emails", queued)

	running := jobtest.Seed(t, redistest.Client(t), "emails", status.InProgress, jobtest.Opts{Prefix: c.prefix})
	c.refused(1, "job "+running.ID+": job is not scheduled or queued (it is in_progress)", "delete", "-q", "emails", running.ID)
	require.Contains(t, c.ok("status", "-q", "emails", running.ID), "in_progress", "a refused delete changes nothing")
}

// A dead job reads "dead" in the tables, and so do the attempt that sent it there, the counter
// of such jobs and the time it went dead; its JSON keeps the wire name failed. (Before, the
// same thing read failed, DIED and dead.)
func TestDeadWord(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	dead := jobtest.Seed(t, redistest.Client(t), "emails", status.Failed, jobtest.Opts{Prefix: c.prefix})
	out := c.ok("list", "-q", "emails", "--status", "dead")
	require.Regexp(t, `(?m)^ID +TYPE +STATUS +PRIORITY +ATTEMPT +DEAD_SINCE +LAST_ERROR$`, out)
	require.Regexp(t, dead.ID+` +test +dead `, out)
	require.Contains(t, c.ok("list", "-q", "emails", "--status", "failed", "--json"), `"status":"failed"`)
	st := c.ok("status", "-q", "emails", dead.ID)
	require.Regexp(t, `(?m)^status: +dead$`, st)
	require.Regexp(t, `(?m)^\s+1\s+dead\s+jobtest\s+\d{4}-.*seeded failure$`, st, "the attempt that sent it there")
	require.NotContains(t, st, "failed")
	require.Contains(t, c.ok("status", "-q", "emails", dead.ID, "--json"), `"outcome":"failed"`)

	stats := c.ok("stats", "-q", "emails")
	require.Regexp(t, `^QUEUE +WAITING +SCHEDULED +QUEUED +IN_PROGRESS +DEAD +\| +ENQUEUED +COMPLETED +WENT_DEAD +RETRIED +RECOVERED +CANCELED +REJECTED_FULL +DROPPED_FULL +\| +LATENCY +WAIT_P50 +WAIT_P99\n`, stats)
	require.Regexp(t, `(?m)^emails +0 +0 +0 +0 +1 +\| +1 +0 +1 +0 +0 +0 +0 +0 +\| +0s +- +-$`, stats)
	_, stderr, code := c.run("dead", "list", "-q", "emails")
	require.Zero(t, code, stderr)
	require.Regexp(t, `^ID +TYPE +ATTEMPTS +DEAD_SINCE +LAST_ERROR\n`, stderr)
	for _, s := range []string{out, st, stats, stderr} {
		require.NotContains(t, strings.ToLower(s), "died")
	}
}

// A replay marks the attempt history: the attempts after it count from 1 again, and the row
// between says why. (Before, two rows read "1" with nothing between.)
func TestStatusShowsReplay(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	dead := jobtest.Seed(t, redistest.Client(t), "emails", status.Failed, jobtest.Opts{Prefix: c.prefix})
	c.ok("dead", "replay", "-q", "emails", dead.ID)
	st := c.ok("status", "-q", "emails", dead.ID)
	require.Regexp(t, `(?m)^status: +queued$`, st)
	require.Regexp(t, `(?ms)^\s+1\s+dead\s+jobtest\s.*\n\s+-\s+replayed\s+-\s+\d{4}-`, st)
	require.Contains(t, c.ok("status", "-q", "emails", dead.ID, "--json"), `"attempt":0,"worker":"","started_at":`)
}

// conveyor redis prints the server and the queue's memory; --json is doctor.Info.
func TestRedisCmd(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	c.ok("publish", "-q", "emails", "--type", "welcome")
	out := c.ok("redis")
	require.Regexp(t, `(?m)^version: +\d+\.\d+`, out)
	require.Regexp(t, `(?m)^eviction: +\S+`, out)
	require.Regexp(t, `(?m)^emails +\d+(\.\d)? K?i?B `, out)
	var info struct {
		Nodes  []struct{ Version string } `json:"nodes"`
		Queues []struct {
			Queue string `json:"queue"`
			Bytes int64  `json:"bytes"`
			Jobs  int64  `json:"jobs"`
		} `json:"queues"`
	}
	require.NoError(t, json.Unmarshal([]byte(c.ok("redis", "--json")), &info))
	require.Len(t, info.Nodes, 1)
	require.Len(t, info.Queues, 1)
	require.Equal(t, "emails", info.Queues[0].Queue)
	require.Positive(t, info.Queues[0].Bytes)
	require.Equal(t, int64(1), info.Queues[0].Jobs)
}
