package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestExitCode(t *testing.T) {
	t.Parallel()
	usage := usageErrorf("unknown flag: --x")
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"Nil", nil, 0},
		{"Plain", errors.New("boom"), 1},
		{"Canceled", context.Canceled, 1},
		{"Usage", usage, 2},
		{"WrappedUsage", fmt.Errorf("publish: %w", usage), 2},
		{"JoinedUsage", errors.Join(errors.New("a"), usage), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, exitCode(tc.err))
		})
	}
}

// noRedis is a URL where nothing listens: in-process tests must never reach a real server,
// least of all the shared one on 127.0.0.1:6379.
const noRedis = "redis://127.0.0.1:1/0"

// runInProcess runs one command line in-process with no Redis environment.
func runInProcess(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(string) string { return "" }
	code = run(t.Context(), args, strings.NewReader(stdin), &out, &errOut, getenv)
	return out.String(), errOut.String(), code
}

// TestRunExitCodes checks the exit code and message of command lines that are refused before
// any Redis call.
func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		want    int
		message string // in stderr
	}{
		{"Bare", []string{}, 0, ""},
		{"Help", []string{"--help"}, 0, ""},
		{"UnknownCommand", []string{"pubish"}, 2, `unknown command "pubish" for "conveyor" (did you mean "publish"?)`},
		{"UnknownFlag", []string{"publish", "--type", "echo", "--bogus"}, 2, "unknown flag: --bogus"},
		{"MissingType", []string{"publish"}, 2, "required flag --type not set"},
		{"StrayArgument", []string{"publish", "--type", "echo", "extra"}, 2, `unexpected argument "extra"`},
		{"MalformedDuration", []string{"publish", "--type", "echo", "--delay", "soon"}, 2, `invalid argument "soon" for "--delay"`},
		{"MalformedCount", []string{"publish", "--type", "echo", "--count", "many"}, 2, `invalid argument "many"`},
		{"BadLogLevel", []string{"--log-level", "loud", "stats"}, 2, "want one of trace, debug, info, warn, error"},
		{"StatusNoID", []string{"status"}, 2, "want exactly one job id, got 0"},
		{"StatusTwoIDs", []string{"status", "a", "b"}, 2, "want exactly one job id, got 2"},
		{"CancelNoID", []string{"cancel"}, 2, "want exactly one job id"},
		{"ReplayNoID", []string{"dead", "replay"}, 2, "want at least one job id"},
		{"DeadUnknown", []string{"dead", "bury"}, 2, `unknown command "bury" for "conveyor dead"`},
		{"StatsAllAndQueue", []string{"stats", "--all", "--queue", "q"}, 2, "--all and --queue cannot be used together"},
		{"ListNoStatus", []string{"list"}, 2, "required flag --status not set"},
		{"ListBadStatus", []string{"list", "--status", "done"}, 2, `--status "done": want one of scheduled, queued, in_progress, failed`},
		{"ListCompleted", []string{"list", "--status", "completed"}, 2, "completed jobs are not indexed and cannot be listed"},
		{"ListLimitZero", []string{"list", "--status", "queued", "--limit", "0"}, 2, "--limit must be 1 to 1000"},
		{"ListLimitHuge", []string{"list", "--status", "queued", "--limit", "1001"}, 2, "--limit must be 1 to 1000"},
		{"ListBadCursor", []string{"list", "--status", "scheduled", "--cursor", "x"}, 2, `cursor "x" is not one of a scheduled listing`},
		{"ListStray", []string{"list", "--status", "queued", "x"}, 2, `unexpected argument "x"`},
		{"QueuesUnknown", []string{"queues", "bogus"}, 2, `unknown command "bogus" for "conveyor queues"`},
		{"QueuesDeleteNoName", []string{"queues", "delete"}, 2, "want exactly one queue name, got 0"},
		{"ReplayAllWithIDs", []string{"dead", "replay", "--all", "x"}, 2, "--all takes no job ids"},
		{"PurgeIDsAndAge", []string{"dead", "purge", "--older-than", "1h", "x"}, 2, "--older-than and job ids cannot be used together"},
		{"DeadOffsetAndCursor", []string{"dead", "list", "--offset", "1", "--cursor", "1:x"}, 2, "--offset and --cursor cannot be used together"},

		{"MalformedPayload", []string{"publish", "--type", "echo", "--payload", "{"}, 2, "--payload is not valid JSON"},
		{"EmptyPayload", []string{"publish", "--type", "echo", "--payload", ""}, 2, "--payload is empty"},
		{"MalformedStdin", []string{"publish", "--type", "echo", "--payload", "@-"}, 2, "standard input (--payload @-) is not valid JSON"},
		{"NegativeDelay", []string{"publish", "--type", "echo", "--delay", "-1s"}, 2, "--delay must not be negative"},
		{"NegativeRetries", []string{"publish", "--type", "echo", "--max-retries", "-1"}, 2, "--max-retries must not be negative"},
		{"ZeroCount", []string{"publish", "--type", "echo", "--count", "0"}, 2, "--count must be at least 1"},
		{"IDWithCount", []string{"publish", "--type", "echo", "--id", "a", "--count", "2"}, 2, "--id names one job"},
		{"EmptyType", []string{"publish", "--type", ""}, 1, "empty job type"},
		{"BadQueue", []string{"publish", "--type", "echo", "--queue", "a{b}"}, 1, "invalid queue name"},
		{"BadMeta", []string{"publish", "--type", "echo", "--meta", "novalue"}, 2, `--meta "novalue": want key=value`},
		{"WorkerConcurrency", []string{"worker", "--concurrency", "0"}, 1, "--concurrency must be at least 1"},
		{"WorkerBackoff", []string{"worker", "--backoff-base", "2s", "--backoff-max", "1s"}, 1, "--backoff-max (1s) must be at least --backoff-base (2s)"},
		{"DeadLimit", []string{"dead", "list", "--limit", "0"}, 1, "--limit must be at least 1"},
		{"PurgeNegative", []string{"dead", "purge", "--older-than", "-1h"}, 1, "--older-than must not be negative"},
		{"BadURL", []string{"stats", "--redis", "foo://x"}, 1, "invalid URL scheme"},
		{"EmptyPrefix", []string{"stats", "--prefix", ""}, 1, "--prefix must not be empty"},
		{"DemoClusterNoURL", []string{"demo", "--cluster"}, 1, "--cluster needs a Redis URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := tc.args
			if !strings.Contains(strings.Join(args, " "), "--redis") && (len(args) == 0 || args[0] != "demo") {
				args = append(args, "--redis", noRedis)
			}
			stdout, stderr, code := runInProcess(t, "{not json", args...)
			require.Equal(t, tc.want, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			if tc.want == 0 {
				require.Empty(t, stderr)
				return
			}
			require.True(t, strings.HasPrefix(stderr, "conveyor: "), "stderr: %q", stderr)
			require.Contains(t, stderr, tc.message)
			require.NotContains(t, stderr, "goroutine ")
			require.Empty(t, stdout)
		})
	}
}

