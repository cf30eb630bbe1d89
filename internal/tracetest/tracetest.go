// Package tracetest is an OpenTelemetry tracer provider for tests that keeps its spans in
// memory. It stands in for the SDK's provider with tracetest's in-memory exporter, so the
// library's go.mod needs no SDK; users and the binary bring their own.
//
// It does what the tests look at as the SDK does. A span's trace and parent come from the
// context. Sampling follows the parent, as the SDK's default sampler does: under a parent that
// is not sampled, a span records nothing. A kind left unset is internal. An attribute set twice
// keeps the last value. An Ok status is final; an Error one keeps its description. RecordError
// adds an "exception" event. A span is kept once, when it ends.
package tracetest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// SpanStub is an ended span: what the SDK's tracetest.SpanStub holds that the tests read.
type SpanStub struct {
	Name        string
	SpanContext trace.SpanContext
	// Parent is the span context the span started under, remote or not; zero for a root.
	Parent     trace.SpanContext
	SpanKind   trace.SpanKind
	StartTime  time.Time
	EndTime    time.Time
	Attributes []attribute.KeyValue
	Events     []Event
	Links      []trace.Link
	Status     Status
	// Scope is the name the span's tracer was asked for with.
	Scope string
}

// SpanStubs are spans in the order they ended.
type SpanStubs []SpanStub

// Event is a span's event.
type Event struct {
	Name       string
	Time       time.Time
	Attributes []attribute.KeyValue
}

// Status is a span's status.
type Status struct {
	Code        codes.Code
	Description string
}

// Provider is a trace.TracerProvider that keeps every span that ends.
type Provider struct {
	embedded.TracerProvider
	keep bool

	mu    sync.Mutex
	ended SpanStubs
}

// NewProvider returns a Provider that keeps its ended spans for GetSpans.
func NewProvider() *Provider { return &Provider{keep: true} }

// NewDiscardProvider returns a Provider that records spans, as one that exports would, and
// forgets them when they end: for benchmarks.
func NewDiscardProvider() *Provider { return &Provider{} }

// GetSpans returns a copy of the spans that ended, in the order they ended.
func (p *Provider) GetSpans() SpanStubs {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ended)
}

// Reset forgets the spans that ended.
func (p *Provider) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = nil
}

// Tracer returns a tracer whose spans p keeps.
func (p *Provider) Tracer(name string, _ ...trace.TracerOption) trace.Tracer {
	return &tracer{p: p, scope: name}
}

type tracer struct {
	embedded.Tracer
	p     *Provider
	scope string
}

// Start starts a span under the span context of ctx, unless trace.WithNewRoot says not to.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	var parent trace.SpanContext
	if !cfg.NewRoot() {
		parent = trace.SpanContextFromContext(ctx)
	}
	scc := trace.SpanContextConfig{SpanID: newSpanID(), TraceFlags: trace.FlagsSampled}
	if parent.IsValid() {
		scc.TraceID, scc.TraceState = parent.TraceID(), parent.TraceState()
		if !parent.IsSampled() {
			// The SDK's default sampler follows the parent: a span that records nothing.
			scc.TraceFlags = 0
			nr := nonRecording{sc: trace.NewSpanContext(scc), p: t.p}
			return trace.ContextWithSpan(ctx, nr), nr
		}
	} else {
		scc.TraceID = newTraceID()
	}
	start := cfg.Timestamp()
	if start.IsZero() {
		start = time.Now()
	}
	s := &span{p: t.p, stub: SpanStub{Name: name, SpanContext: trace.NewSpanContext(scc), Parent: parent,
		SpanKind: trace.ValidateSpanKind(cfg.SpanKind()), StartTime: start, Scope: t.scope}}
	s.setAttributes(cfg.Attributes())
	for _, l := range cfg.Links() {
		s.addLink(l)
	}
	return trace.ContextWithSpan(ctx, s), s
}

