// Package tracing is what pipeline and recovery share of OpenTelemetry. It holds the tracer that
// a configured (or the global) provider gives. It holds the fast path that keeps tracing free
// when no provider is set. It reads and writes the W3C trace context in a job's metadata, and
// names the messaging attributes.
//
// Free when off: Tracer.Get is an atomic load and a comparison when no provider was set. The
// global provider is then still OpenTelemetry's default, which records nothing. The callers
// touch a job's metadata only when a tracer is on, or when the context already carries a valid
// span context. They forward such a context without recording.
package tracing

import (
	"context"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/conveyorq/conveyor/internal/keys"
)

// ScopeName is the instrumentation scope of Conveyor's spans.
const ScopeName = "github.com/conveyorq/conveyor"

// System is the value of messaging.system on Conveyor's spans.
const System = "conveyor"

// The metadata keys of a job's W3C trace context: the header names of Trace Context.
const (
	KeyTraceparent = keys.EntryTraceparent
	KeyTracestate  = "tracestate"
	// KeyTracelinks holds the traceparents of the process spans a workflow task's own process
	// span links to: its dependencies' (written by the script that released it).
	KeyTracelinks = keys.EntryTracelinks
)

// Traceparent is the W3C traceparent of the span context of ctx, or "" when it has none
// (tracing off: a context lookup, no allocation).
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	md := make(map[string]string, 2)
	propagator.Inject(ctx, propagation.MapCarrier(md))
	return md[KeyTraceparent]
}

// Links are the span links of a job's KeyTracelinks value (space-separated traceparents); the
// malformed ones are skipped.
func Links(v string) []trace.Link {
	var out []trace.Link
	for _, tp := range strings.Fields(v) {
		if sc := SpanContextOf(tp, ""); sc.IsValid() {
			out = append(out, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrLinkDependency}})
		}
	}
	return out
}

// Attribute keys of Conveyor's own, beside the messaging semantic conventions'.
const (
	AttrAttempt  = attribute.Key("conveyor.job.attempt")  // the attempt's number, 1 for the first run
	AttrType     = attribute.Key("conveyor.job.type")     // the job's type
	AttrOutcome  = attribute.Key("conveyor.job.outcome")  // what the attempt came to: retry, dead, snoozed, ...
	AttrRetryAt  = attribute.Key("conveyor.job.retry_at") // when a failed attempt's retry is due (RFC 3339)
	AttrWaitMS   = attribute.Key("conveyor.job.wait_ms")  // time in the stream before the attempt started
	AttrWorker   = attribute.Key("conveyor.worker")       // the worker (stream consumer) of the lost attempt
	AttrRecovery = attribute.Key("conveyor.recovery.outcome")
)

// AttrLinkDependency marks a process span's link to the process span of a workflow task it
// waited for.
var AttrLinkDependency = attribute.String("conveyor.link", "dependency")

// propagator is the one format Conveyor carries: W3C Trace Context, whatever the global
// propagator is (OpenTelemetry's default global propagator carries nothing).
var propagator = propagation.TraceContext{}

// initial is OpenTelemetry's global provider as it is before an application sets one: it
// records nothing. Read at package init, before any main can set another.
var initial = otel.GetTracerProvider()

// last is the global provider a zero Tracer saw last, with its tracer. OpenTelemetry's
// default provider delegates to the first provider set only; a later one (the CLI sets one a
// Run) must be asked for its own tracer.
var last atomic.Pointer[providerTracer]

type providerTracer struct {
	p  trace.TracerProvider
	tr trace.Tracer
}

// tracerOf returns p's tracer, asking p only when it is not the provider seen last.
func tracerOf(p trace.TracerProvider) trace.Tracer {
	if c := last.Load(); c != nil && same(c.p, p) {
		return c.tr
	}
	c := &providerTracer{p: p, tr: p.Tracer(ScopeName)}
	last.Store(c)
	return c.tr
}

// same reports whether a and b are one provider. A provider of a type == cannot compare
// (a struct holding a slice) is never the same: == on it would panic.
func same(a, b trace.TracerProvider) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// Tracer resolves a configured tracer provider: the one given, or, when none was, the global
// one as it is at each call. The zero value follows the global provider.
type Tracer struct {
	tr       trace.Tracer
	explicit bool
}

// New returns the Tracer of tp; nil tp follows the global provider.
func New(tp trace.TracerProvider) Tracer {
	if tp == nil {
		return Tracer{}
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return Tracer{explicit: true}
	}
	return Tracer{tr: tp.Tracer(ScopeName), explicit: true}
}

// Get returns the tracer to record spans with, or nil when no provider records. That is when
// none was given and the application set no global one, or the one set is OpenTelemetry's no-op.
// It allocates nothing.
func (t Tracer) Get() trace.Tracer {
	if t.explicit {
		return t.tr
	}
	p := otel.GetTracerProvider()
	if _, ok := p.(noop.TracerProvider); ok || p == initial {
		return nil
	}
	return tracerOf(p)
}

