package cli

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/engine"
	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/script"
	"github.com/conveyorq/conveyor/status"
)

// seedDead makes n dead jobs in each of queues under the runner's prefix and returns their ids
// by queue.
func (c *cmdRunner) seedDead(t *testing.T, n int, queues ...string) map[string][]string {
	t.Helper()
	opt, err := redis.ParseURL(c.url)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	out := map[string][]string{}
	for _, q := range queues {
		for range n {
			j := jobtest.Seed(t, rdb, q, status.Failed, jobtest.Opts{Prefix: c.prefix})
			out[q] = append(out[q], j.ID)
		}
	}
	return out
}

// The case: dead jobs in two queues and none in default. 'dead list' reads default and
// says so; with --all-queues (or --queue '*') it lists both queues' dead jobs, with a QUEUE
// column, and its JSON names each job's queue. (Before, there was no view across queues.)
func TestDeadListAllQueues(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	dead := c.seedDead(t, 2, "billing", "emails")
	_, stderr, code := c.run("dead", "list")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, `queue "default" not found; known queues: billing, emails`)

	for _, args := range [][]string{{"--all-queues"}, {"--queue", "*"}, {"-q", "*"}} {
		stdout, stderr, code := c.run(append([]string{"dead", "list"}, args...)...)
		require.Zero(t, code, stderr)
		require.Regexp(t, `(?m)^QUEUE +ID +TYPE +ATTEMPTS +DEAD_SINCE +LAST_ERROR$`, stderr)
		require.Contains(t, stderr, "jobs 1-4 of 4")
		for q, ids := range dead {
			for _, id := range ids {
				require.Regexp(t, `(?m)^`+q+` +`+id+` +test +1 `, stdout, args)
			}
		}
		require.Less(t, strings.Index(stdout, "billing"), strings.Index(stdout, "emails"), "queues in name order")
	}
	var page struct {
		Jobs []struct{ ID, Queue string }
		Next string
	}
	require.NoError(t, json.Unmarshal([]byte(c.ok("dead", "list", "--all-queues", "--json", "--limit", "3")), &page))
	require.Len(t, page.Jobs, 3)
	require.Equal(t, "billing", page.Jobs[0].Queue)
	require.Equal(t, "emails", page.Jobs[2].Queue)
	require.NotEmpty(t, page.Next)
	require.NoError(t, json.Unmarshal([]byte(c.ok("dead", "list", "--all-queues", "--json", "--cursor", page.Next)), &page))
	require.Len(t, page.Jobs, 1)
	require.Equal(t, "emails", page.Jobs[0].Queue)
	require.Empty(t, page.Next)

	c.refused(2, "--all-queues and --queue cannot be used together", "dead", "list", "--all-queues", "-q", "emails")
}

// With no dead job anywhere, 'dead list --all-queues' says so on stderr and exits 0, also
// when there is no queue at all.
func TestDeadListAllQueuesNone(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	stdout, stderr, code := c.run("dead", "list", "--all-queues")
	require.Zero(t, code, stderr)
	require.Empty(t, stdout)
	require.Equal(t, "no dead jobs in any queue\n", stderr)
	c.ok("publish", "-q", "emails", "--type", "welcome")
	_, stderr, code = c.run("dead", "list", "--all-queues")
	require.Zero(t, code, stderr)
	require.Equal(t, "no dead jobs in any queue\n", stderr)
}

// 'list --all-queues' lists a status across queues with a QUEUE column; its cursor goes on
// where the page ended.
func TestListAllQueues(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	a := strings.TrimSpace(c.ok("publish", "-q", "zeta", "--type", "welcome"))
	b := strings.TrimSpace(c.ok("publish", "-q", "alpha", "--type", "digest"))
	stdout, stderr, code := c.run("list", "--all-queues", "--status", "queued", "--limit", "1")
	require.Zero(t, code, stderr)
	require.Regexp(t, `(?m)^QUEUE +ID +TYPE +STATUS +PRIORITY`, stdout)
	require.Regexp(t, `(?m)^alpha +`+b+` +digest +queued `, stdout)
	require.NotContains(t, stdout, a)
	require.Equal(t, "next page: --cursor zeta/\n", stderr)
	cursor := strings.TrimSpace(strings.TrimPrefix(stderr, "next page: --cursor "))
	stdout = c.ok("list", "--queue", "*", "--status", "queued", "--cursor", cursor)
	require.Regexp(t, `(?m)^zeta +`+a+` +welcome +queued `, stdout)

	_, stderr, code = c.run("list", "--all-queues", "--status", "failed")
	require.Zero(t, code, stderr)
	require.Equal(t, "no dead jobs in any queue\n", stderr)
	c.refused(2, "is not one of a listing across queues", "list", "--all-queues", "--status", "queued", "--cursor", "nonsense")
}