// newTraceID and newSpanID draw random ids, as the SDK's default generator does; never the
// invalid zero.
func newTraceID() (id trace.TraceID) {
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

func newSpanID() (id trace.SpanID) {
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// span is a recording span; its methods do nothing once it ended.
type span struct {
	embedded.Span
	p *Provider

	mu    sync.Mutex
	stub  SpanStub
	ended bool
}

func (s *span) SpanContext() trace.SpanContext { return s.stub.SpanContext }

func (s *span) TracerProvider() trace.TracerProvider { return s.p }

func (s *span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// End ends the span at the trace.WithTimestamp given, or now, and hands it to its provider.
func (s *span) End(opts ...trace.SpanEndOption) {
	cfg := trace.NewSpanEndConfig(opts...)
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.stub.EndTime = cfg.Timestamp()
	if s.stub.EndTime.IsZero() {
		s.stub.EndTime = time.Now()
	}
	stub := s.stub
	s.mu.Unlock()
	if s.p.keep {
		s.p.mu.Lock()
		s.p.ended = append(s.p.ended, stub)
		s.p.mu.Unlock()
	}
}

func (s *span) AddEvent(name string, opts ...trace.EventOption) {
	cfg := trace.NewEventConfig(opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.stub.Events = append(s.stub.Events, Event{Name: name, Time: cfg.Timestamp(), Attributes: valid(cfg.Attributes())})
	}
}

// RecordError adds the SDK's "exception" event: the error's type and message.
func (s *span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	opts = append(opts, trace.WithAttributes(attribute.String("exception.type", typeName(err)),
		attribute.String("exception.message", err.Error())))
	s.AddEvent("exception", opts...)
}

// typeName names err's type as the SDK does: its package path and name, or how Go prints an
// unnamed type.
func typeName(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return fmt.Sprintf("%s.%s", t.PkgPath(), t.Name())
}

// SetStatus sets the status unless it is Ok already or code ranks lower: Unset, Error, Ok.
// Only an Error status keeps its description.
func (s *span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.stub.Status.Code > code {
		return
	}
	st := Status{Code: code}
	if code == codes.Error {
		st.Description = description
	}
	s.stub.Status = st
}

func (s *span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.stub.Name = name
	}
}

func (s *span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.setAttributes(kv)
	}
}

// setAttributes sets each valid attribute, a key already set keeping its place.
func (s *span) setAttributes(kv []attribute.KeyValue) {
	for _, a := range valid(kv) {
		i := slices.IndexFunc(s.stub.Attributes, func(b attribute.KeyValue) bool { return b.Key == a.Key })
		if i >= 0 {
			s.stub.Attributes[i] = a
		} else {
			s.stub.Attributes = append(s.stub.Attributes, a)
		}
	}
}

func (s *span) AddLink(l trace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.addLink(l)
	}
}

// addLink keeps a link as the SDK does: not one without a valid span context, attributes or
// trace state.
func (s *span) addLink(l trace.Link) {
	if !l.SpanContext.IsValid() && len(l.Attributes) == 0 && l.SpanContext.TraceState().Len() == 0 {
		return
	}
	l.Attributes = valid(l.Attributes)
	s.stub.Links = append(s.stub.Links, l)
}

// valid drops the attributes the SDK drops: an empty key, or a value of no type.
func valid(kv []attribute.KeyValue) []attribute.KeyValue {
	var out []attribute.KeyValue
	for _, a := range kv {
		if a.Valid() {
			out = append(out, a)
		}
	}
	return out
}

// nonRecording is the span of a parent that is not sampled: it carries its span context on
// and records nothing.
type nonRecording struct {
	embedded.Span
	sc trace.SpanContext
	p  *Provider
}

func (n nonRecording) SpanContext() trace.SpanContext        { return n.sc }
func (n nonRecording) TracerProvider() trace.TracerProvider  { return n.p }
func (nonRecording) IsRecording() bool                       { return false }
func (nonRecording) End(...trace.SpanEndOption)              {}
func (nonRecording) AddEvent(string, ...trace.EventOption)   {}
func (nonRecording) AddLink(trace.Link)                      {}
func (nonRecording) RecordError(error, ...trace.EventOption) {}
func (nonRecording) SetStatus(codes.Code, string)            {}
func (nonRecording) SetName(string)                          {}
func (nonRecording) SetAttributes(...attribute.KeyValue)     {}
