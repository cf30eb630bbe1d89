package pipeline

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/redistest"
	"github.com/conveyorq/conveyor/internal/tracetest"
	"github.com/conveyorq/conveyor/internal/tracing"
)

// tracingHooks runs what tracing adds to a publish and to an attempt, with tracer t: the
// publish's start and the trace context its task gets, the attempt's context and its end.
func tracingHooks(t tracing.Tracer, ctx context.Context, task *Task, q *keys.Queue, j *Job) {
	c := Client{tracer: t}
	pctx, pt := c.startPublish(ctx, q.Name(), task, nil)
	if tc := pt.forTask(task); tc != nil {
		j.Metadata = tc
	}
	if pt != nil {
		pt.end(nil, nil)
	}
	w := Worker{tracer: t}
	_, span := w.traceAttempt(pctx, q, j)
	if span != nil {
		endAttempt(span, nil)
	}
}

// TestTracingOffAllocatesNothing: without a tracer provider (none given, the global one unset,
// or OpenTelemetry's no-op) and without a span in the caller's context, tracing adds not one
// allocation to a publish or an attempt, and no metadata.
func TestTracingOffAllocatesNothing(t *testing.T) {
	q := keys.New(keys.DefaultPrefix, "q")
	for name, tr := range map[string]tracing.Tracer{
		"Default": tracing.New(nil),
		"Noop":    tracing.New(noop.NewTracerProvider()),
	} {
		t.Run(name, func(t *testing.T) {
			require := func(cond bool, msg string) {
				t.Helper()
				if !cond {
					t.Fatal(msg)
				}
			}
			task := Task{Type: "t"}
			j := &Job{ID: "01J", Type: "t", Attempt: 1}
			ctx := context.Background()
			allocs := testing.AllocsPerRun(1000, func() { tracingHooks(tr, ctx, &task, &q, j) })
			require(allocs == 0, "tracing off allocates")
			require(j.Metadata == nil, "tracing off added metadata")
			require(tr.Get() == nil, "a tracer without a provider")
		})
	}
}

// BenchmarkTracing is the cost tracing adds to a publish and an attempt (without Redis):
// Off (no provider, no span: 0 allocs, see TestTracingOffAllocatesNothing), Forward (no
// provider, the caller's context carries a span context that the job carries on) and On (a
// provider that samples everything and keeps nothing: tracetest's discarding one).
func BenchmarkTracing(b *testing.B) {
	q := keys.New(keys.DefaultPrefix, "q")
	remote := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
	tp := tracetest.NewDiscardProvider()
	for _, bc := range []struct {
		name string
		tr   tracing.Tracer
		ctx  context.Context
	}{
		{"Off", tracing.New(nil), context.Background()},
		{"Forward", tracing.New(nil), remote},
		{"On", tracing.New(tp), context.Background()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			task := Task{Type: "t"}
			for b.Loop() {
				j := Job{ID: "01J", Type: "t", Attempt: 1}
				tracingHooks(bc.tr, bc.ctx, &task, &q, &j)
			}
		})
	}
}

// TestEnqueueTracingOffAllocatesNothingMore: on real Redis, Enqueue with no tracer provider
// allocates what its untraced core (enqueue) allocates, not one allocation more: the task
// stays on the stack and no metadata is made.
func TestEnqueueTracingOffAllocatesNothingMore(t *testing.T) {
	c, err := NewClient(redistest.Client(t), ClientConfig{})
	require.NoError(t, err)
	queue := redistest.UniqueName(t)
	ctx := context.Background()
	task := Task{Type: "t", Payload: []byte("p")}
	_, err = c.Enqueue(ctx, queue, task) // registers the queue and warms the connection
	require.NoError(t, err)
	measure := func(f func()) float64 {
		best := -1.0
		for range 3 { // the least of three: go-redis's pool may allocate now and then
			if n := testing.AllocsPerRun(200, f); best < 0 || n < best {
				best = n
			}
		}
		return best
	}
	core := measure(func() { _, _ = c.enqueue(ctx, queue, &task, nil, nil) })
	full := measure(func() { _, _ = c.Enqueue(ctx, queue, task) })
	require.LessOrEqual(t, full, core, "Enqueue without tracing allocates more than its core")
	t.Logf("allocations per Enqueue: %.0f (its core: %.0f)", full, core)
}