// Inject writes the span context of ctx into md as W3C traceparent (and tracestate, when it
// has one).
func Inject(ctx context.Context, md map[string]string) {
	propagator.Inject(ctx, propagation.MapCarrier(md))
}

// Extract returns ctx with the remote span context that md carries (traceparent), and whether
// md carried a valid one.
func Extract(ctx context.Context, md map[string]string) (context.Context, bool) {
	if md[KeyTraceparent] == "" {
		return ctx, false
	}
	out := propagator.Extract(ctx, propagation.MapCarrier(md))
	return out, trace.SpanContextFromContext(out).IsValid()
}

// SpanContextOf reads the W3C trace context traceparent and tracestate; the zero SpanContext
// when traceparent is not valid.
func SpanContextOf(traceparent, tracestate string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	md := map[string]string{KeyTraceparent: traceparent}
	if tracestate != "" {
		md[KeyTracestate] = tracestate
	}
	return trace.SpanContextFromContext(propagator.Extract(context.Background(), propagation.MapCarrier(md)))
}

// FromHeaders returns ctx with the remote span context of W3C traceparent and tracestate values,
// such as an HTTP request's headers or a CLI flag. It returns ctx unchanged when traceparent is
// empty or not valid: the Trace Context specification has a receiver ignore a malformed one. ok
// reports whether it was valid.
func FromHeaders(ctx context.Context, traceparent, tracestate string) (context.Context, bool) {
	sc := SpanContextOf(traceparent, tracestate)
	if !sc.IsValid() {
		return ctx, false
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc), true
}

// Messaging returns the messaging attributes of an operation on queue.
func Messaging(opType attribute.KeyValue, opName, queue string) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKey.String(System),
		opType,
		semconv.MessagingOperationName(opName),
		semconv.MessagingDestinationName(queue),
	}
}

// SystemAttr is the messaging.system attribute.
var SystemAttr = semconv.MessagingSystemKey.String(System)

// Destination is the messaging.destination.name attribute: a queue's name.
func Destination(queue string) attribute.KeyValue { return semconv.MessagingDestinationName(queue) }

// MessageID is the messaging.message.id attribute: a job's id.
func MessageID(id string) attribute.KeyValue { return semconv.MessagingMessageID(id) }

// BatchCount is the messaging.batch.message_count attribute.
func BatchCount(n int) attribute.KeyValue { return semconv.MessagingBatchMessageCount(n) }

// ConsumerGroup is the messaging.consumer.group.name attribute.
func ConsumerGroup(g string) attribute.KeyValue { return semconv.MessagingConsumerGroupName(g) }

// The messaging.operation.type values Conveyor uses.
var (
	OpSend    = semconv.MessagingOperationTypeSend
	OpProcess = semconv.MessagingOperationTypeProcess
)

// ErrorType is the error.type attribute.
func ErrorType(t string) attribute.KeyValue { return semconv.ErrorTypeKey.String(t) }

// Process is what an attempt's process span says of its job.
type Process struct {
	Queue, Group, ID, Type string
	Attempt                int
	EnqueuedAt             time.Time
	Metadata               map[string]string // the job's: its trace context and links
}

// StartProcess starts an attempt's CONSUMER span "process <queue>", child of the job's publish
// span. When the job carries a trace context it first records the INTERNAL span "wait <queue>",
// from the job's entry to now.
func StartProcess(ctx context.Context, tr trace.Tracer, p Process) (context.Context, trace.Span) {
	parent, traced := Extract(ctx, p.Metadata)
	now := time.Now()
	wait := time.Duration(0)
	if !p.EnqueuedAt.IsZero() && p.EnqueuedAt.Before(now) {
		wait = now.Sub(p.EnqueuedAt)
	}
	if traced { // zero long when the clocks of Redis and the worker disagree
		_, ws := tr.Start(parent, "wait "+p.Queue, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithTimestamp(now.Add(-wait)), trace.WithAttributes(
				SystemAttr, Destination(p.Queue), MessageID(p.ID), AttrAttempt.Int(p.Attempt)))
		ws.End(trace.WithTimestamp(now))
	}
	attrs := append(Messaging(OpProcess, "process", p.Queue),
		MessageID(p.ID), ConsumerGroup(p.Group),
		AttrAttempt.Int(p.Attempt), AttrType.String(p.Type),
		AttrWaitMS.Int64(wait.Milliseconds()))
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(now), trace.WithAttributes(attrs...)}
	if v := p.Metadata[KeyTracelinks]; v != "" {
		// A workflow's task: linked to the process spans of the tasks it waited for.
		opts = append(opts, trace.WithLinks(Links(v)...))
	}
	return tr.Start(parent, "process "+p.Queue, opts...)
}
