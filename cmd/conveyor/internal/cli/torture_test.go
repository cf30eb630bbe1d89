package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/cmd/conveyor/internal/torture"
	"github.com/conveyorq/conveyor/pipeline"
)

// --list names the scenarios one a line; a bad request is a usage error (exit 2) before any
// process starts. The runs themselves are tried with the binary (cmd/conveyor
// TestTortureE2E): here the test binary is no conveyor to start workers from.
func TestTortureUsage(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runInProcess(t, "", "torture", "--list")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, []string{"kill-worker", "stop-worker", "term-worker", "redis-restart", "redis-stop", "proxy-reset", "mixed",
		"maxmemory", "partitions-mixed", "limits-kill-worker", "workflows-mixed", "encryption-mixed", "cluster-slot-move", "cluster-failover", "cluster-mixed", "cluster-encryption", "sentinel-failover", "clock-step"},
		strings.Fields(stdout))

	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"torture"}, "name a scenario (--list names them) or give --short"},
		{[]string{"torture", "nope"}, `no scenario "nope" (there are kill-worker, stop-worker`},
		{[]string{"torture", "--short", "--nemesis", "kill-worker,bogus"}, `--nemesis: no nemesis "bogus"`},
		{[]string{"torture", "--short", "--duration", "-1s"}, "--duration and --jobs must not be negative"},
		{[]string{"torture", "--short", "--workers", "0"}, "--workers, --concurrency and --parallel must be at least 1"},
		{[]string{"torture", "--short", "--parallel", "0"}, "--workers, --concurrency and --parallel must be at least 1"},
		{[]string{"torture", "--short", "--appendfsync", "no"}, `--appendfsync must be always or everysec, not "no"`},
		{[]string{"torture", "cluster-failover", "--nemesis", "proxy-reset"}, "scenario cluster-failover: nemesis proxy-reset needs the standalone topology"},
		{[]string{"torture", "kill-worker", "--nemesis", "slot-move"}, "scenario kill-worker: nemesis slot-move needs a cluster"},
	} {
		_, stderr, code := runInProcess(t, "", c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.msg, c.args)
	}
}

// The worker's --torture-ledger flag is hidden: it is the suite's, not an operator's.
func TestTortureLedgerFlagHidden(t *testing.T) {
	t.Parallel()
	stdout, _, code := runInProcess(t, "", "worker", "--help")
	require.Equal(t, 0, code)
	require.NotContains(t, stdout, "torture")
}

// The hidden --torture-clock-file gives the worker the clock the clock-step nemesis steps;
// without it the worker keeps WorkerConfig's default and reads no file.
func TestTortureClockFlag(t *testing.T) {
	t.Parallel()
	var cfg pipeline.WorkerConfig
	stop, err := (&workerFlags{}).openTortureClock(&cfg)
	require.NoError(t, err)
	stop()
	require.Nil(t, cfg.Now)

	path := filepath.Join(t.TempDir(), "w1")
	require.NoError(t, torture.WriteOffset(path, -time.Hour))
	stop, err = (&workerFlags{tortureClock: path}).openTortureClock(&cfg)
	require.NoError(t, err)
	defer stop()
	require.NotNil(t, cfg.Now)
	behind := time.Until(cfg.Now())
	require.Less(t, behind, -59*time.Minute, "the worker's clock reads the file's offset")
	require.Greater(t, behind, -61*time.Minute)

	require.NoError(t, os.WriteFile(path, []byte("later"), 0o600))
	_, err = (&workerFlags{tortureClock: path}).openTortureClock(&cfg)
	require.Error(t, err, "an unreadable clock file stops the worker before it starts")
}
