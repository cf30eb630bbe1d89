package cli

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// A snoozed job says why its attempt reads 0 though it ran, and its attempts table shows the
// snoozed run. (Before, "attempt: 0" alone read as a job that never ran.)
func TestStatusShowsSnooze(t *testing.T) {
	t.Parallel()
	c := newCmdRunner(t)
	rdb := redistest.Client(t)
	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{Prefix: c.prefix})
	require.NoError(t, err)
	w, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"emails"}, Prefix: c.prefix, Name: "napper"})
	require.NoError(t, err)
	w.Handle("nap", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, pipeline.Snooze(time.Hour) })
	jobtest.RunWorker(t, w)
	j, err := client.Enqueue(t.Context(), "emails", pipeline.Task{Type: "nap"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := client.Get(t.Context(), "emails", j.ID)
		require.NoError(t, err)
		return got.Snoozes == 1
	}, 10*time.Second, 10*time.Millisecond)

	out := c.ok("status", "-q", "emails", j.ID)
	require.Regexp(t, `(?m)^status: +scheduled$`, out)
	require.Regexp(t, `(?m)^attempt: +0 \(snoozed runs are not counted\)$`, out)
	require.Regexp(t, `(?m)^snoozes: +1$`, out)
	require.Regexp(t, `(?m)^scheduled_for: +snooze$`, out)
	require.Regexp(t, `(?m)^\s+1\s+snooze\s+napper\s+\d{4}-`, out, "the snoozed run")
	require.Contains(t, c.ok("status", "-q", "emails", j.ID, "--json"), `"attempt":0,`, "the JSON keeps the count")
}
