package cli

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// 'conveyor history' shows what a queue's workers finished, from the history they keep in
// Redis: a table of the buckets with outcomes and the total, or JSON of every bucket; exit 1
// for an unknown queue, 2 for a bad flag, and "nothing" on stderr.
func TestHistoryCommand(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.UniqueName(t)
	base := []string{"--redis", srv.URL(), "--prefix", prefix}
	run := func(args ...string) (string, string, int) {
		return runInProcess(t, "", append(append([]string{}, base...), args...)...)
	}
	_, stderr, code := run("history", "--queue", "nope")
	require.Equal(t, 1, code)
	assert.Contains(t, stderr, `queue "nope" not found`)
	_, _, code = run("history", "--resolution", "1s")
	require.Equal(t, 2, code)
	_, _, code = run("history", "--all", "--queue", "emails")
	require.Equal(t, 2, code)

	_, stderr, code = run("queues", "create", "emails")
	require.Equal(t, 0, code, stderr)
	stdout, stderr, code := run("history", "--queue", "emails")
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "no jobs finished in queue emails in the last 15m0s")

	rdb := srv.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: prefix})
	require.NoError(t, err)
	insp, err := pipeline.NewInspector(rdb, pipeline.InspectorConfig{Prefix: prefix})
	require.NoError(t, err)
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"emails"}, Prefix: prefix, HistoryInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	w.Handle("echo", func(_ context.Context, j *pipeline.Job) ([]byte, error) { return j.Payload, nil })
	w.Handle("fail", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, pipeline.SkipRetry(errors.New("no")) })
	jobtest.RunWorker(t, w)
	for range 4 {
		_, err := client.Enqueue(t.Context(), "emails", pipeline.Task{Type: "echo"})
		require.NoError(t, err)
	}
	_, err = client.Enqueue(t.Context(), "emails", pipeline.Task{Type: "fail"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		h, err := insp.History(t.Context(), "emails", pipeline.HistoryStepFine, time.Now().Add(-15*time.Minute))
		require.NoError(t, err)
		return h.Total.Completed == 4 && h.Total.Failed == 1
	}, 30*time.Second, 20*time.Millisecond)

	stdout, stderr, code = run("history", "--queue", "emails")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "queue emails, last 15m0s in 5s buckets")
	assert.Contains(t, stdout, "WAIT_P50")
	assert.Regexp(t, `(?m)^TIME +COMPLETED +WENT_DEAD +RETRIED +\|`, stdout, "a dead job reads dead")
	assert.Regexp(t, `(?m)^TOTAL +4 +1 +0 +\|`, stdout)

	stdout, stderr, code = run("history", "--all", "--resolution", "1m", "--window", "2h", "--json")
	require.Equal(t, 0, code, stderr)
	var h struct {
		Resolution    string  `json:"resolution"`
		StepSeconds   float64 `json:"step_seconds"`
		WindowSeconds float64 `json:"window_seconds"`
		Points        []struct {
			T int64 `json:"t"`
		} `json:"points"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &h), stdout)
	assert.Equal(t, "1m", h.Resolution)
	assert.Equal(t, 60.0, h.StepSeconds)
	assert.Equal(t, 7200.0, h.WindowSeconds)
	assert.InDelta(t, 120, len(h.Points), 1)

	stdout, stderr, code = run("history", "--queue", "emails", "--json")
	require.Equal(t, 0, code, stderr)
	var j struct {
		Total struct {
			Completed int64   `json:"completed"`
			Failed    int64   `json:"failed"`
			WaitP99   float64 `json:"wait_p99_ms"`
			ExecP99   float64 `json:"exec_p99_ms"`
		} `json:"total"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &j), stdout)
	assert.EqualValues(t, 4, j.Total.Completed)
	assert.EqualValues(t, 1, j.Total.Failed)
	assert.Positive(t, j.Total.WaitP99)
	assert.Positive(t, j.Total.ExecP99)
}
