package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/conveyorq/conveyor/internal/tracetest"
	"github.com/conveyorq/conveyor/pipeline"
)

// Trace a job from its publish to its handler. Any OpenTelemetry tracer provider works: in
// production the SDK's (go.opentelemetry.io/otel/sdk/trace) with an OTLP exporter. This one, a
// test helper of Conveyor's, keeps the spans in memory. Set it on the Client and
// the Worker, or once globally with otel.SetTracerProvider, which both follow by default.
func Example_tracing() {
	rdb, done := exampleRedis()
	defer done()
	ctx := context.Background()

	tp := tracetest.NewProvider()

	client, err := pipeline.NewClient(rdb, pipeline.ClientConfig{TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	// The publish span is a child of the caller's span (an HTTP request's, say).
	reqCtx, request := tp.Tracer("shop").Start(ctx, "POST /orders")
	if _, err := client.Enqueue(reqCtx, "emails", pipeline.Task{Type: "receipt"}); err != nil {
		panic(err)
	}
	request.End()

	worker, err := pipeline.NewWorker(rdb, pipeline.WorkerConfig{Queues: []string{"emails"}, TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	sameTrace := make(chan bool, 1)
	worker.Handle("receipt", func(ctx context.Context, j *pipeline.Job) ([]byte, error) {
		// The handler's context carries its attempt's span: spans it starts, and calls made
		// with otelhttp or redisotel, join the request's trace.
		sameTrace <- trace.SpanContextFromContext(ctx).TraceID() == request.SpanContext().TraceID()
		return nil, nil
	})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go worker.Run(wctx)
	fmt.Println("handler in the request's trace:", <-sameTrace)

	// The attempt's span ends once its outcome is written.
	for len(tp.GetSpans()) < 4 {
		time.Sleep(10 * time.Millisecond)
	}
	byID := map[trace.SpanID]string{}
	for _, s := range tp.GetSpans() {
		byID[s.SpanContext.SpanID()] = s.Name
	}
	for _, s := range tp.GetSpans() {
		fmt.Printf("%s (%s, parent %q)\n", s.Name, s.SpanKind, byID[s.Parent.SpanID()])
	}
	// Unordered output:
	// handler in the request's trace: true
	// publish emails (producer, parent "POST /orders")
	// POST /orders (internal, parent "")
	// wait emails (internal, parent "publish emails")
	// process emails (consumer, parent "publish emails")
}
