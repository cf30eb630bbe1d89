package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
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
		{"Invalid", fmt.Errorf("%w: empty job type", pipeline.ErrInvalid), 2},
		{"NotFound", pipeline.ErrNotFound, 1},
		{"TooLarge", pipeline.ErrPayloadTooLarge, 1},
		{"Conflict", pipeline.ErrConflict, 1},
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
	return runWithEnv(t, nil, stdin, args...)
}

// runWithEnv runs one command line in-process with the environment env (nothing else).
func runWithEnv(t *testing.T, env map[string]string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(k string) string { return env[k] }
	code = Run(t.Context(), args, strings.NewReader(stdin), &out, &errOut, getenv)
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
		{"UnknownCommandWithFlags", []string{"publsh", "-t", "echo"}, 2, `unknown command "publsh" for "conveyor" (did you mean "publish"?)`},
		{"UnknownCommandAfterGlobalFlags", []string{"--prefix", "p", "publsh", "--type", "echo"}, 2, `unknown command "publsh" for "conveyor" (did you mean "publish"?)`},
		{"Transposition", []string{"stauts", "--queue", "q", "x"}, 2, `unknown command "stauts" for "conveyor" (did you mean "status"?)`},
		{"TranspositionStats", []string{"stast", "--all"}, 2, `(did you mean "stats"?)`},
		{"UnknownCase", []string{"Worker", "-c", "3"}, 2, `(did you mean "worker"?)`},
		{"UnknownDeadWithFlags", []string{"dead", "lsit", "--limit", "3"}, 2, `unknown command "lsit" for "conveyor dead" (did you mean "list"?)`},
		{"UnknownQueuesWithFlags", []string{"queues", "delte", "q", "--force"}, 2, `unknown command "delte" for "conveyor queues" (did you mean "delete"?)`},
		{"UnknownNoSuggestion", []string{"frobnicate", "-x"}, 2, `unknown command "frobnicate" for "conveyor"` + "\n"},
		{"UnknownFlag", []string{"publish", "--type", "echo", "--bogus"}, 2, "unknown flag: --bogus"},
		{"MissingType", []string{"publish"}, 2, "required flag --type not set"},
		{"StrayArgument", []string{"publish", "--type", "echo", "extra"}, 2, `unexpected argument "extra"`},
		{"MalformedDuration", []string{"publish", "--type", "echo", "--delay", "soon"}, 2, `invalid argument "soon" for "--delay"`},
		{"MalformedCount", []string{"publish", "--type", "echo", "--count", "many"}, 2, `invalid argument "many"`},
		{"BadLogLevel", []string{"--log-level", "loud", "stats"}, 2, "want one of trace, debug, info, warn, error"},
		{"BadLogFormat", []string{"--log-format", "xml", "stats"}, 2, `invalid argument "xml" for "--log-format" flag: want console or json`},
		{"StatusNoID", []string{"status"}, 2, "want exactly one job id, got 0"},
		{"StatusTwoIDs", []string{"status", "a", "b"}, 2, "want exactly one job id, got 2"},
		{"CancelNoID", []string{"cancel"}, 2, "want exactly one job id"},
		{"ReplayNoID", []string{"dead", "replay"}, 2, "want at least one job id"},
		{"DeadUnknown", []string{"dead", "bury"}, 2, `unknown command "bury" for "conveyor dead"`},
		{"StatsAllAndQueue", []string{"stats", "--all", "--queue", "q"}, 2, "--all and --queue cannot be used together"},
		{"ListNoStatus", []string{"list"}, 2, "required flag --status not set"},
		{"ListBadStatus", []string{"list", "--status", "done"}, 2, `--status "done": want one of waiting, scheduled, queued, in_progress, failed`},
		{"ListDone", []string{"list", "--status", "done"}, 2, "want one of waiting, scheduled, queued, in_progress, failed, completed, canceled"},
		{"ListLimitZero", []string{"list", "--status", "queued", "--limit", "0"}, 2, "--limit must be 1 to 1000"},
		{"ListLimitHuge", []string{"list", "--status", "queued", "--limit", "1001"}, 2, "--limit must be 1 to 1000"},
		{"ListBadCursor", []string{"list", "--status", "scheduled", "--cursor", "x"}, 2, `cursor "x" is not one of a scheduled listing`},
		{"ListStray", []string{"list", "--status", "queued", "x"}, 2, `unexpected argument "x"`},
		{"QueuesUnknown", []string{"queues", "bogus"}, 2, `unknown command "bogus" for "conveyor queues"`},
		{"QueuesDeleteNoName", []string{"queues", "delete"}, 2, "want exactly one queue name, got 0"},
		{"ReplayAllWithIDs", []string{"dead", "replay", "--all", "x"}, 2, "--all takes no job ids"},
		{"LimitsUnknown", []string{"limits", "lsit"}, 2, `unknown command "lsit" for "conveyor limits" (did you mean "list"?)`},
		{"LimitsSetNoQueue", []string{"limits", "set", "--rate", "1/s"}, 2, "want exactly one queue name, got 0"},
		{"LimitsSetNothing", []string{"limits", "set", "q"}, 2, "give --rate, --concurrency or both"},
		{"LimitsSetBadRate", []string{"limits", "set", "q", "--rate", "fast"}, 2, `invalid argument "fast" for "--rate" flag: want N/INTERVAL, such as 100/1s, 10/m or 5/500ms`},
		{"LimitsSetBadQueue", []string{"limits", "set", "a{b}", "--concurrency", "1"}, 2, `invalid queue name "a{b}"`},
		{"LimitsDeleteNoQueue", []string{"limits", "delete"}, 2, "want exactly one queue name, got 0"},
		{"PurgeIDsAndAge", []string{"dead", "purge", "--older-than", "1h", "x"}, 2, "--older-than and job ids cannot be used together"},
		{"DeadOffsetAndCursor", []string{"dead", "list", "--offset", "1", "--cursor", "1:x"}, 2, "--offset and --cursor cannot be used together"},
		{"WorkflowsGetNoID", []string{"workflows", "get"}, 2, "want exactly one workflow id, got 0"},
		{"BatchesGetNoID", []string{"batches", "get"}, 2, "want exactly one batch id, got 0"},
		{"WorkflowsUnknown", []string{"workflows", "lsit"}, 2, `unknown command "lsit" for "conveyor workflows" (did you mean "list"?)`},
		{"WorkflowsListLimit", []string{"workflows", "list", "--limit", "1001"}, 2, "--limit must be 1 to 1000, not 1001"},
		{"WorkflowsPublishNoFile", []string{"workflows", "publish"}, 2, "required flag --file not set"},
		{"BatchesPublishNoFile", []string{"batches", "publish"}, 2, "required flag --file not set"},
		{"WorkflowsPublishMalformed", []string{"workflows", "publish", "--file", "-"}, 2, "standard input (--file -): malformed JSON at byte 1"},

		{"MalformedPayload", []string{"publish", "--type", "echo", "--payload", "{"}, 2, "--payload is not valid JSON"},
		{"EmptyPayload", []string{"publish", "--type", "echo", "--payload", ""}, 2, "--payload is empty"},
		{"MalformedStdin", []string{"publish", "--type", "echo", "--payload", "@-"}, 2, "standard input (--payload @-) is not valid JSON"},
		{"NegativeDelay", []string{"publish", "--type", "echo", "--delay", "-1s"}, 2, "--delay must not be negative"},
		{"NegativeRetries", []string{"publish", "--type", "echo", "--max-retries", "-1"}, 2, "--max-retries must not be negative"},
		{"ZeroCount", []string{"publish", "--type", "echo", "--count", "0"}, 2, "--count must be at least 1"},
		{"IDWithCount", []string{"publish", "--type", "echo", "--id", "a", "--count", "2"}, 2, "--id names one job"},
		{"EmptyType", []string{"publish", "--type", ""}, 2, "conveyor: empty job type\n"},
		{"SpaceInType", []string{"publish", "--type", "a b"}, 2, `job type "a b" has a space`},
		{"BadQueue", []string{"publish", "--type", "echo", "--queue", "a{b}"}, 2, `invalid queue name "a{b}"`},
		{"BadID", []string{"publish", "--type", "echo", "--id", "a b"}, 2, `invalid job id "a b"`},
		{"UniqueTTLWithoutUnique", []string{"publish", "--type", "echo", "--unique-ttl", "1m"}, 2, "--unique-ttl needs --unique"},
		{"BadMeta", []string{"publish", "--type", "echo", "--meta", "novalue"}, 2, `--meta "novalue": want key=value`},
		{"WorkerConcurrency", []string{"worker", "--concurrency", "0"}, 2, "--concurrency must be at least 1"},
		{"WorkerBackoff", []string{"worker", "--backoff-base", "2s", "--backoff-max", "1s"}, 2, "--backoff-max (1s) must be at least --backoff-base (2s)"},
		{"WorkerEmptyQueue", []string{"worker", "--queue", ""}, 2, "--queue must name a queue, not be empty"},
		{"WorkerEmptyQueueInList", []string{"worker", "--queue", "a,,b"}, 2, `--queue "": empty`},
		{"WorkerBadQueue", []string{"worker", "--queue", "a:b"}, 2, `--queue "a:b": character ':' not allowed`},
		{"WorkerBadName", []string{"worker", "--name", "a b"}, 2, `--name "a b": invalid worker name: character ' ' not allowed`},
		{"WorkerShortVisibility", []string{"worker", "--visibility-timeout", "100ms"}, 2, "--visibility-timeout is too short: at least 300ms (leases are renewed every third of it), not 100ms"},
		{"WorkerShortRecovery", []string{"worker", "--recovery-interval", "10us"}, 2, "--recovery-interval is too short: at least 1ms, not 10µs"},
		{"DeadLimit", []string{"dead", "list", "--limit", "0"}, 2, "--limit must be at least 1"},
		{"PublishWarnWindow", []string{"publish", "--type", "echo", "--warn-window", "25h"}, 2, "--warn-window must be at most 24h and not negative (0: the default, 10m0s), not 25h0m0s"},
		{"PublishJSONLWarnWindow", []string{"publish", "--jsonl", "-", "--warn-window", "-1s"}, 2, "not -1s"},
		{"ServeWarnWindow", []string{"serve", "--warn-window", "-1m"}, 2, "--warn-window must be at most 24h and not negative"},
		{"PurgeNegative", []string{"dead", "purge", "--all", "--older-than", "-1h"}, 2, "--older-than must not be negative"},
		{"BenchMode", []string{"bench", "--mode", "foo"}, 2, `--mode must be live or drain, not "foo"`},
		{"BadURL", []string{"stats", "--redis", "foo://x"}, 2, "--redis foo://x: invalid URL scheme"},
		{"URLWithoutScheme", []string{"stats", "--redis", "127.0.0.1:6379"}, 2, `--redis "127.0.0.1:6379" has no scheme: did you mean redis://127.0.0.1:6379?`},
		{"URLWithoutSchemeRedacted", []string{"stats", "--redis", "u:hunter2@h:6379"}, 2, `did you mean redis://u:xxxxx@h:6379?`},
		{"BadClusterURL", []string{"stats", "--cluster", "--redis", "foo://x"}, 2, "--redis foo://x: invalid URL scheme"},
		{"EmptyPrefix", []string{"stats", "--prefix", ""}, 2, "--prefix must not be empty"},
		{"DemoClusterNoURL", []string{"demo", "--cluster"}, 2, "--cluster needs a Redis URL"},

		// Refusals by the system: exit 1, saying what to do next.
		{"RedisRefused", []string{"stats"}, 1, "conveyor: queues: cannot reach Redis at redis://127.0.0.1:1/0: connection refused; is Redis running there? set --redis or CONVEYOR_REDIS_URL\n"},
		{"RedisRefusedRedacted", []string{"stats", "--redis", "redis://u:hunter2@127.0.0.1:1/0"}, 1, "cannot reach Redis at redis://u:xxxxx@127.0.0.1:1/0: connection refused"},
		{"LogLevelAnyCase", []string{"--log-level", "INFO", "stats"}, 1, "cannot reach Redis at"},
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
			require.NotContains(t, stderr, "hunter2")
			for _, internal := range []string{"pipeline:", "invalid argument:", "stream:", "recovery:", "delayed:"} {
				require.NotContains(t, stderr, internal, "no internal prefixes in CLI messages")
			}
			require.Equal(t, tc.want == 2, strings.Contains(stderr, "--help' for usage."), "the usage hint comes with exit 2 only: %q", stderr)
			require.Empty(t, stdout)
		})
	}
}

