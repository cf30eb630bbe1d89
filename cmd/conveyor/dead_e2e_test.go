package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// The dead-set commands through the binary, run from TestE2E. Dead jobs are seeded
// through the real scripts (jobtest), each test under a key prefix of its own.

// seedDead makes n dead jobs of queue under prefix and returns their ids, oldest first.
func (c *cli) seedDead(t *testing.T, prefix, queue string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = jobtest.Seed(t, c.rdb, queue, status.Failed, jobtest.Opts{
			Prefix: prefix, Task: pipeline.Task{Type: "fail", Payload: []byte(`{}`)}, Reason: "boom\nsecond line",
		}).ID
	}
	return ids
}

// deadRow matches a row of the dead table: the died time shows its zone.
const deadRow = `^\S+ +fail +1 +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+ +boom second line$`

func testDeadList(t *testing.T, c *cli) {
	p := redistest.UniqueName(t)
	dead := c.seedDead(t, p, "q", 3)

	// Rows on stdout, newest first; header and footer on stderr.
	r := c.run(t, "dead", "list", "--prefix", p, "-q", "q")
	require.Equal(t, 0, r.code, r.stderr)
	rows := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, rows, 3, r.stdout)
	for i, row := range rows {
		require.Regexp(t, deadRow, row)
		require.Equal(t, dead[2-i], strings.Fields(row)[0])
	}
	require.Regexp(t, `^ID +TYPE +ATTEMPTS +DEAD_SINCE +LAST_ERROR\njobs 1-3 of 3\n$`, r.stderr)
	require.Equal(t, strings.Index(rows[0], " fail "), strings.Index(strings.SplitN(r.stderr, "\n", 2)[0], " TYPE "),
		"the header on stderr is aligned with the rows")

	// Pages: the cursor goes to stderr.
	r = c.run(t, "dead", "list", "--prefix", p, "-q", "q", "--limit", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Len(t, strings.Fields(r.stdout), 2*len(strings.Fields(rows[0])))
	require.Contains(t, r.stderr, "jobs 1-2 of 3\n")
	_, next, ok := strings.Cut(r.stderr, "next page: --cursor ")
	require.True(t, ok, r.stderr)
	// --json: the shape of every list, {"jobs", "next"}, with the same cursor.
	var page struct {
		Jobs []struct{ ID string }
		Next string
	}
	require.NoError(t, json.Unmarshal([]byte(c.ok(t, "dead", "list", "--prefix", p, "-q", "q", "--limit", "2", "--json")), &page))
	require.Len(t, page.Jobs, 2)
	require.Equal(t, dead[2], page.Jobs[0].ID)
	require.Equal(t, strings.TrimSpace(next), page.Next)
	r = c.run(t, "dead", "list", "--prefix", p, "-q", "q", "--limit", "2", "--cursor", strings.TrimSpace(next))
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, dead[0], strings.Fields(r.stdout)[0])
	require.Regexp(t, `\n1 job \(of 3\)\n$`, r.stderr)
	require.NotContains(t, r.stderr, "next page")

	// What the help promises: the listing pipes into replay.
	sh := exec.Command("sh", "-c", `"$0" dead list --redis "$1" --prefix "$2" -q q | awk '{print $1}' | xargs "$0" dead replay --redis "$1" --prefix "$2" -q q`,
		c.bin, c.url, p)
	sh.Env = env("")
	out, err := sh.Output()
	require.NoError(t, err, "%s", out)
	require.ElementsMatch(t, dead, strings.Fields(string(out)))
	st := c.stats(t, "--prefix", p, "-q", "q")
	require.Zero(t, st.Dead)
	require.EqualValues(t, 3, st.Queued)

	// No dead jobs: said on stderr, exit 0. An unknown queue: exit 1, naming the known ones.
	r = c.run(t, "dead", "list", "--prefix", p, "-q", "q")
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stdout)
	require.Equal(t, "no dead jobs in queue q\n", r.stderr)
	require.Equal(t, `{"jobs":[],"next":""}`+"\n", c.ok(t, "dead", "list", "--prefix", p, "-q", "q", "--json"))
	c.refused(t, 1, `queue "qq" not found; known queues: q (see 'conveyor queues')`, "dead", "list", "--prefix", p, "-q", "qq")
	c.refused(t, 2, "--limit must be at least 1", "dead", "list", "--prefix", p, "--limit", "0")
}

