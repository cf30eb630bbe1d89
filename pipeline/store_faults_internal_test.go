package pipeline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/conveyorq/conveyor/internal/jobstate"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/status"
)

// failingStore is a store that fails its next Finish of an outcome when asked to, as asynq's
// testbroker fails its broker's calls: the worker is tested against the store's answer, not a
// server's misbehaviour.
type failingStore struct {
	jobstate.Backend
	failNext atomic.Bool
	failed   chan struct{} // closed by the failed call
}

func (s *failingStore) Finish(ctx context.Context, p jobstate.FinishParams) []jobstate.Finished {
	outcome := false
	for _, c := range p.Chunks {
		for _, t := range c {
			outcome = outcome || t.Op != jobstate.OpStart
		}
	}
	if !outcome || !s.failNext.CompareAndSwap(true, false) {
		return s.Backend.Finish(ctx, p)
	}
	out := make([]jobstate.Finished, len(p.Chunks))
	for i := range out {
		out[i].Err = errors.New("simulated: the store refused the write")
	}
	close(s.failed)
	return out
}

// An outcome whose write the store refuses once is written again: the job completes, once,
// and its handler ran once.
func TestWorkerOutcomeSurvivesFailedFinish(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	queue := redistest.UniqueName(t)
	ctx := t.Context()
	producer, err := NewClient(rdb, ClientConfig{})
	require.NoError(t, err)

	w, err := NewWorker(rdb, WorkerConfig{Queues: []string{queue}, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	require.NoError(t, err)
	fs := &failingStore{Backend: w.store, failed: make(chan struct{})}
	fs.failNext.Store(true)
	w.store = fs
	var ran atomic.Int64
	w.Handle("t", func(context.Context, *Job) ([]byte, error) {
		ran.Add(1)
		return []byte("done"), nil
	})
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	<-w.Ready()

	j, err := producer.Enqueue(ctx, queue, Task{Type: "t"})
	require.NoError(t, err)
	<-fs.failed
	got, err := producer.Wait(ctx, queue, j.ID)
	require.NoError(t, err)
	require.Equal(t, status.Completed, got.Status)
	require.Equal(t, []byte("done"), got.Result)
	require.EqualValues(t, 1, ran.Load(), "the outcome was written again, not the job run again")
	st, err := producer.Stats(ctx, queue)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Completed)
}
