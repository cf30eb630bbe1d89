package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/redistest"
)

// TestQueuesSet shows and changes a queue's settings, and the pause it sets is the one
// 'queues' shows.
func TestQueuesSet(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	base := []string{"--redis", srv.URL(), "--prefix", redistest.UniqueName(t)}
	run := func(args ...string) (string, string, int) {
		return runInProcess(t, "", append(append([]string{}, base...), args...)...)
	}
	_, stderr, code := run("queues", "set", "nope", "--concurrency", "2")
	require.Equal(t, 1, code)
	assert.Contains(t, stderr, `queue "nope" not found`)
	_, stderr, code = run("queues", "create", "emails")
	require.Equal(t, 0, code, stderr)

	stdout, stderr, code := run("queues", "set", "emails")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "queue emails (revision 0)\n  paused:       false\n  partitions:   1\n  group window: 20\n", stdout)

	stdout, stderr, code = run("queues", "set", "emails", "--paused=true", "--concurrency", "3", "--group-window", "4")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "queue emails (revision 3)\n  paused:       true\n  partitions:   1\n  group window: 4\n"+
		"  limit:        every job: concurrency 3\n", stdout)
	stdout, _, code = run("queues")
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, "emails (paused)")

	stdout, stderr, code = run("queues", "set", "emails", "--paused=false", "--json")
	require.Equal(t, 0, code, stderr)
	assert.JSONEq(t, `{"queue":"emails","revision":4,"paused":false,"partitions":1,"group_window":4,"group_weights":{},
		"levels":[],"max_retries":null,"timeout_ms":0,"max_waiting":0,"full_policy":"reject",
		"max_waiting_per_key":0,"limits":[{"queue":"emails","type":"","per_key":false,"rate":0,"interval_ms":0,"concurrency":3}]}`, stdout)

	stdout, stderr, code = run("queues", "set", "emails", "--max-retries", "3", "--timeout", "1m")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "  max retries:  3\n  timeout:      1m0s\n")
	stdout, stderr, code = run("queues", "set", "emails", "--max-retries", "-1", "--timeout", "0", "--json")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, `"max_retries":null`)
	assert.Contains(t, stdout, `"timeout_ms":0`)

	_, _, code = run("queues", "set", "emails", "--concurrency", "-1")
	require.Equal(t, 2, code)

	// The bound and its policy (docs/OPERATIONS.md, "Bounded queues").
	stdout, stderr, code = run("queues", "set", "emails", "--max-waiting", "100", "--full-policy", "drop-oldest")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "  max waiting:  100 (drop-oldest)\n")
	stdout, stderr, code = run("queues", "set", "emails", "--full-policy", "reject", "--json")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, `"max_waiting":100,"full_policy":"reject"`)
	_, stderr, code = run("queues", "set", "emails", "--full-policy", "newest")
	require.Equal(t, 2, code)
	assert.Contains(t, stderr, "--full-policy")
	_, _, code = run("queues", "set", "emails", "--max-waiting", "-5")
	require.Equal(t, 2, code)
	stdout, stderr, code = run("queues", "set", "emails", "--max-waiting", "0", "--json")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, `"max_waiting":0`)

	// The per-key bound, beside it.
	stdout, stderr, code = run("queues", "set", "emails", "--max-waiting-per-key", "7")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "  max waiting per key: 7 (reject)\n")
	stdout, stderr, code = run("queues", "set", "emails", "--json")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, `"max_waiting_per_key":7`)
	_, _, code = run("queues", "set", "emails", "--max-waiting-per-key", "-1")
	require.Equal(t, 2, code)
	stdout, stderr, code = run("queues", "set", "emails", "--max-waiting-per-key", "0")
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stdout, "per key")
}