func testDeadReplay(t *testing.T, c *cli) {
	p := redistest.UniqueName(t)
	dead := c.seedDead(t, p, "q", 3)
	queued := c.publishOne(t, "--prefix", p, "-q", "q", "--type", "echo")
	const unknown = "01JNOSUCHJOB00000000000000"

	// --json reports the replayed and the refused ids, and exits 1 for the refused.
	r := c.run(t, "dead", "replay", "--prefix", p, "-q", "q", "--json", dead[0], unknown, queued, dead[0])
	require.Equal(t, 1, r.code, r.stderr)
	var rep struct {
		Count    int      `json:"count"`
		Replayed []string `json:"replayed"`
		Failed   []struct {
			ID    string `json:"id"`
			Error string `json:"error"`
		} `json:"failed"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	require.Equal(t, 1, rep.Count)
	require.Equal(t, []string{dead[0]}, rep.Replayed, "each id once")
	require.Len(t, rep.Failed, 2)
	require.Equal(t, unknown, rep.Failed[0].ID)
	require.Contains(t, rep.Failed[0].Error, "not found")
	require.Equal(t, queued, rep.Failed[1].ID)
	require.Equal(t, "job "+queued+" is queued, not dead", rep.Failed[1].Error)
	require.Equal(t, "conveyor: 2 of 3 jobs not replayed\n", r.stderr)

	// Without --json: the replayed ids on stdout, each refusal on stderr.
	r = c.run(t, "dead", "replay", "--prefix", p, "-q", "q", dead[1], queued)
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, dead[1]+"\n", r.stdout)
	require.Contains(t, r.stderr, "conveyor: replay "+queued+": job "+queued+" is queued, not dead\n")

	c.refused(t, 2, `invalid job id "no/such"`, "dead", "replay", "--prefix", p, "-q", "q", dead[2], "no/such")
	require.EqualValues(t, 1, c.stats(t, "--prefix", p, "-q", "q").Dead, "a malformed id replays nothing")

	require.Equal(t, "replayed 1 dead job\n", c.ok(t, "dead", "replay", "--prefix", p, "-q", "q", "--all"))
	require.Equal(t, `{"count":0}`+"\n", c.ok(t, "dead", "replay", "--prefix", p, "-q", "q", "--all", "--json"))
	c.refused(t, 1, `queue "nosuch" not found`, "dead", "replay", "--prefix", p, "-q", "nosuch", "--all")
}

func testDeadPurge(t *testing.T, c *cli) {
	p := redistest.UniqueName(t)
	dead := c.seedDead(t, p, "q", 4)
	queued := c.publishOne(t, "--prefix", p, "-q", "q", "--type", "echo")
	deadCount := func() int64 { return c.stats(t, "--prefix", p, "-q", "q").Dead }

	// Usage errors: what to purge must be said.
	c.refused(t, 2, "want job ids, or --all to purge every dead job", "dead", "purge", "--prefix", p, "-q", "q")
	c.refused(t, 2, "--older-than needs --all", "dead", "purge", "--prefix", p, "-q", "q", "--older-than", "1h")
	c.refused(t, 2, "--older-than must not be negative", "dead", "purge", "--prefix", p, "-q", "q", "--all", "--older-than", "-1h")
	c.refused(t, 2, "--all takes no job ids", "dead", "purge", "--prefix", p, "-q", "q", "--all", dead[0])
	c.refused(t, 2, `invalid job id "a b"`, "dead", "purge", "--prefix", p, "-q", "q", dead[0], "a b")
	require.EqualValues(t, 4, deadCount(), "a malformed id purges nothing")

	// A dry run lists, counts and deletes nothing.
	r := c.run(t, "dead", "purge", "--prefix", p, "-q", "q", "--all", "--dry-run")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 5, r.stdout)
	for _, l := range lines[:4] {
		require.Regexp(t, deadRow, l)
	}
	require.Equal(t, "would purge 4 dead jobs", lines[4])
	require.Regexp(t, `^ID +TYPE`, r.stderr)
	require.Equal(t, "would purge 0 dead jobs\n", c.ok(t, "dead", "purge", "--prefix", p, "-q", "q", "--all", "--older-than", "1h", "--dry-run"))
	// --json keeps a form's keys when its lists are empty (the README's contract).
	require.Equal(t, `{"would_purge":0,"ids":[]}`+"\n", c.ok(t, "dead", "purge", "--prefix", p, "-q", "q", "--all", "--older-than", "1h", "--dry-run", "--json"))
	r = c.run(t, "dead", "purge", "--prefix", p, "-q", "q", "--dry-run", "--json", dead[0], queued)
	require.Equal(t, 1, r.code, r.stderr)
	require.JSONEq(t, `{"would_purge":1,"ids":["`+dead[0]+`"],"failed":[{"id":"`+queued+`","error":"job `+queued+` is queued, not dead"}]}`, r.stdout)
	require.Equal(t, "conveyor: 1 of 2 jobs would not be purged\n", r.stderr)
	require.EqualValues(t, 4, deadCount())

	// By age (Redis's clock), then by id, then the rest.
	require.Equal(t, "purged 0 dead jobs\n", c.ok(t, "dead", "purge", "--prefix", p, "-q", "q", "--all", "--older-than", "1h"))
	require.Equal(t, `{"purged":1,"ids":["`+dead[0]+`"],"failed":[]}`+"\n", c.ok(t, "dead", "purge", "--prefix", p, "-q", "q", "--json", dead[0]))
	r = c.run(t, "dead", "purge", "--prefix", p, "-q", "q", dead[1], queued)
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, "purged 1 dead job\n", r.stdout)
	require.Equal(t, "conveyor: purge "+queued+": job "+queued+" is queued, not dead\nconveyor: 1 of 2 jobs not purged\n", r.stderr)
	time.Sleep(5 * time.Millisecond) // the seeded jobs died at least that long ago
	require.Equal(t, `{"purged":2}`+"\n", c.ok(t, "dead", "purge", "--prefix", p, "-q", "q", "--all", "--older-than", "1ms", "--json"))
	require.Zero(t, deadCount())
	require.Equal(t, "queued", c.status(t, "--prefix", p, "-q", "q", queued).Status)
	c.refused(t, 1, `queue "nosuch" not found`, "dead", "purge", "--prefix", p, "-q", "nosuch", "--all")
}
