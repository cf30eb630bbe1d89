package cli

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/status"
)

// TestDeadPurgeAllDryRunJSONReadsNoRecord: 'dead purge --all --dry-run --json' prints only ids,
// so it reads the ids alone, as the API's dry run does (Inspector.PurgeAllDryRunIDs): a dry run
// over many big dead jobs costs their ids, not their payloads. The server is the test's own, so
// that its command counts (which count the commands scripts run) are this command's.
func TestDeadPurgeAllDryRunJSONReadsNoRecord(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	var dead []string
	seed := func(n int) {
		for range n {
			dead = append(dead, jobtest.Seed(t, rdb, "dq", status.Failed, jobtest.Opts{}).ID)
		}
	}
	// The HGETALLs that run (get.lua reads a job's record with one) while args runs.
	hgetalls := func(args ...string) (stdout string, n int64) {
		require.NoError(t, rdb.ConfigResetStat(ctx).Err())
		out, stderr, code := runInProcess(t, "", append([]string{"--redis", srv.URL()}, args...)...)
		require.Zero(t, code, stderr)
		stats, err := rdb.InfoMap(ctx, "commandstats").Result()
		require.NoError(t, err)
		if s, ok := stats["Commandstats"]["cmdstat_hgetall"]; ok {
			_, err := fmt.Sscanf(s, "calls=%d", &n)
			require.NoError(t, err, s)
		}
		return out, n
	}
	dryRun := []string{"dead", "purge", "--queue", "dq", "--all", "--dry-run"}
	jsonIDs := func() (int64, []string) {
		out, n := hgetalls(append(dryRun, "--json")...)
		var got struct {
			WouldPurge int      `json:"would_purge"`
			IDs        []string `json:"ids"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		require.Len(t, got.IDs, got.WouldPurge)
		require.ElementsMatch(t, dead, got.IDs)
		return n, got.IDs
	}

	// Compared between 5 and 10 dead jobs: what the command reads besides (the queue's
	// existence) is not this test's business, a read per job is.
	seed(5)
	few, _ := jsonIDs()
	seed(5)
	many, ids := jsonIDs()
	require.Equal(t, few, many, "job records read by a dry run that prints ids: one more per dead job")

	// The same jobs, in the same order, as the table, which reads the records it prints as
	// 'dead list' does.
	out, n := hgetalls(dryRun...)
	require.Contains(t, out, "would purge 10 dead jobs")
	require.GreaterOrEqual(t, n, int64(len(dead)), "the table reads each record")
	var rows []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && slices.Contains(dead, f[0]) {
			rows = append(rows, f[0])
		}
	}
	require.Equal(t, ids, rows)
}
