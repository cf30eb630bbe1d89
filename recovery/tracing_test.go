package recovery_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/tracetest"
	"github.com/conveyorq/conveyor/pipeline"
	"github.com/conveyorq/conveyor/recovery"
)

// TestRecovererTraces: each traced job a scan puts back or sends to the dead set gets a
// "recover <queue>" span of the recoverer's, linked to the trace context the job carries
// (tracestate included); a job without one gets none.
func TestRecovererTraces(t *testing.T) {
	t.Parallel()
	tp := tracetest.NewProvider()
	r, b := setup(t, setupOpts{cfg: recovery.Config{TracerProvider: tp}})

	ts, err := trace.ParseTraceState("vendor=1")
	require.NoError(t, err)
	publish := func(n byte, opts ...pipeline.Option) (trace.SpanContext, *pipeline.Job) {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{n}, SpanID: trace.SpanID{n},
			TraceFlags: trace.FlagsSampled, TraceState: ts})
		j, err := b.client.Enqueue(trace.ContextWithRemoteSpanContext(t.Context(), sc), b.queue,
			pipeline.Task{Type: "test", Metadata: map[string]string{"k": "v"}}, opts...)
		require.NoError(t, err)
		return sc, j
	}
	requeued, j1 := publish(1)
	dead, j2 := publish(2, pipeline.WithMaxRetries(0))
	plain := b.enqueue(t)
	b.makeIdle(t, "lost", deadIdle, b.deliver(t, "lost", 3)...)

	res, _, err := r.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, recovery.Result{Requeued: 2, Dead: 1}, res)

	got := map[string]tracetest.SpanStub{}
	for _, s := range tp.GetSpans() {
		require.Equal(t, "recover "+b.queue, s.Name)
		require.Equal(t, trace.SpanKindProducer, s.SpanKind)
		for _, kv := range s.Attributes {
			if kv.Key == "messaging.message.id" {
				got[kv.Value.AsString()] = s
			}
		}
	}
	require.Len(t, got, 2, "one span per traced job")
	require.NotContains(t, got, plain.ID, "a job without trace context has no recover span")
	for id, want := range map[string]struct {
		sc      trace.SpanContext
		outcome string
	}{j1.ID: {requeued, "queued"}, j2.ID: {dead, "failed"}} {
		s := got[id]
		require.Len(t, s.Links, 1)
		require.True(t, want.sc.WithRemote(true).Equal(s.Links[0].SpanContext), "%v", s.Links[0].SpanContext)
		require.Equal(t, "vendor=1", s.Links[0].SpanContext.TraceState().String())
		require.NotEqual(t, want.sc.TraceID(), s.SpanContext.TraceID(), "the span is the recoverer's own")
		var outcome string
		for _, kv := range s.Attributes {
			if kv.Key == "conveyor.recovery.outcome" {
				outcome = kv.Value.AsString()
			}
		}
		require.Equal(t, want.outcome, outcome)
	}
}