func TestRunJoinedErrorsOnePerLine(t *testing.T) {
	t.Parallel()
	_, stderr, code := runInProcess(t, "", "publish", "--type", "echo", "--delay", "-1s", "--count", "0", "--redis", noRedis)
	require.Equal(t, 2, code)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	require.Len(t, lines, 3, stderr)
	for _, l := range lines[:2] {
		require.True(t, strings.HasPrefix(l, "conveyor: "), l)
	}
	require.Equal(t, "Run 'conveyor publish --help' for usage.", lines[2])
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

// Every global flag has an environment variable; a flag on the command line wins over it, and
// a malformed value is a usage error naming the variable.
func TestRunEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		want    int
		message string
	}{
		{"BadLevel", map[string]string{envLogLevel: "loud"}, []string{"worker", "--concurrency", "0"}, 2,
			`$CONVEYOR_LOG_LEVEL "loud": want one of trace, debug, info, warn, error`},
		{"LevelFlagWins", map[string]string{envLogLevel: "loud"}, []string{"--log-level", "WARN", "stats", "--redis", noRedis}, 1,
			"cannot reach Redis at redis://127.0.0.1:1/0"},
		{"LevelAnyCase", map[string]string{envLogLevel: "Debug"}, []string{"stats", "--redis", noRedis}, 1, "cannot reach Redis"},
		{"BadFormat", map[string]string{envLogFormat: "xml"}, []string{"stats"}, 2, `$CONVEYOR_LOG_FORMAT "xml": want console or json`},
		{"FormatFlagWins", map[string]string{envLogFormat: "xml"}, []string{"--log-format", "json", "stats", "--redis", noRedis}, 1, "cannot reach Redis"},
		{"BadCluster", map[string]string{envCluster: "maybe"}, []string{"stats"}, 2, `$CONVEYOR_CLUSTER "maybe": want true or false`},
		{"EmptyPrefixFlagWins", map[string]string{envPrefix: "p"}, []string{"stats", "--prefix", ""}, 2, "--prefix must not be empty"},
		{"URL", map[string]string{envRedisURL: "redis://u:hunter2@127.0.0.1:1/0"}, []string{"stats"}, 1,
			"cannot reach Redis at redis://u:xxxxx@127.0.0.1:1/0: connection refused"},
		{"BadURL", map[string]string{envRedisURL: "127.0.0.1:6379"}, []string{"stats"}, 2,
			`$CONVEYOR_REDIS_URL "127.0.0.1:6379" has no scheme: did you mean redis://127.0.0.1:6379?`},
		{"URLFlagWins", map[string]string{envRedisURL: "127.0.0.1:6379"}, []string{"stats", "--redis", noRedis}, 1, "cannot reach Redis at redis://127.0.0.1:1/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runWithEnv(t, tc.env, "", tc.args...)
			require.Equal(t, tc.want, code, "stderr:\n%s", stderr)
			require.Contains(t, stderr, tc.message)
			require.NotContains(t, stderr, "hunter2")
			require.Empty(t, stdout)
		})
	}
}

