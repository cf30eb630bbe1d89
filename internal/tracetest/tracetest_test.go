package tracetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// A child started under a span's context is in its trace with it as parent; a root gets a
// trace of its own; WithNewRoot ignores the context's span.
func TestParentAndTrace(t *testing.T) {
	t.Parallel()
	p := NewProvider()
	tr := p.Tracer("scope")
	ctx, root := tr.Start(context.Background(), "root")
	_, child := tr.Start(ctx, "child", trace.WithSpanKind(trace.SpanKindConsumer))
	_, fresh := tr.Start(ctx, "fresh", trace.WithNewRoot())
	if trace.SpanFromContext(ctx) != root {
		t.Fatal("the context does not carry the span")
	}
	for _, s := range []trace.Span{child, fresh, root} {
		s.End()
	}
	got := p.GetSpans()
	if len(got) != 3 || got[0].Name != "child" || got[1].Name != "fresh" || got[2].Name != "root" {
		t.Fatalf("spans %+v, want child, fresh, root in the order they ended", got)
	}
	c, f, r := got[0], got[1], got[2]
	if c.SpanContext.TraceID() != r.SpanContext.TraceID() || c.Parent.SpanID() != r.SpanContext.SpanID() {
		t.Error("the child is not in the root's trace under it")
	}
	if c.SpanContext.SpanID() == r.SpanContext.SpanID() || !c.SpanContext.IsSampled() {
		t.Error("the child's span context")
	}
	if f.Parent.IsValid() || f.SpanContext.TraceID() == r.SpanContext.TraceID() {
		t.Error("WithNewRoot kept the context's span")
	}
	if r.Parent.IsValid() || r.SpanKind != trace.SpanKindInternal || c.SpanKind != trace.SpanKindConsumer {
		t.Errorf("root's parent %v, kinds %v and %v", r.Parent, r.SpanKind, c.SpanKind)
	}
	if r.Scope != "scope" {
		t.Errorf("scope %q", r.Scope)
	}
}

// A remote parent is the parent as it is (remote, trace state); one not sampled makes a span
// that records nothing and carries the trace on unsampled.
func TestRemoteParent(t *testing.T) {
	t.Parallel()
	p := NewProvider()
	ts, err := trace.ParseTraceState("vendor=1")
	if err != nil {
		t.Fatal(err)
	}
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	_, s := p.Tracer("").Start(trace.ContextWithRemoteSpanContext(context.Background(), sampled), "s")
	s.End()
	got := p.GetSpans()[0]
	if !got.Parent.Equal(sampled) || !got.Parent.IsRemote() || got.SpanContext.IsRemote() {
		t.Errorf("parent %v of span %v", got.Parent, got.SpanContext)
	}
	if got.SpanContext.TraceState().String() != "vendor=1" {
		t.Errorf("trace state %q", got.SpanContext.TraceState())
	}

	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{3}, SpanID: trace.SpanID{4}, Remote: true})
	ctx, n := p.Tracer("").Start(trace.ContextWithRemoteSpanContext(context.Background(), unsampled), "n")
	n.SetAttributes(attribute.Int("a", 1))
	n.End()
	sc := trace.SpanContextFromContext(ctx)
	if n.IsRecording() || sc.IsSampled() || sc.TraceID() != unsampled.TraceID() || sc.SpanID() == unsampled.SpanID() {
		t.Errorf("under an unsampled parent: recording %v, span context %v", n.IsRecording(), sc)
	}
	if len(p.GetSpans()) != 1 {
		t.Error("a span under an unsampled parent was kept")
	}
}

// Attributes set twice keep the last value in the first place; invalid ones are dropped.
// Status: Error keeps its description, Ok is final, Unset changes nothing. RecordError adds
// the exception event, nil adds none. Timestamps given are kept. Nothing changes after End.
func TestSpanRecords(t *testing.T) {
	t.Parallel()
	p := NewProvider()
	start := time.Unix(100, 0)
	link := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{7}})
	_, s := p.Tracer("").Start(context.Background(), "s", trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String("k", "1"), attribute.String("j", "x"), attribute.KeyValue{}),
		trace.WithLinks(trace.Link{SpanContext: link}, trace.Link{}))
	s.SetAttributes(attribute.String("k", "2"))
	s.SetStatus(codes.Error, "boom")
	s.SetStatus(codes.Unset, "")
	s.RecordError(errors.New("boom"))
	s.RecordError(nil)
	s.AddEvent("retry", trace.WithAttributes(attribute.Int("n", 1)))
	s.AddLink(trace.Link{SpanContext: link})
	s.SetName("renamed")
	s.End(trace.WithTimestamp(start.Add(time.Second)))
	s.SetAttributes(attribute.String("after", "end"))
	s.SetStatus(codes.Ok, "")
	s.End()

	got := p.GetSpans()
	if len(got) != 1 {
		t.Fatalf("%d spans kept, want 1", len(got))
	}
	g := got[0]
	if g.Name != "renamed" || !g.StartTime.Equal(start) || !g.EndTime.Equal(start.Add(time.Second)) {
		t.Errorf("name %q, start %v, end %v", g.Name, g.StartTime, g.EndTime)
	}
	want := []attribute.KeyValue{attribute.String("k", "2"), attribute.String("j", "x")}
	if len(g.Attributes) != 2 || g.Attributes[0] != want[0] || g.Attributes[1] != want[1] {
		t.Errorf("attributes %v, want %v", g.Attributes, want)
	}
	if g.Status != (Status{Code: codes.Error, Description: "boom"}) {
		t.Errorf("status %+v", g.Status)
	}
	if len(g.Events) != 2 || g.Events[0].Name != "exception" || g.Events[1].Name != "retry" {
		t.Fatalf("events %+v", g.Events)
	}
	ex := map[attribute.Key]string{}
	for _, kv := range g.Events[0].Attributes {
		ex[kv.Key] = kv.Value.AsString()
	}
	if ex["exception.message"] != "boom" || ex["exception.type"] != "*errors.errorString" {
		t.Errorf("exception event %v", ex)
	}
	if len(g.Links) != 2 || !g.Links[0].SpanContext.Equal(link) {
		t.Errorf("links %+v: the empty one dropped, the added one kept", g.Links)
	}

	_, ok := p.Tracer("").Start(context.Background(), "ok")
	ok.SetStatus(codes.Ok, "ignored")
	ok.SetStatus(codes.Error, "late")
	ok.End()
	if st := p.GetSpans()[1].Status; st != (Status{Code: codes.Ok}) {
		t.Errorf("status after Ok then Error: %+v", st)
	}
}

// Spans started and ended on many goroutines are all kept; the discarding provider keeps none.
func TestConcurrentAndDiscard(t *testing.T) {
	t.Parallel()
	p, d := NewProvider(), NewDiscardProvider()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				for _, tp := range []*Provider{p, d} {
					_, s := tp.Tracer("").Start(context.Background(), "s")
					s.SetAttributes(attribute.Int("i", 1))
					s.End()
				}
			}
		})
	}
	wg.Wait()
	if n := len(p.GetSpans()); n != 800 {
		t.Errorf("%d spans kept, want 800", n)
	}
	if n := len(d.GetSpans()); n != 0 {
		t.Errorf("the discarding provider kept %d spans", n)
	}
	p.Reset()
	if n := len(p.GetSpans()); n != 0 {
		t.Errorf("%d spans after Reset", n)
	}
}
