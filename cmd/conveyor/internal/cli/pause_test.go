package cli

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestPauseCommands pauses and resumes a queue: exit codes, --json, and the state in
// 'queues' and 'stats'.
func TestPauseCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	base := []string{"--redis", srv.URL(), "--prefix", redistest.UniqueName(t)}
	run := func(args ...string) (string, string, int) {
		return runInProcess(t, "", append(append([]string{}, base...), args...)...)
	}
	_, stderr, code := run("pause", "nope")
	require.Equal(t, 1, code)
	assert.Contains(t, stderr, `queue "nope" not found`)
	_, stderr, code = run("resume", "nope")
	require.Equal(t, 1, code)
	assert.Contains(t, stderr, `queue "nope" not found`)
	_, _, code = run("pause")
	require.Equal(t, 2, code)

	_, stderr, code = run("queues", "create", "emails")
	require.Equal(t, 0, code, stderr)
	stdout, stderr, code := run("pause", "emails")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "paused queue emails: no live worker reads it; none takes its jobs until it is resumed\n", stdout)
	stdout, stderr, code = run("pause", "emails", "--json")
	require.Equal(t, 0, code, stderr)
	assert.JSONEq(t, `{"queue":"emails","paused":true,"workers":[],"unconfirmed":[]}`, stdout)

	stdout, _, code = run("queues")
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, "emails (paused)")
	stdout, _, code = run("queues", "--json")
	require.Equal(t, 0, code)
	var list []struct {
		Queue  string `json:"queue"`
		Paused bool   `json:"paused"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &list))
	require.Len(t, list, 1)
	assert.True(t, list[0].Paused)
	stdout, _, code = run("stats", "--queue", "emails", "--json")
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, `"paused":true`)
	stdout, _, _ = run("stats", "--queue", "emails")
	assert.Contains(t, stdout, "emails (paused)")

	stdout, stderr, code = run("resume", "emails", "--json")
	require.Equal(t, 0, code, stderr)
	assert.JSONEq(t, `{"queue":"emails","paused":false}`, stdout)
	stdout, _, code = run("resume", "emails")
	require.Equal(t, 0, code)
	assert.Equal(t, "resumed queue emails\n", stdout)
	stdout, _, _ = run("queues")
	assert.NotContains(t, stdout, "(paused)")
}

// TestPauseCommandConfirmed: with a live worker reading the queue, 'pause' returns once the
// worker confirmed, and says so; --json names it.
func TestPauseCommandConfirmed(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.UniqueName(t)
	base := []string{"--redis", srv.URL(), "--prefix", prefix}
	run := func(args ...string) (string, string, int) {
		return runInProcess(t, "", append(append([]string{}, base...), args...)...)
	}
	_, stderr, code := run("queues", "create", "emails")
	require.Equal(t, 0, code, stderr)
	w, err := pipeline.NewWorker(srv.Client(t), pipeline.WorkerConfig{Queues: []string{"emails"}, Prefix: prefix, Name: "w1"})
	require.NoError(t, err)
	w.Handle("echo", func(_ context.Context, j *pipeline.Job) ([]byte, error) { return j.Payload, nil })
	jobtest.RunWorker(t, w)
	stdout, stderr, code := run("pause", "emails")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "paused queue emails: 1 live worker reading it confirmed; none starts a job published from now on until it is resumed\n", stdout)
	assert.Empty(t, stderr)
	stdout, stderr, code = run("pause", "emails", "--json")
	require.Equal(t, 0, code, stderr)
	assert.JSONEq(t, `{"queue":"emails","paused":true,"workers":["w1"],"unconfirmed":[]}`, stdout)
}
