package cli

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		n     int
		every time.Duration
		err   string
	}{
		{"100/1s", 100, time.Second, ""},
		{"10/1m", 10, time.Minute, ""},
		{"5/500ms", 5, 500 * time.Millisecond, ""},
		{"100/s", 100, time.Second, ""},
		{"10/m", 10, time.Minute, ""},
		{"2/h", 2, time.Hour, ""},
		{"3/ms", 3, time.Millisecond, ""},
		{"7/1m30s", 7, 90 * time.Second, ""},
		{" 1/168h ", 1, 168 * time.Hour, ""},
		{"100", 0, 0, "want N/INTERVAL, such as 100/1s, 10/m or 5/500ms"},
		{"", 0, 0, "want N/INTERVAL"},
		{"/1s", 0, 0, `"" is not a whole number of jobs`},
		{"x/1s", 0, 0, `"x" is not a whole number of jobs`},
		{"1.5/1s", 0, 0, `"1.5" is not a whole number of jobs`},
		{"+1/1s", 0, 0, `"+1" is not a whole number of jobs`},
		{"0/1s", 0, 0, "0 jobs: want 1 to 1000000000"},
		{"-1/1s", 0, 0, "-1 jobs: want 1 to"},
		{"1000000001/1s", 0, 0, "1000000001 jobs: want 1 to 1000000000"},
		{"1/", 0, 0, `interval "": empty`},
		{"1/d", 0, 0, `interval "d": want a duration`},
		{"1/1", 0, 0, `interval "1": want a duration`},
		{"1/0s", 0, 0, `interval "0s": want at least 1ms`},
		{"1/-1s", 0, 0, `interval "-1s": want at least 1ms`},
		{"1/1500us", 0, 0, `interval "1500us": want a whole number of milliseconds`},
		{"1/169h", 0, 0, `interval "169h": want at most 168h`},
		{"1/1s/2", 0, 0, `interval "1s/2": want a duration`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			n, every, err := parseRate(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.n, n)
			require.Equal(t, tc.every, every)
		})
	}
	for _, tc := range []struct {
		n     int
		every time.Duration
		want  string
	}{
		{100, time.Second, "100/1s"}, {10, 10 * time.Second, "10/10s"}, {5, 500 * time.Millisecond, "5/500ms"},
		{10, time.Minute, "10/1m"}, {2, time.Hour, "2/1h"}, {1, 90 * time.Minute, "1/1h30m"},
		{1, 168 * time.Hour, "1/168h"}, {3, 61 * time.Second, "3/1m1s"},
	} {
		require.Equal(t, tc.want, rateText(tc.n, tc.every))
	}
}

// Whatever parseRate accepts is a rate the library takes, and shows back as what parses to it.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"100/1s", "10/m", "5/500ms", "2/h", "1/1m30s", "0/1s", "1/1500us", "x", "1/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, every, err := parseRate(s)
		if err != nil {
			return
		}
		require.GreaterOrEqual(t, n, 1)
		require.LessOrEqual(t, n, maxLimitRate)
		require.GreaterOrEqual(t, every, time.Millisecond)
		require.LessOrEqual(t, every, maxLimitInterval)
		require.Zero(t, every%time.Millisecond)
		n2, every2, err := parseRate(rateText(n, every))
		require.NoError(t, err)
		require.Equal(t, n, n2)
		require.Equal(t, every, every2)
	})
}

func TestLimitsCommands(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	ok, refused := c.ok, c.refused

	require.Equal(t, "no limits set\n", ok("limits", "list"))
	require.Equal(t, "[]\n", ok("limits", "list", "--json"))
	refused(1, `queue "emails" not found: there are no queues under prefix`, "limits", "set", "emails", "--rate", "10/s")
	ok("publish", "-q", "emails", "--type", "send")
	ok("publish", "-q", "billing", "--type", "charge")
	refused(1, `queue "emials" not found; known queues: billing, emails`, "limits", "set", "emials", "--rate", "10/s")
	refused(1, `queue "emials" not found; known queues: billing, emails`, "limits", "list", "emials")

	require.Equal(t, "queue emails: every job: rate 100/1s\n", ok("limits", "set", "emails", "--rate", "100/1s"))
	require.Equal(t, "queue emails: type send, per limit key: rate 10/1m, concurrency 2\n",
		ok("limits", "set", "emails", "--type", "send", "--per-key", "--rate", "10/m", "--concurrency", "2"))
	ok("limits", "set", "billing", "-t", "charge", "--concurrency", "5")
	// A set replaces the scope's limit whole.
	ok("limits", "set", "emails", "--concurrency", "50")

	require.Equal(t, `QUEUE    TYPE    PER_KEY  RATE   CONCURRENCY
billing  charge  no       -      5
emails   *       no       -      50
emails   send    yes      10/1m  2
`, ok("limits", "list"))
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(ok("limits", "list", "emails", "--json")), &rows))
	require.Equal(t, []map[string]any{
		{"queue": "emails", "type": "", "per_key": false, "rate": 0.0, "interval_ms": 0.0, "concurrency": 50.0},
		{"queue": "emails", "type": "send", "per_key": true, "rate": 10.0, "interval_ms": 60000.0, "concurrency": 2.0},
	}, rows)

	require.Equal(t, "queue emails: deleted the limit for type send, per limit key\n",
		ok("limits", "delete", "emails", "--type", "send", "--per-key"))
	refused(1, "queue emails has no limit for type send, per limit key: nothing to delete (see 'conveyor limits list emails')",
		"limits", "delete", "emails", "--type", "send", "--per-key")
	refused(1, `queue "nowhere" not found`, "limits", "delete", "nowhere")
	require.Equal(t, "[{\"queue\":\"emails\",\"type\":\"\",\"per_key\":false,\"rate\":0,\"interval_ms\":0,\"concurrency\":50}]\n",
		ok("limits", "list", "emails", "--json"))

	// Refused as written: exit 2.
	refused(2, `invalid argument "10/d" for "--rate" flag: interval "d": want a duration`, "limits", "set", "emails", "--rate", "10/d")
	refused(2, "give --rate, --concurrency or both", "limits", "set", "emails", "--type", "send")
	refused(2, "--concurrency must not be negative", "limits", "set", "emails", "--concurrency", "-1")
	refused(2, `job type "a b" has a space`, "limits", "set", "emails", "--type", "a b", "--concurrency", "1")
	refused(2, `invalid queue name "a{b}"`, "limits", "list", "a{b}")
	refused(2, "want at most one queue name, got 2", "limits", "list", "a", "b")
	ok("queues", "create", "parted", "--partitions", "2")
	refused(2, `queue "parted" has 2 partitions: limits are not supported on a partitioned queue`,
		"limits", "set", "parted", "--concurrency", "1")
	// The other way round: a limited queue keeps its one partition, the limit named, until the
	// limits are deleted.
	refused(2, `queue "emails" has 1 limit (every job): limits are not supported on a partitioned queue, so its partitions cannot change from 1 to 3 while they exist: delete them first`,
		"queues", "create", "emails", "--partitions", "3")
}
