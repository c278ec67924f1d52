package client

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// operationTracer gives each lease call that travels as an operation of the
// operation stream the client span otelgrpc gives a unary call, and sends its
// trace context in the operation (trace_parent, trace_state), so that the
// coordinator's span of the operation joins the caller's trace. Renewals,
// which no caller waits for, get none. A nil *operationTracer (tracing off)
// costs a nil check.
type operationTracer struct {
	tracer     trace.Tracer
	propagator propagation.TraceContext
}

// tracerScope is the instrumentation scope of the operations' spans.
const tracerScope = "github.com/coordinator-dev/coordinator/client"

func newOperationTracer(tp trace.TracerProvider) *operationTracer {
	if tp == nil {
		return nil
	}
	return &operationTracer{tracer: tp.Tracer(tracerScope)}
}

// operationMethods names each kind of operation as its unary method.
var operationMethods = map[string]string{
	"acquire":       "TryAcquire",
	"acquire_group": "AcquireGroup",
	"campaign":      "Campaign",
	"release":       "Release",
	"release_group": "ReleaseGroup",
	"resign":        "Resign",
}

// start begins the span of op, a child of ctx's, and writes its context
// into op; end, with the operation's error, ends it.
func (t *operationTracer) start(ctx context.Context, kind string, op *coordinatorv1.StreamOperation) (end func(error)) {
	if t == nil {
		return func(error) {}
	}
	method := operationMethods[kind]
	ctx, span := t.tracer.Start(ctx, "coordinator.v1.Coordinator/"+method,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("rpc.system", "grpc"),
			attribute.String("rpc.service", "coordinator.v1.Coordinator"),
			attribute.String("rpc.method", method),
			attribute.Bool("coordinator.stream.operation", true),
		))
	carrier := propagation.MapCarrier{}
	t.propagator.Inject(ctx, carrier)
	op.TraceParent, op.TraceState = carrier["traceparent"], carrier["tracestate"]
	return func(err error) {
		code := status.Code(err)
		span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(code)))
		if code != codes.OK {
			span.SetStatus(otelcodes.Error, status.Convert(err).Message())
		}
		span.End()
	}
}