func TestRunJoinedErrorsOnePerLine(t *testing.T) {
	t.Parallel()
	_, stderr, code := runInProcess(t, "", "publish", "--type", "echo", "--delay", "-1s", "--count", "0", "--redis", noRedis)
	require.Equal(t, 1, code)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	require.Len(t, lines, 2, stderr)
	for _, l := range lines {
		require.True(t, strings.HasPrefix(l, "conveyor: "), l)
	}
}

func TestDial(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		url     string
		cluster bool
		err     string
		check   func(*testing.T, redis.UniversalClient)
	}{
		{name: "Plain", url: "redis://h:6380/2", check: func(t *testing.T, c redis.UniversalClient) {
			opt := c.(*redis.Client).Options()
			require.Equal(t, "h:6380", opt.Addr)
			require.Equal(t, 2, opt.DB)
			require.Nil(t, opt.TLSConfig)
		}},
		{name: "TLS", url: "rediss://user:secret@h:6380/0", check: func(t *testing.T, c redis.UniversalClient) {
			opt := c.(*redis.Client).Options()
			require.NotNil(t, opt.TLSConfig)
			require.Equal(t, "h", opt.TLSConfig.ServerName)
			require.Equal(t, "user", opt.Username)
			require.Equal(t, "secret", opt.Password)
		}},
		{name: "Unix", url: "unix:///tmp/redis.sock?db=1", check: func(t *testing.T, c redis.UniversalClient) {
			opt := c.(*redis.Client).Options()
			require.Equal(t, "unix", opt.Network)
			require.Equal(t, 1, opt.DB)
		}},
		{name: "Cluster", url: "rediss://h1:7000?addr=h2:7001&addr=h3:7002", cluster: true, check: func(t *testing.T, c redis.UniversalClient) {
			opt := c.(*redis.ClusterClient).Options()
			require.Equal(t, []string{"h1:7000", "h2:7001", "h3:7002"}, opt.Addrs)
			require.NotNil(t, opt.TLSConfig)
		}},
		{name: "BadScheme", url: "http://h", err: "invalid URL scheme"},
		{name: "PasswordRedacted", url: "redis://u:hunter2@h:1/x", err: "redis URL redis://u:xxxxx@h:1/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := dial(tc.url, tc.cluster)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.NotContains(t, err.Error(), "hunter2")
				return
			}
			require.NoError(t, err)
			defer c.Close()
			tc.check(t, c)
		})
	}
}
