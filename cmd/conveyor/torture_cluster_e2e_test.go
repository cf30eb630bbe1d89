package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// knownDefects runs the tests that fail on a known, not yet fixed defect (each says which).
var knownDefects = flag.Bool("known-defects", false, "run the tests that show known, not yet fixed defects")

// TestTortureClusterE2E runs the cluster scenarios at their short size as a user would
// (`conveyor torture --short --json cluster-...`): each starts a 3-master cluster with
// replicas, and must exit 0 with nothing lost, no duplicate commit, nothing early. The checks
// stay strict: cluster-slot-move finds a scheduled job lost by promote.lua during a
// migration (internal/jobstate TestPromoteDuringSlotMigrationKeepsTheJob) and fails until
// that is fixed.
func TestTortureClusterE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs the torture suite's processes")
	}
	if !*knownDefects {
		// cluster-failover runs in TestTortureE2E with every scenario that passes; the other
		// two fail until promote.lua's defect is fixed.
		t.Skip("runs scenarios that find a known defect: go test -run TestTortureClusterE2E ./cmd/conveyor/ -args -known-defects")
	}
	bin := buildCLI(t)
	names := []string{"cluster-failover", "cluster-mixed", "cluster-slot-move"}
	cmd := exec.Command(bin, append([]string{"torture", "--short", "--json"}, names...)...)
	cmd.Env = append(withoutConveyorEnv(), "TMPDIR="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("stderr:\n%s", stderr.String())
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Errorf("exit %d\nstdout: %s", exit.ExitCode(), stdout.String())
	} else {
		require.NoError(t, err)
	}
	var out struct {
		Scenarios []struct {
			Name             string `json:"name"`
			Jobs             int    `json:"jobs"`
			Faults           int    `json:"faults"`
			Lost             int    `json:"lost"`
			DuplicateCommits int    `json:"duplicate_commits"`
			Early            int    `json:"early"`
		} `json:"scenarios"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	require.Len(t, out.Scenarios, len(names))
	for i, name := range names {
		s := out.Scenarios[i]
		require.Equal(t, name, s.Name)
		require.Equal(t, 300, s.Jobs, "every job of the short size acknowledged")
		require.Positive(t, s.Faults, "%s struck", name)
		require.Zero(t, s.Lost, name)
		require.Zero(t, s.DuplicateCommits, name)
		require.Zero(t, s.Early, name)
	}
	require.Contains(t, stderr.String(), "torture cluster-slot-move: slot-move: slot", "the slot moved and said so")
}