// A command whose context ends (SIGINT or SIGTERM) before it finishes exits 130; the worker,
// whose normal end that is, exits 0.
func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var out, errOut bytes.Buffer
	getenv := func(string) string { return "" }
	code := Run(ctx, []string{"stats", "--redis", noRedis}, strings.NewReader(""), &out, &errOut, getenv)
	require.Equal(t, 130, code, errOut.String())
	require.Equal(t, "conveyor: interrupted\n", errOut.String())

	errOut.Reset()
	code = Run(ctx, []string{"worker", "--redis", noRedis}, strings.NewReader(""), &out, &errOut, getenv)
	require.Equal(t, 0, code, errOut.String())
	require.NotContains(t, errOut.String(), "conveyor: ")
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	root := (&app{getenv: func(string) string { return "" }}).rootCmd()
	root.InitDefaultHelpCmd()
	for typed, want := range map[string][]string{
		"stauts":     {"status"},
		"statsu":     {"status"},
		"stast":      {"stats"},
		"publsh":     {"publish"},
		"pub":        {"publish"},
		"wroker":     {"worker"},
		"WORKER":     {"worker"},
		"cancle":     {"cancel"},
		"qeueus":     {"queues"},
		"frobnicate": nil,
		"x":          nil,
	} {
		require.Equal(t, want, suggest(root, typed), typed)
	}
	require.Equal(t, 0, osaDistance("status", "status"))
	require.Equal(t, 1, osaDistance("stauts", "status"))
	require.Equal(t, 1, osaDistance("stauts", "stats"))
	require.Equal(t, 1, osaDistance("ab", "ba"))
}

