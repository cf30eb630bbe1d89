package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTortureE2E runs `conveyor torture --short --json`, every scenario `--list` names, in one
// process, as a user would: the binary starts its own redis-server(s), its own worker
// processes (itself, re-executed) and its producer, and must exit 0 with each scenario's
// figures in exactly the documented JSON shape. Then the self-test nemesis must make a run
// fail.
func TestTortureE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs the torture suite's processes")
	}
	bin := buildCLI(t)
	list, err := exec.Command(bin, "torture", "--list").Output()
	require.NoError(t, err)
	var names []string
	for line := range strings.Lines(string(list)) {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	require.Contains(t, names, "kill-worker")
	cmd := exec.Command(bin, "torture", "--short", "--json")
	cmd.Env = append(withoutConveyorEnv(), "TMPDIR="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", exit.ExitCode(), stdout.String(), stderr.String())
	}
	require.NoError(t, err)
	t.Logf("stderr:\n%s", stderr.String())

	// The shape, field for field: nothing more, nothing less.
	var raw map[string][]map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &raw), stdout.String())
	require.Len(t, raw, 1)
	// A scenario that finds a known defect is left out, and the run says so (none does
	// now: the slot-move scenarios did until the cluster guard, issue 22).
	skipped := strings.Count(stderr.String(), "torture: skipped ")
	require.Len(t, raw["scenarios"], len(names)-skipped)
	for _, s := range raw["scenarios"] {
		var keys []string
		for k := range s {
			keys = append(keys, k)
		}
		require.ElementsMatch(t, []string{"name", "jobs", "faults", "lost", "duplicate_commits",
			"duplicate_executions", "early", "max_recovery_ms"}, keys)
	}
	var out struct {
		Scenarios []struct {
			Name                string `json:"name"`
			Jobs                int    `json:"jobs"`
			Faults              int    `json:"faults"`
			Lost                int    `json:"lost"`
			DuplicateCommits    int    `json:"duplicate_commits"`
			DuplicateExecutions int    `json:"duplicate_executions"`
			Early               int    `json:"early"`
			MaxRecoveryMS       int64  `json:"max_recovery_ms"`
		} `json:"scenarios"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out))
	ran := names[:0:0]
	for _, name := range names {
		if !strings.Contains(stderr.String(), "torture: skipped "+name+":") {
			ran = append(ran, name)
		}
	}
	for i, name := range ran {
		s := out.Scenarios[i]
		require.Equal(t, name, s.Name)
		require.GreaterOrEqual(t, s.Jobs, 300, "every job of the short size acknowledged (and a workflow's tasks)")
		require.Positive(t, s.Faults, "%s struck", name)
		require.Zero(t, s.Lost, name)
		require.Zero(t, s.DuplicateCommits, name)
		require.Zero(t, s.Early, name)
		require.GreaterOrEqual(t, s.MaxRecoveryMS, int64(0))
	}
	require.Contains(t, stderr.String(), "torture kill-worker: kill-worker at", "the nemesis struck and said so")
	// The slot moved under load (issue 22 found delayed jobs lost to it before the cluster
	// guard, internal/script).
	require.Contains(t, stderr.String(), "torture cluster-slot-move: slot-move: slot", "the slot moved and said so")

	// The self-test nemesis deletes scheduled jobs behind Conveyor's back: the run must fail
	// (exit 1), count them lost and name them.
	tmp := t.TempDir()
	cmd = exec.Command(bin, "torture", "kill-worker", "--short", "--json", "--nemesis", "lose-job")
	cmd.Env = append(withoutConveyorEnv(), "TMPDIR="+tmp)
	stdout.Reset()
	stderr.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	require.True(t, errors.As(err, &exit), "%v\n%s", err, stderr.String())
	require.Equal(t, 1, exit.ExitCode(), stderr.String())
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	require.Len(t, out.Scenarios, 1)
	require.Positive(t, out.Scenarios[0].Lost, stderr.String())
	require.Regexp(t, `FAILED: \d+ lost \(acknowledged, never committed\): kill-worker-1-\d+ \(observed missing`, stderr.String())
	require.Contains(t, stderr.String(), "its ledgers and logs are in "+tmp, "a failed run's directory is kept")
}

// withoutConveyorEnv is the environment without CONVEYOR_ variables, so the run is the
// flags' alone.
func withoutConveyorEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONVEYOR_") {
			env = append(env, kv)
		}
	}
	return env
}
