package tracing

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/conveyorq/conveyor/internal/tracetest"
)

// globalProvider is the provider TestGlobalProvider sets: OpenTelemetry's default provider
// delegates to the first one a process sets and never to another, so every run of the test
// (go test -count=3) sets this same one; a new one a run failed with 0 spans recorded.
var globalProvider = sync.OnceValue(tracetest.NewProvider)

// TestGlobalProvider: a zero Tracer records nothing until the application sets a global
// provider, follows it from then on (tracers handed out before delegate to it), and stops at
// OpenTelemetry's no-op. Not parallel: it sets the process's global provider.
func TestGlobalProvider(t *testing.T) {
	var tr Tracer
	if tr.Get() != nil {
		t.Fatal("a tracer with no provider set")
	}
	tp := globalProvider()
	before := len(tp.GetSpans())
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	got := tr.Get()
	if got == nil {
		t.Fatal("no tracer after otel.SetTracerProvider")
	}
	_, span := got.Start(context.Background(), "s")
	span.End()
	if n := len(tp.GetSpans()) - before; n != 1 {
		t.Fatalf("the global provider recorded %d spans, want 1", n)
	}
	// A provider set after another is followed too. The CLI sets one a Run, and a test runs it
	// many times; the zero Tracer used to follow only the first provider set in the process.
	next := tracetest.NewProvider()
	otel.SetTracerProvider(next)
	_, span = tr.Get().Start(context.Background(), "s")
	span.End()
	if n := len(next.GetSpans()); n != 1 {
		t.Fatalf("the second global provider recorded %d spans, want 1", n)
	}
	otel.SetTracerProvider(noop.NewTracerProvider())
	if tr.Get() != nil {
		t.Fatal("a tracer under the no-op provider")
	}
	if New(noop.NewTracerProvider()).Get() != nil {
		t.Fatal("a tracer of the no-op provider given")
	}
}

// TestTraceContext: what Inject writes, Extract and FromHeaders read back; a malformed
// traceparent is no trace context.
func TestTraceContext(t *testing.T) {
	t.Parallel()
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled})
	md := map[string]string{}
	Inject(trace.ContextWithSpanContext(context.Background(), sc), md)
	if md[KeyTraceparent] != "00-01000000000000000000000000000000-0200000000000000-01" {
		t.Fatalf("traceparent %q", md[KeyTraceparent])
	}
	ctx, ok := Extract(context.Background(), md)
	if got := trace.SpanContextFromContext(ctx); !ok || got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %v, %v", got, ok)
	}
	for _, bad := range []string{"", "nonsense", "00-00000000000000000000000000000000-0200000000000000-01", "00-zz-02-01"} {
		if _, ok := FromHeaders(context.Background(), bad, ""); ok {
			t.Errorf("traceparent %q read as valid", bad)
		}
		if _, ok := Extract(context.Background(), map[string]string{KeyTraceparent: bad}); ok {
			t.Errorf("metadata traceparent %q read as valid", bad)
		}
	}
}
