package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// executeFinished runs one command line in-process on a tree that finishRoot completed (as
// rootCmd does once root.go calls it; calling it twice is harmless) and returns its output.
func executeFinished(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut,
		getenv: func(k string) string { return env[k] }, log: zerolog.Nop()}
	defer a.close()
	root := a.rootCmd()
	finishRoot(a, root)
	finishRoot(a, root)
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	_, err = root.ExecuteContextC(t.Context())
	return out.String(), errOut.String(), err
}

// completeInProcess returns the candidates and the directive of 'conveyor __complete args...'.
func completeInProcess(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	stdout, stderr, err := executeFinished(t, nil, append([]string{"__complete"}, args...)...)
	require.NoError(t, err, stderr)
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
		{[]string{"list", "--status", ""}, []string{"scheduled", "queued", "in_progress", "failed"}},
		{[]string{"--log-level", ""}, []string{"trace", "debug", "info", "warn", "error"}},
		{[]string{"dead", "list", "--log-level", ""}, []string{"trace", "debug", "info", "warn", "error"}},
		{[]string{"stats", "--log-format", ""}, []string{"console", "json"}},
		// Nowhere to ask for queues: nothing, silently.
		{[]string{"publish", "--redis", noRedis, "--queue", ""}, []string{}},
		{[]string{"worker", "--redis", noRedis, "-q", "a,"}, []string{}},
		{[]string{"dead", "purge", "--redis", noRedis, ""}, []string{}},
		{[]string{"queues", "delete", "--redis", noRedis, ""}, []string{}},
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
	a := &app{getenv: func(string) string { return "" }}
	root := a.rootCmd()
	finishRoot(a, root)
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
	stdout, _, err := executeFinished(t, map[string]string{envRedisURL: "redis://u:hunter2@cache:6380/1"}, "stats", "--help")
	require.NoError(t, err)
	require.Regexp(t, `--redis string +Redis URL .*\(set: its value is the default\) \(default "redis://u:xxxxx@cache:6380/1"\)`, stdout)
	require.NotContains(t, stdout, "hunter2")

	stdout, _, err = executeFinished(t, nil, "stats", "--help")
	require.NoError(t, err)
	require.Regexp(t, `--redis string +Redis URL .* \(default "redis://127.0.0.1:6379/0"\)`, stdout)
	require.NotContains(t, stdout, "(set: its value is the default)")
}

// finishRoot gives the root --version and -v.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--version", "-v"} {
		stdout, _, err := executeFinished(t, nil, flag)
		require.NoError(t, err)
		require.Equal(t, readVersion().String()+"\n", stdout)
	}
}
