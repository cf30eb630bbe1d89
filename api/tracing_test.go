package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/jobtest"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/tracetest"
	"github.com/conveyorq/conveyor/pipeline"
)

// TestTraceparentHeader: a job POSTed with a W3C traceparent header (one job, or a batch)
// carries it to its handler: the worker's process span is in the header's trace, a child of
// the header's span, and the handler's context carries it. A malformed header is ignored.
func TestTraceparentHeader(t *testing.T) {
	t.Parallel()
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
		header  = "traceparent: 00-" + traceID + "-" + spanID + "-01"
	)
	e := setup(t)
	tp := tracetest.NewProvider()
	handler := make(chan trace.SpanContext, 3)
	w, err := pipeline.NewWorker(redistest.Client(t), pipeline.WorkerConfig{Queues: []string{e.queue}, Prefix: e.prefix,
		TracerProvider: tp})
	require.NoError(t, err)
	w.Handle("echo", func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		if j.Metadata["traceparent"] != "" {
			handler <- trace.SpanContextFromContext(ctx)
		}
		return nil, nil
	})
	jobtest.RunWorker(t, w)

	one := e.post(`{"type":"echo"}`, http.StatusAccepted, header, "tracestate: vendor=1").job(t)
	require.Equal(t, "vendor=1", one.Metadata["tracestate"])
	r := e.do("POST", e.jobs()+":batch", `{"jobs":[{"type":"echo"},{"type":"echo"}]}`, header)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	bad := e.post(`{"type":"echo"}`, http.StatusAccepted, "traceparent: 00-nonsense").job(t)
	require.NotContains(t, bad.Metadata, "traceparent", "a malformed traceparent is ignored")

	for range 3 {
		select {
		case sc := <-handler:
			require.Equal(t, traceID, sc.TraceID().String(), "the handler's span is in the header's trace")
			require.NotEqual(t, spanID, sc.SpanID().String(), "the handler's span is the worker's own")
		case <-time.After(20 * time.Second):
			t.Fatal("the traced jobs did not all run")
		}
	}
	require.Eventually(t, func() bool {
		n := 0
		for _, s := range tp.GetSpans() {
			if s.Name == "process "+e.queue && s.Parent.TraceID().String() == traceID {
				require.Equal(t, spanID, s.Parent.SpanID().String(), "the header's span is the attempt's parent")
				n++
			}
		}
		return n == 3
	}, 20*time.Second, 2*time.Millisecond)
}
