package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The OpenTelemetry variables the command reads itself; the exporter reads the rest of
// OTEL_EXPORTER_OTLP_* (headers, timeout, compression, certificates) and the SDK reads
// OTEL_TRACES_SAMPLER, OTEL_BSP_* and OTEL_RESOURCE_ATTRIBUTES.
const (
	envOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envOTLPProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envOTLPTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envOTelSDKDisabled    = "OTEL_SDK_DISABLED"
	envOTelTracesExporter = "OTEL_TRACES_EXPORTER"
)

// tracingShutdownTimeout bounds the flush of the last spans when the command ends: a
// collector that does not answer must not hold up the exit.
const tracingShutdownTimeout = 5 * time.Second

// otlpWanted reports whether the environment asks for spans to be exported: an OTLP
// endpoint is set and neither the SDK nor the traces exporter is switched off. Without an
// endpoint the command exports nothing, so an unconfigured run never dials a collector.
func otlpWanted(getenv func(string) string) bool {
	if getenv(envOTLPEndpoint) == "" && getenv(envOTLPTracesEndpoint) == "" {
		return false
	}
	if strings.EqualFold(strings.TrimSpace(getenv(envOTelSDKDisabled)), "true") {
		return false
	}
	return !strings.EqualFold(strings.TrimSpace(getenv(envOTelTracesExporter)), "none")
}

// otlpProtocol is the OTLP protocol the environment names for traces, http/protobuf when
// none: the specification's default, and the one protocol the binary carries.
func otlpProtocol(getenv func(string) string) (protocol, from string) {
	if p := getenv(envOTLPTracesProtocol); p != "" {
		return p, envOTLPTracesProtocol
	}
	if p := getenv(envOTLPProtocol); p != "" {
		return p, envOTLPProtocol
	}
	return "http/protobuf", ""
}

// setupTracing makes the spans the library records (publish, process, recovery) leave the
// process when OTEL_EXPORTER_OTLP_* asks for it. The provider becomes OpenTelemetry's global
// one, which the library's clients and workers use when given none; app.close flushes it and
// puts back the provider it replaced. A variable the binary cannot honour is warned about and
// exporting stays off: tracing is never a reason for a worker not to run.
func (a *app) setupTracing(ctx context.Context) error {
	if !otlpWanted(a.getenv) {
		return nil
	}
	if p, from := otlpProtocol(a.getenv); p != "http/protobuf" {
		fmt.Fprintf(a.stderr, "conveyor: ignoring $%s %q: this binary exports OTLP over http/protobuf only; no spans are exported\n", from, p)
		return nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return fmt.Errorf("OTLP exporter: %w", err)
	}
	// The name first, the environment after: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override it.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "conveyor")),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil {
		return fmt.Errorf("OTLP exporter: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	log := a.log
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn().Err(err).Msg("OpenTelemetry")
	}))
	a.stopTracing = func() {
		sctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			fmt.Fprintf(a.stderr, "conveyor: exporting the last spans: %v\n", err)
		}
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	}
	return nil
}

// fromTraceHeaders returns ctx with the remote span context of W3C traceparent and
// tracestate values, or ctx unchanged when traceparent is empty or not valid; ok reports
// whether it was valid. The Trace Context specification has a receiver ignore a malformed one.
func fromTraceHeaders(ctx context.Context, traceparent, tracestate string) (context.Context, bool) {
	if traceparent == "" {
		return ctx, false
	}
	carrier := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		carrier["tracestate"] = tracestate
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	if !sc.IsValid() {
		return ctx, false
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc), true
}