// 'dead replay --all-queues' replays every dead job of every queue, prints a line per queue
// and the total, and in JSON the same by queue.
func TestDeadReplayAllQueues(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	c.seedDead(t, 2, "billing")
	c.seedDead(t, 1, "emails")
	c.ok("publish", "-q", "quiet", "--type", "welcome")
	stdout := c.ok("dead", "replay", "--all-queues")
	require.Equal(t, "replayed 2 dead jobs in queue billing\nreplayed 1 dead job in queue emails\nreplayed 3 dead jobs in 2 queues\n", stdout)
	_, stderr, code := c.run("dead", "list", "--all-queues")
	require.Zero(t, code, stderr)
	require.Equal(t, "no dead jobs in any queue\n", stderr)

	c.seedDead(t, 1, "emails")
	var r struct {
		Count  int `json:"count"`
		Queues []struct {
			Queue string `json:"queue"`
			Count int    `json:"count"`
		} `json:"queues"`
	}
	require.NoError(t, json.Unmarshal([]byte(c.ok("dead", "replay", "--queue", "*", "--all", "--json")), &r))
	require.Equal(t, 1, r.Count)
	require.Len(t, r.Queues, 1)
	require.Equal(t, "emails", r.Queues[0].Queue)
	require.Equal(t, 1, r.Queues[0].Count)

	require.Equal(t, "replayed 0 dead jobs in 0 queues\n", c.ok("dead", "replay", "--all-queues"))
	c.refused(2, "--all-queues takes no job ids", "dead", "replay", "--all-queues", "01JABCDEFGHJKMNPQRSTVWXYZ0")
}

// 'stats' shows the queue's latency (the age of its oldest job ready to run) and, beside it,
// the queue wait percentiles of its history ("-" when no job started); --json has latency_ms.
// (Before, neither had a latency.)
func TestStatsLatency(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	c.ok("publish", "-q", "emails", "--type", "welcome")
	out := c.ok("stats", "-q", "emails")
	require.Regexp(t, `(?m)^QUEUE .* \| +ENQUEUED .* \| +LATENCY +WAIT_P50 +WAIT_P99$`, out)
	require.Regexp(t, `(?m)^emails .* \| +[0-9.]+(ms|s|m[0-9]+s) +- +-$`, out)
	var st struct {
		LatencyMS *int64 `json:"latency_ms"`
	}
	require.NoError(t, json.Unmarshal([]byte(c.ok("stats", "-q", "emails", "--json")), &st))
	require.NotNil(t, st.LatencyMS)
	require.GreaterOrEqual(t, *st.LatencyMS, int64(0))
	require.Regexp(t, `(?m)^emails .* \| +[0-9.]+(ms|s|m[0-9]+s) +- +-$`, c.ok("queues"))
}

// Beside the latency, 'stats' shows the queue wait percentiles the workers' history holds for
// the last 15 minutes: here one job that waited 2 s, a minute ago (percentiles are within 9%).
func TestStatsWaitPercentiles(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	c.ok("publish", "-q", "emails", "--type", "welcome")
	opt, err := redis.ParseURL(c.url)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	q := keys.New(c.prefix, "emails")
	h := engine.NewHistory(jobstate.NewStore(rdb, c.prefix), time.Hour, zerolog.Nop())
	began := time.Now().Add(-time.Minute)
	done := jobstate.Done(&q, jobstate.DoneParams{Ran: jobstate.Ran{ID: "j",
		Entry: strconv.FormatInt(began.Add(-2*time.Second).UnixMilli(), 10) + "-0", Attempt: 1,
		Started: began, Finished: began.Add(time.Millisecond)}})
	done.Began = began
	h.Written([]jobstate.Transition{done}, []script.Code{script.OK}, began)
	h.Flush()
	require.Regexp(t, `(?m)^emails .* \| +\S+ +[12]\.\d+s +[12]\.\d+s$`, c.ok("stats", "-q", "emails"))
}
