package pipeline

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/keys"
	"github.com/conveyorq/conveyor/internal/tracing"
)

// Tracing: the spans of a publish (here) and of an attempt (the worker's), and the trace
// context a job carries in its metadata from its publish to every attempt. README's "Tracing"
// lists the spans, their parents and links, and why tracing off costs no allocation.

// publishTrace is a publish's tracing: its span (nil when no tracer records) and the trace
// context its jobs carry.
type publishTrace struct {
	span trace.Span
	md   map[string]string // traceparent, and tracestate if any
}

// forTask is the trace context task is to carry: the publish's, or nil to leave its metadata
// as it is. Nil means no tracing, or a forward without a span to a task that has its own.
func (pt *publishTrace) forTask(t *Task) map[string]string {
	if pt == nil || pt.span == nil && t.Metadata[tracing.KeyTraceparent] != "" {
		return nil
	}
	return pt.md
}

// startPublish starts the tracing of a publish of one (Enqueue) or many (EnqueueBatch) tasks
// to queue. It returns ctx and nil, allocating nothing, when no tracer records and ctx carries
// no span context.
func (c *Client) startPublish(ctx context.Context, queue string, one *Task, many []Task) (context.Context, *publishTrace) {
	tr := c.tracer.Get()
	if tr == nil {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			return ctx, nil
		}
		pt := &publishTrace{md: make(map[string]string, 2)}
		tracing.Inject(ctx, pt.md)
		return ctx, pt
	}
	parent := ctx
	var links []trace.Link
	if one != nil {
		if sc := taskTrace(one); sc.IsValid() {
			if trace.SpanContextFromContext(ctx).IsValid() {
				links = append(links, trace.Link{SpanContext: sc})
			} else {
				parent = trace.ContextWithRemoteSpanContext(ctx, sc)
			}
		}
	}
	for i := range many {
		if sc := taskTrace(&many[i]); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	attrs := tracing.Messaging(tracing.OpSend, "publish", queue)
	if one == nil {
		attrs = append(attrs, tracing.BatchCount(len(many)))
	}
	ctx, span := tr.Start(parent, "publish "+queue, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrs...), trace.WithLinks(links...))
	pt := &publishTrace{span: span, md: make(map[string]string, 2)}
	tracing.Inject(ctx, pt.md)
	return ctx, pt
}

// taskTrace is the trace context a task's own metadata carries, if any.
func taskTrace(t *Task) trace.SpanContext {
	return tracing.SpanContextOf(t.Metadata[tracing.KeyTraceparent], t.Metadata[tracing.KeyTracestate])
}

// end ends the publish's span, if any, with what the publish came to.
func (pt *publishTrace) end(jobs []*Job, err error) {
	if pt == nil || pt.span == nil {
		return
	}
	if len(jobs) == 1 && jobs[0] != nil {
		pt.span.SetAttributes(tracing.MessageID(jobs[0].ID))
	}
	if err != nil {
		pt.span.RecordError(err)
		pt.span.SetStatus(codes.Error, err.Error())
	}
	pt.span.End()
}

// traceAttempt gives an attempt's context its tracing. That is the process span when a tracer
// records (nil otherwise), else the job's trace context as a remote span context when it
// carries one. A job without trace context under no tracer costs a map lookup.
func (w *Worker) traceAttempt(ctx context.Context, q *keys.Queue, j *Job) (context.Context, trace.Span) {
	tr := w.tracer.Get()
	if tr == nil {
		if j.Metadata[tracing.KeyTraceparent] != "" {
			ctx, _ = tracing.Extract(ctx, j.Metadata)
		}
		return ctx, nil
	}
	return startProcess(ctx, tr, q.Name(), j)
}

// startProcess starts an attempt's process span, child of the job's publish span, and records
// the wait before it (tracing.StartProcess).
func startProcess(ctx context.Context, tr trace.Tracer, queue string, j *Job) (context.Context, trace.Span) {
	return tracing.StartProcess(ctx, tr, tracing.Process{Queue: queue, Group: keys.Group, ID: j.ID, Type: j.Type,
		Attempt: j.Attempt, EnqueuedAt: j.EnqueuedAt, Metadata: j.Metadata})
}

// endAttempt ends an attempt's process span with what runner.End returns: nil (done) or
// the *JobError of every other outcome.
func endAttempt(span trace.Span, err error) {
	var jerr *JobError
	if errors.As(err, &jerr) {
		span.SetAttributes(tracing.AttrOutcome.String(jerr.Outcome.String()))
		if jerr.Err != nil {
			span.RecordError(jerr.Err)
		}
		switch jerr.Outcome {
		case OutcomeRetry:
			span.AddEvent("retry", trace.WithAttributes(tracing.AttrRetryAt.String(jerr.RetryAt.UTC().Format(time.RFC3339Nano))))
			span.SetStatus(codes.Error, errText(jerr))
		case OutcomeDead, OutcomeLost:
			span.SetStatus(codes.Error, errText(jerr))
		}
	} else if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func errText(jerr *JobError) string {
	if jerr.Err != nil {
		return jerr.Err.Error()
	}
	return jerr.Outcome.String()
}
