package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/pipeline"
)

// Issue 19 through the HTTP API: DELETE of a running job answers it canceled, and its handler,
// in a worker on a client of its own, has its context cancelled by the cancel's event (the
// worker's lease renewal, every 20 s here, is not what stops it).
func TestCancelRunning(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w, err := pipeline.NewWorker(redistest.Client(t), pipeline.WorkerConfig{Queues: []string{e.queue}, Prefix: e.prefix,
		VisibilityTimeout: time.Minute, Logger: zerolog.New(e.log).Level(zerolog.InfoLevel)})
	require.NoError(t, err)
	started := make(chan struct{}, 1)
	cause := make(chan error, 1)
	w.Handle("block", func(ctx context.Context, _ *pipeline.Job) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return []byte(`"late"`), nil // a result after the cancel is discarded
	})
	jobtest.RunWorker(t, w)

	id := e.post(`{"type":"block"}`, http.StatusAccepted).job(t).ID
	<-started
	r := e.do("DELETE", e.jobs()+"/"+id, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, "canceled", r.job(t).Status)
	select {
	case err := <-cause:
		require.ErrorIs(t, err, pipeline.ErrJobCanceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end")
	}
	require.Eventually(t, func() bool { return w.Running() == 0 }, 10*time.Second, time.Millisecond)
	r = e.do("GET", e.jobs()+"/"+id, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	j := r.job(t)
	require.Equal(t, "canceled", j.Status)
	require.Contains(t, []string{"", "null"}, string(j.Result), "the late result is not kept")
}
