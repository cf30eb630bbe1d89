package api_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/status"
)

// GET /v1/queues/{queue}/jobs/{id}/logs answers a job's lines by attempt, an empty list for a
// job that logged nothing, and 404 for no such job.
func TestJobLogsAPI(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w, err := pipeline.NewWorker(redistest.Client(t), pipeline.WorkerConfig{Queues: []string{e.queue}, Prefix: e.prefix,
		Backoff: pipeline.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
		Logger:  zerolog.New(e.log).Level(zerolog.WarnLevel)})
	require.NoError(t, err)
	w.Handle("logs", func(_ context.Context, j *pipeline.Job) ([]byte, error) {
		j.Logf("attempt %d", j.Attempt)
		if j.Attempt == 1 {
			return nil, errors.New("again")
		}
		return nil, nil
	})
	w.Handle("quiet", func(context.Context, *pipeline.Job) ([]byte, error) { return nil, nil })
	jobtest.RunWorker(t, w)

	ctx := t.Context()
	logged, err := e.client.Enqueue(ctx, e.queue, pipeline.Task{Type: "logs"}, pipeline.WithMaxRetries(2))
	require.NoError(t, err)
	quiet, err := e.client.Enqueue(ctx, e.queue, pipeline.Task{Type: "quiet"})
	require.NoError(t, err)
	for _, id := range []string{logged.ID, quiet.ID} {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := e.client.Wait(wctx, e.queue, id)
		cancel()
		require.NoError(t, err)
	}

	var body struct {
		ID    string `json:"id"`
		Queue string `json:"queue"`
		Logs  []struct {
			Attempt int      `json:"attempt"`
			Outcome string   `json:"outcome"`
			EndedAt int64    `json:"ended_at"`
			Cut     int      `json:"cut"`
			Lines   []string `json:"lines"`
		} `json:"logs"`
	}
	r := e.do("GET", e.jobs()+"/"+logged.ID+"/logs", "")
	require.Equal(t, 200, r.status, "%s", r.body)
	r.json(t, &body)
	require.Equal(t, logged.ID, body.ID)
	require.Equal(t, e.queue, body.Queue)
	require.Len(t, body.Logs, 2)
	require.Equal(t, status.AttemptRetried, body.Logs[0].Outcome)
	require.Equal(t, status.AttemptCompleted, body.Logs[1].Outcome)
	require.Equal(t, 2, body.Logs[1].Attempt)
	require.Len(t, body.Logs[1].Lines, 1)
	require.Contains(t, body.Logs[1].Lines[0], `"message":"attempt 2"`)
	require.NotZero(t, body.Logs[1].EndedAt)

	r = e.do("GET", e.jobs()+"/"+quiet.ID+"/logs", "")
	require.Equal(t, 200, r.status, "%s", r.body)
	require.JSONEq(t, `{"id":"`+quiet.ID+`","queue":"`+e.queue+`","logs":[]}`, string(r.body))

	r = e.do("GET", e.jobs()+"/no-such-job/logs", "")
	require.Equal(t, 404, r.status, "%s", r.body)
}
