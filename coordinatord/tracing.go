package coordinatord

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/app"
	"github.com/coordinator-dev/coordinator/internal/telemetry"
	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/storetrace"
	"github.com/coordinator-dev/coordinator/server/streamops"
)

// Tracing, when the environment turns it on (package telemetry): otelgrpc's
// stats handler makes a span of every call but health checks, joined to the
// caller's trace when the call carries one; each operation of a Stream
// stream is a span of its own (streamOp); each store call of a traced
// request is a child span (storetrace). When it is off, none of it is
// installed: no stats handler, no interceptor, no store wrapper.

// sessionOpScope is the instrumentation scope of the stream operations'
// spans.
const sessionOpScope = "github.com/coordinator-dev/coordinator/coordinatord"

// tracingFlushTimeout bounds the export of the spans still buffered at
// shutdown, after the calls have ended.
const tracingFlushTimeout = 5 * time.Second

// attrStreamOp marks the span of a stream operation.
const attrStreamOp = attribute.Key("coordinator.stream.operation")

// tracing is the process's tracing; nil when it is off.
type tracing struct {
	provider   trace.TracerProvider
	propagator propagation.TextMapPropagator
	tracer     trace.Tracer
	// owned was built from the environment, and Shutdown flushes it; nil
	// for Config.TracerProvider, which is its giver's to shut down.
	owned *telemetry.Tracing
}

// newTracing starts what cfg asks for: Config.TracerProvider when set, else
// the OTEL_* environment's setup when it turns tracing on, else nothing.
func newTracing(ctx context.Context, cfg Config, log *slog.Logger) (*tracing, error) {
	for _, w := range cfg.Tracing.Warnings {
		log.Warn("tracing: " + w)
	}
	if cfg.TracerProvider != nil {
		return newTracingWith(cfg.TracerProvider, propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})), nil
	}
	if !cfg.Tracing.Enabled {
		return nil, nil
	}
	v := app.BuildVersion()
	t, err := telemetry.Start(ctx, cfg.Tracing, telemetry.Service{Name: "coordinator", Version: cmp.Or(v.Release, v.ModuleVersion)}, log)
	if err != nil {
		return nil, err
	}
	log.Info("tracing on: exporting spans over OTLP", "protocol", cfg.Tracing.Protocol, "sampler", cfg.Tracing.Sampler,
		"propagators", strings.Join(cfg.Tracing.Propagators, ","))
	tr := newTracingWith(t.Provider, t.Propagator)
	tr.owned = t
	return tr, nil
}

func newTracingWith(tp trace.TracerProvider, prop propagation.TextMapPropagator) *tracing {
	return &tracing{provider: tp, propagator: prop, tracer: tp.Tracer(sessionOpScope)}
}

// serverOption is otelgrpc's stats handler. Health checks are left out: a
// probe every few seconds would otherwise be most of the traces. Its
// metrics are off (a no-op meter): the process has its own, in Prometheus.
func (t *tracing) serverOption() grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.provider),
		otelgrpc.WithPropagators(t.propagator),
		otelgrpc.WithMeterProvider(noop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
	))
}

// wrapStore traces the store calls of traced requests.
func (t *tracing) wrapStore(st store.Store, kind string) store.Store {
	return storetrace.Wrap(st, t.provider, kind)
}

// countAttempts numbers the store calls of a traced unary call
// (coordinator.store.attempt).
func (t *tracing) countAttempts(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if trace.SpanFromContext(ctx).IsRecording() {
		ctx = storetrace.CountAttempts(ctx)
	}
	return handler(ctx, req)
}

// streams gives each operation of an operation stream its span.
func (t *tracing) streams(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod == coordinatorv1.Coordinator_Stream_FullMethodName {
		ss = streamops.Intercept(ss, t.sessionOp)
	}
	return handler(srv, ss)
}

// sessionOp is the span of one stream operation, named as its unary call.
// An operation stream lives as long as its client is busy, for hours at a
// time, so its operations are not children of the stream's span, which
// would make one trace of them all, exported only when the stream ends:
// each is a child of the caller's span when the operation carries the
// caller's trace context (trace_parent, as a traced SDK sends), and
// otherwise starts a trace of its own (sampled as a new root); either way
// it is linked to the stream's span, with its store calls as children.
func (t *tracing) sessionOp(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	service, method := splitMethod(info.FullMethod)
	opts := []trace.SpanStartOption{trace.WithLinks(trace.LinkFromContext(ctx))}
	caller := ctx
	if tc, ok := streamops.TraceContextOf(ctx); ok {
		caller = t.propagator.Extract(ctx, propagation.MapCarrier{"traceparent": tc.Parent, "tracestate": tc.State})
	}
	if sc := trace.SpanContextFromContext(caller); sc.IsValid() && sc.IsRemote() {
		ctx = caller
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	ctx, span := t.tracer.Start(ctx, strings.TrimPrefix(info.FullMethod, "/"),
		append(opts,
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(
				attribute.String("rpc.system", "grpc"),
				attribute.String("rpc.service", service),
				attribute.String("rpc.method", method),
				attrStreamOp.Bool(true),
			))...)
	if !span.IsRecording() {
		span.End()
		return handler(ctx, req)
	}
	ctx = storetrace.CountAttempts(ctx)
	resp, err := handler(ctx, req)
	code := status.Code(err)
	span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(code)))
	if serverFault(code) {
		span.SetStatus(otelcodes.Error, status.Convert(err).Message())
	}
	span.End()
	return resp, err
}

// serverFault reports whether a call that ended with code failed on the
// server's side, as OTel's gRPC conventions count it for a server span.
func serverFault(code codes.Code) bool {
	switch code {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// shutdown exports the spans still buffered, when the provider is the
// process's own.
func (t *tracing) shutdown(ctx context.Context, log *slog.Logger) {
	if t == nil || t.owned == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
	defer cancel()
	if err := t.owned.Shutdown(ctx); err != nil {
		log.Warn("tracing: spans may be lost", "err", fmt.Errorf("coordinator: %w", err))
	}
}
