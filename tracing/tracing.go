// Package tracing is the OpenTelemetry side of the orchestrator: the process setup from the
// standard OTEL_* environment, the tracer every package starts its spans with, and the W3C
// trace context carried in stream entries and worker calls, so that one trace covers a job from
// the agent's submit through the orchestrator, the stream and the worker's run to its completion.
//
// Without OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) nothing is
// exported and every span is a no-op; the trace context is still passed along, so an agent's
// trace stays intact across an orchestrator that does not export.
package tracing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every span of the project.
const ScopeName = "github.com/gpuorch/orchestrator"

// Environment variables read by Setup (the OpenTelemetry SDK reads the other OTEL_* ones:
// OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_INSECURE, OTEL_TRACES_SAMPLER,
// OTEL_TRACES_SAMPLER_ARG, OTEL_RESOURCE_ATTRIBUTES, …).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvServiceName    = "OTEL_SERVICE_NAME"
)

// Span attribute keys of the project (the log keys, so traces and logs join on them).
const (
	AttrJobID    = attribute.Key("job_id")
	AttrJobType  = attribute.Key("job_type")
	AttrAttempt  = attribute.Key("attempt")
	AttrWorkerID = attribute.Key("worker_id")
	AttrPoolID   = attribute.Key("pool_id")
	AttrNodeID   = attribute.Key("node_id")
	AttrStream   = attribute.Key("stream")
)

// propagator is the W3C trace context: what travels in the traceparent header and field.
var propagator = propagation.TraceContext{}

// Setup installs the process's tracer provider (NewProvider) and the W3C propagator. Without
// an OTLP endpoint only the propagator is installed. The returned function flushes and stops
// the exporter; call it at shutdown.
func Setup(ctx context.Context, service string, getenv func(string) string, log *slog.Logger) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	tp, err := NewProvider(ctx, service, getenv)
	if err != nil || tp == nil {
		return func(context.Context) error { return nil }, err
	}
	otel.SetTracerProvider(tp)
	if log != nil {
		log.Info("exporting traces over OTLP", "component", "tracing",
			"endpoint", cmp.Or(getenv(EnvTracesEndpoint), getenv(EnvEndpoint)))
	}
	return tp.Shutdown, nil
}

// NewProvider returns a tracer provider that batches spans and exports them over OTLP/HTTP
// (protobuf) to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces,
// under service name OTEL_SERVICE_NAME (default service); nil when no endpoint is set (getenv
// is os.Getenv in production). The exporter reads its headers, TLS and timeout settings from
// the process environment; the sampler is the SDK's, from OTEL_TRACES_SAMPLER (default:
// parent-based, always on).
func NewProvider(ctx context.Context, service string, getenv func(string) string) (*sdktrace.TracerProvider, error) {
	if getenv(EnvEndpoint) == "" && getenv(EnvTracesEndpoint) == "" {
		return nil, nil
	}
	if p := getenv(EnvProtocol); p != "" && p != "http/protobuf" {
		return nil, fmt.Errorf("set up tracing: %s=%q: only http/protobuf is supported (an OpenTelemetry collector accepts it on port 4318)", EnvProtocol, p)
	}
	url := getenv(EnvTracesEndpoint)
	if url == "" {
		url = strings.TrimRight(getenv(EnvEndpoint), "/") + "/v1/traces" // as the OTLP spec says
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(url))
	if err != nil {
		return nil, fmt.Errorf("set up tracing: create the OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", cmp.Or(getenv(EnvServiceName), service)),
	))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("set up tracing: build the resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// Tracer returns the project's tracer from the global provider (read at each call, so a
// provider installed later, as tests do, takes effect).
func Tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(ScopeName) }

// Start starts a span of the project's tracer.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return Tracer().Start(ctx, name, opts...)
}

// End ends span, recording err (when not nil) as the span's error status.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// TraceParent returns the W3C traceparent of the span in ctx ("" when there is none), the
// value stream entries and worker calls carry.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceParent returns ctx with the remote span context of traceparent as its parent; ctx
// unchanged when traceparent is empty or malformed (a trace is a help, never a reason to fail).
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": strings.TrimSpace(traceparent)})
}

// Extract returns ctx with the trace context of an incoming request's headers.
func Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	return propagator.Extract(ctx, c)
}

// Inject writes the trace context of ctx into an outgoing request's headers.
func Inject(ctx context.Context, c propagation.TextMapCarrier) {
	propagator.Inject(ctx, c)
}

// TraceID returns the trace id of the span in ctx, "" when there is none (for log lines).
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
