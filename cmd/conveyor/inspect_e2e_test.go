package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// The inspection commands, run from TestE2E: queues, queues delete and list. Each works under
// a key prefix of its own, so that the known queues are only its own.

// pageView is the `list --json` contract.
type pageView struct {
	Jobs   []jobView `json:"jobs"`
	Next   string    `json:"next"`
	Leases map[string]struct {
		Worker     string `json:"worker"`
		Entry      string `json:"entry"`
		IdleMS     *int64 `json:"idle_ms"`
		Deliveries int64  `json:"deliveries"`
	} `json:"leases"`
}

func (c *cli) list(t *testing.T, args ...string) pageView {
	t.Helper()
	out := c.ok(t, append([]string{"list", "--json"}, args...)...)
	var p pageView
	require.NoError(t, json.Unmarshal([]byte(out), &p), out)
	var raw struct {
		Jobs []map[string]json.RawMessage `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	for _, j := range raw.Jobs {
		for _, f := range contractFields {
			require.Contains(t, j, f, "each job as status --json prints it")
		}
	}
	return p
}

// listTable runs `list` without --json and returns its table and the cursor it printed on
// stderr ("" when the page was the last).
func (c *cli) listTable(t *testing.T, args ...string) (table, next string) {
	t.Helper()
	r := c.run(t, append([]string{"list"}, args...)...)
	require.Equal(t, 0, r.code, r.stderr)
	if r.stderr == "" {
		return r.stdout, ""
	}
	next, ok := strings.CutPrefix(strings.TrimSpace(r.stderr), "next page: --cursor ")
	require.True(t, ok, "stderr: %q", r.stderr)
	return r.stdout, next
}

func testQueuesCmd(t *testing.T, c *cli) {
	p := redistest.UniqueName(t)
	require.Equal(t, "no queues yet\n", c.ok(t, "queues", "--prefix", p))
	require.Equal(t, "[]\n", c.ok(t, "queues", "--prefix", p, "--json"))
	c.publishOne(t, "--prefix", p, "--queue", "emails", "--type", "echo")
	c.publishOne(t, "--prefix", p, "--queue", "emails", "--type", "echo", "--delay", "1h")
	c.publishOne(t, "--prefix", p, "--queue", "billing", "--type", "echo")

	table := c.ok(t, "queues", "--prefix", p)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	require.Len(t, lines, 3, table)
	require.Regexp(t, `^QUEUE +WAITING +SCHEDULED +QUEUED +IN_PROGRESS +DEAD +\| +ENQUEUED +COMPLETED +WENT_DEAD +RETRIED`, lines[0])
	require.Regexp(t, `^billing +0 +0 +1 +0 +0 +\| +1 `, lines[1])
	require.Regexp(t, `^emails +0 +1 +1 +0 +0 +\| +2 `, lines[2])

	js := c.ok(t, "queues", "--prefix", p, "--json")
	var all, viaStats []pipeline.QueueStats
	require.NoError(t, json.Unmarshal([]byte(js), &all))
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "stats", "--all", "--prefix", p, "--json")), &viaStats))
	// The same but for the latency, which grows between the two reads (a queued job waits).
	for k := range all {
		all[k].LatencyMS, viaStats[k].LatencyMS = 0, 0
	}
	require.Equal(t, viaStats, all)
	require.Len(t, all, 2)
	require.Equal(t, "billing", all[0].Queue)
	require.EqualValues(t, 1, all[1].Scheduled)

	c.refused(t, 2, `unknown command "bogus" for "conveyor queues"`, "queues", "bogus", "--prefix", p)
}

func testQueuesDeleteCmd(t *testing.T, c *cli) {
	p := redistest.UniqueName(t)
	c.ok(t, "publish", "--prefix", p, "--queue", "old", "--type", "echo", "--count", "3")
	c.publishOne(t, "--prefix", p, "--queue", "old", "--type", "echo", "--delay", "1h")
	c.publishOne(t, "--prefix", p, "--queue", "old2", "--type", "echo", "--delay", "1h")
	keysOf := func(pattern string) []string {
		var out []string
		it := c.rdb.Scan(context.Background(), 0, pattern, 1000).Iterator()
		for it.Next(context.Background()) {
			out = append(out, it.Val())
		}
		require.NoError(t, it.Err())
		return out
	}
	before, neighbour := keysOf(p+":{old}:*"), keysOf(p+":{old2}:*")
	require.NotEmpty(t, before)
	require.NotEmpty(t, neighbour)

	c.refused(t, 1, "unfinished jobs: 1 scheduled, 3 queued, 0 in progress, 0 dead; let it drain, or delete them too with --force",
		"queues", "delete", "old", "--prefix", p)
	require.ElementsMatch(t, before, keysOf(p+":{old}:*"), "a refusal deletes nothing")

	require.Equal(t, "deleted queue old\n", c.ok(t, "queues", "delete", "old", "--force", "--prefix", p))
	require.Empty(t, keysOf(p+":{old}:*"))
	require.ElementsMatch(t, neighbour, keysOf(p+":{old2}:*"), "another queue keeps its keys")
	var all []pipeline.QueueStats
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "queues", "--prefix", p, "--json")), &all))
	require.Len(t, all, 1)
	require.Equal(t, "old2", all[0].Queue)

	c.refused(t, 1, `queue "old" not found`, "queues", "delete", "old", "--prefix", p)
	c.refused(t, 2, "want exactly one queue name", "queues", "delete", "--prefix", p)
}

func testListCmd(t *testing.T, c *cli) {
	p := redistest.UniqueName(t)
	// Queue "idle" has no worker: five scheduled jobs (published latest first) and seven queued.
	var scheduled []string
	for i := 5; i >= 1; i-- {
		id := c.publishOne(t, "--prefix", p, "--queue", "idle", "--type", "echo", "--delay", (time.Duration(i) * time.Hour).String())
		scheduled = append([]string{id}, scheduled...)
	}
	queued := strings.Fields(c.ok(t, "publish", "--prefix", p, "--queue", "idle", "--type", "echo", "--payload", `{"n":1}`, "--count", "7"))
	require.Len(t, queued, 7)

	// Scheduled, two a page, through the table's cursors: by due time.
	var seen []string
	var args []string
	for pages := 1; ; pages++ {
		table, next := c.listTable(t, append([]string{"--prefix", p, "--queue", "idle", "--status", "scheduled", "--limit", "2"}, args...)...)
		lines := strings.Split(strings.TrimSpace(table), "\n")
		require.Regexp(t, `^ID +TYPE +STATUS +PRIORITY +ATTEMPT +RUN_AT +CREATED_AT +WHY +LAST_ERROR$`, lines[0])
		for _, l := range lines[1:] {
			require.Regexp(t, `^\S+ +echo +scheduled +1 +0 +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+ +\d{4}-.* due at \S+ \(delay\)`, l)
			seen = append(seen, strings.Fields(l)[0])
		}
		if next == "" {
			require.Equal(t, 3, pages)
			break
		}
		args = []string{"--cursor", next}
	}
	require.Equal(t, scheduled, seen)

	page := c.list(t, "--prefix", p, "--queue", "idle", "--status", "scheduled", "--limit", "3")
	require.Len(t, page.Jobs, 3)
	require.NotEmpty(t, page.Next)
	require.Equal(t, "scheduled", page.Jobs[0].Status)
	page = c.list(t, "--prefix", p, "--queue", "idle", "--status", "scheduled", "--cursor", page.Next)
	require.Equal(t, scheduled[3:], jobIDs(page.Jobs))
	require.Empty(t, page.Next)

	page = c.list(t, "--prefix", p, "--queue", "idle", "--status", "queued")
	require.Equal(t, queued, jobIDs(page.Jobs), "stream order")
	require.JSONEq(t, `{"n":1}`, string(page.Jobs[0].Payload))
	require.Empty(t, page.Leases)
	table, _ := c.listTable(t, "--prefix", p, "--queue", "idle", "--status", "queued")
	require.Regexp(t, `(?m)^ID +TYPE +STATUS +PRIORITY +ATTEMPT +ENQUEUED_AT +CREATED_AT +WHY$`, table)
	for _, s := range []string{"in_progress", "failed"} {
		// The empty message goes to stderr, as every command's "nothing" does (it went to stdout).
		r := c.run(t, "list", "--prefix", p, "--queue", "idle", "--status", s)
		require.Equal(t, 0, r.code, r.stderr)
		require.Empty(t, r.stdout)
		require.Equal(t, "no "+status.Status(s).Word()+" jobs in queue idle\n", r.stderr, "failed reads dead")
		require.Equal(t, `{"jobs":[],"next":""}`+"\n", c.ok(t, "list", "--prefix", p, "--queue", "idle", "--status", s, "--json"))
	}

	// Queue "busy" has a worker: a long job in progress and two that fail for good.
	name := "w-" + redistest.UniqueName(t)
	c.start(t, "worker", "--prefix", p, "--queue", "busy", "--name", name)
	long := c.publishOne(t, "--prefix", p, "--queue", "busy", "--type", "sleep", "--payload", `{"ms":60000}`)
	failing := strings.Fields(c.ok(t, "publish", "--prefix", p, "--queue", "busy", "--type", "fail", "--max-retries", "0", "--count", "2"))
	waitFor(t, 30*time.Second, 50*time.Millisecond, "a job in progress and two dead", func() bool {
		st := c.stats(t, "--prefix", p, "--queue", "busy")
		return st.InProgress == 1 && st.Dead == 2
	})
	page = c.list(t, "--prefix", p, "--queue", "busy", "--status", "in_progress")
	require.Equal(t, []string{long}, jobIDs(page.Jobs))
	require.Equal(t, "in_progress", page.Jobs[0].Status)
	require.Equal(t, name, page.Jobs[0].Worker)
	require.Equal(t, 1, page.Jobs[0].Attempt)
	require.Equal(t, name, page.Leases[long].Worker)
	require.NotNil(t, page.Leases[long].IdleMS)
	require.NotEmpty(t, page.Leases[long].Entry)
	table, _ = c.listTable(t, "--prefix", p, "--queue", "busy", "--status", "in_progress")
	require.Regexp(t, `(?m)^ID +TYPE +STATUS +PRIORITY +ATTEMPT +STARTED_AT +WORKER +IDLE$`, table)
	require.Regexp(t, `(?m)^`+long+` +sleep +in_progress +1 +1 +\d{4}-\S+ \S+ \S+ +`+name+` +\S+s$`, table)

	page = c.list(t, "--prefix", p, "--queue", "busy", "--status", "failed")
	require.ElementsMatch(t, failing, jobIDs(page.Jobs))
	table, _ = c.listTable(t, "--prefix", p, "--queue", "busy", "--status", "failed")
	require.Regexp(t, `(?m)^ID +TYPE +STATUS +PRIORITY +ATTEMPT +DEAD_SINCE +LAST_ERROR$`, table)
	require.Regexp(t, `(?m)^`+failing[0]+` +fail +dead +1 +1 +\d{4}-`, table, "failed reads dead")

	// dead purge by id deletes the dead job and refuses the running one; dead replay --all
	// replays what is left.
	r := c.run(t, "dead", "purge", "--prefix", p, "--queue", "busy", failing[0], long)
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, "purged 1 dead job\n", r.stdout)
	require.Contains(t, r.stderr, "conveyor: purge "+long+": job "+long+" is in_progress, not dead\n")
	require.Equal(t, "replayed 1 dead job\n", c.ok(t, "dead", "replay", "--all", "--prefix", p, "--queue", "busy"))
	c.refused(t, 1, "not found", "status", "--prefix", p, "--queue", "busy", failing[0])

	c.refused(t, 2, "cursor", "list", "--prefix", p, "--queue", "busy", "--status", "failed", "--cursor", "nope")
}

func jobIDs(jobs []jobView) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}