// cmdRunner runs command lines in-process against a private Redis under a key prefix of its own.
type cmdRunner struct {
	t           *testing.T
	url, prefix string
}

func newCmdRunner(t *testing.T) *cmdRunner {
	return &cmdRunner{t: t, url: redistest.Shared(t).URL(), prefix: redistest.UniqueName(t)}
}

func (c *cmdRunner) run(args ...string) (stdout, stderr string, code int) {
	return runInProcess(c.t, "", append(args, "--redis", c.url, "--prefix", c.prefix)...)
}

// ok runs args, requires exit 0 and nothing on stderr, and returns stdout. A publish's
// warnings (warnPublish) are let through: these tests run no worker, so every publish has one.
func (c *cmdRunner) ok(args ...string) string {
	c.t.Helper()
	stdout, stderr, code := c.run(args...)
	require.Equal(c.t, 0, code, "conveyor %s: %s", strings.Join(args, " "), stderr)
	if len(args) > 0 && args[0] == "publish" {
		stderr = publishWarning.ReplaceAllString(stderr, "")
	}
	require.Empty(c.t, stderr)
	return stdout
}

// publishWarning is a line of a publish's warnings on stderr.
var publishWarning = regexp.MustCompile(`(?m)^warning: no worker has (read queue|handled type) .*\n`)

// refused runs args and requires exit code want, nothing on stdout and msg on stderr, which
// must not leak a Go package's prefix ("pipeline:").
func (c *cmdRunner) refused(want int, msg string, args ...string) {
	c.t.Helper()
	stdout, stderr, code := c.run(args...)
	require.Equal(c.t, want, code, "conveyor %s: %s", strings.Join(args, " "), stderr)
	require.Empty(c.t, stdout)
	require.Contains(c.t, stderr, msg)
	require.NotContains(c.t, stderr, "pipeline:")
}
