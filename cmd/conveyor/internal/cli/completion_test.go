package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// execute runs one command line in-process with the environment env and returns its output
// and exit code.
func execute(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(t.Context(), args, strings.NewReader(""), &out, &errOut, func(k string) string { return env[k] })
	return out.String(), errOut.String(), code
}

// completeInProcess returns the candidates and the directive of 'conveyor __complete args...'.
func completeInProcess(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	stdout, stderr, code := execute(t, nil, append([]string{"__complete"}, args...)...)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

func TestFlagCompletion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"publish", "--type", ""}, []string{
			"echo\treturns its payload as the result",
			"fail\talways fails, with a retryable error",
			"flaky\tfails its first K attempts, then succeeds",
			"http\tmakes one HTTP request, to a public address",
			"noop\tdoes nothing (for benchmarks)",
			"sleep\tsleeps for ms milliseconds",
		}},
		{[]string{"publish", "-t", "fl"}, nil}, // the shell filters; cobra offers them all
		{[]string{"bench", "--mode", ""}, []string{"live\tpublish while the worker runs", "drain\tpublish first, then time the drain"}},
		{[]string{"list", "--status", ""}, []string{"waiting", "scheduled", "queued", "in_progress", "failed", "completed", "canceled", "dead\tthe same as failed"}},
		{[]string{"--log-level", ""}, []string{"trace", "debug", "info", "warn", "error"}},
		{[]string{"dead", "list", "--log-level", ""}, []string{"trace", "debug", "info", "warn", "error"}},
		{[]string{"stats", "--log-format", ""}, []string{"console", "json"}},
		// Nowhere to ask for queues: nothing, silently.
		{[]string{"publish", "--redis", noRedis, "--queue", ""}, []string{}},
		{[]string{"worker", "--redis", noRedis, "-q", "a,"}, []string{}},
		{[]string{"dead", "purge", "--redis", noRedis, ""}, []string{}},
		{[]string{"queues", "delete", "--redis", noRedis, ""}, []string{}},
		{[]string{"limits", "set", "--redis", noRedis, ""}, []string{}},
		{[]string{"limits", "list", "--redis", noRedis, ""}, []string{}},
		{[]string{"limits", "delete", "--redis", noRedis, ""}, []string{}},
		{[]string{"workflows", "get", "--redis", noRedis, ""}, []string{}},
		{[]string{"batches", "get", "--redis", noRedis, "-q", "q", ""}, []string{}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			got, directive := completeInProcess(t, tc.args...)
			require.Equal(t, ":4", directive, "no file completion")
			if tc.want != nil {
				if len(tc.want) == 0 {
					require.Empty(t, got)
				} else {
					require.Equal(t, tc.want, got)
				}
			}
		})
	}
}

// Every command with a --queue flag completes it.
func TestQueueCompletionEverywhere(t *testing.T) {
	t.Parallel()
	root := (&app{getenv: func(string) string { return "" }}).rootCmd()
	n := 0
	walk(root, func(c *cobra.Command) {
		if c.LocalNonPersistentFlags().Lookup("queue") == nil {
			return
		}
		n++
		_, ok := c.GetFlagCompletionFunc("queue")
		require.True(t, ok, "%s --queue", c.CommandPath())
	})
	require.GreaterOrEqual(t, n, 9)
}

func TestRedisHelpShowsEnv(t *testing.T) {
	t.Parallel()
	stdout, _, code := execute(t, map[string]string{envRedisURL: "redis://u:hunter2@cache:6380/1"}, "stats", "--help")
	require.Equal(t, 0, code)
	require.Regexp(t, `--redis string +Redis URL .*\(set: its value is the default\) \(default "redis://u:xxxxx@cache:6380/1"\)`, stdout)
	require.NotContains(t, stdout, "hunter2")

	stdout, _, code = execute(t, nil, "stats", "--help")
	require.Equal(t, 0, code)
	require.Regexp(t, `--redis string +Redis URL .* \(default "redis://127.0.0.1:6379/0"\)`, stdout)
	require.NotContains(t, stdout, "(set: its value is the default)")
}

// rootCmd's finishRoot gives the root --version and -v.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--version", "-v"} {
		stdout, _, code := execute(t, nil, flag)
		require.Equal(t, 0, code)
		require.Equal(t, readVersion().String()+"\n", stdout)
	}
}
