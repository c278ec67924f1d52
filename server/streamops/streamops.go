package streamops

import (
	"context"
	"slices"

	"google.golang.org/grpc"
)

type key struct{}

// Intercept returns ss with i added to the interceptors that the Stream
// handler runs each operation through. Call it from a stream interceptor, on
// the Stream method only, and hand the returned stream on.
func Intercept(ss grpc.ServerStream, i grpc.UnaryServerInterceptor) grpc.ServerStream {
	ctx := ss.Context()
	chain, _ := ctx.Value(key{}).([]grpc.UnaryServerInterceptor)
	chain = append(slices.Clip(chain), i)
	return &stream{ServerStream: ss, ctx: context.WithValue(ctx, key{}, chain)}
}

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

// Interceptors returns the interceptors added to the stream of ctx.
func Interceptors(ctx context.Context) []grpc.UnaryServerInterceptor {
	chain, _ := ctx.Value(key{}).([]grpc.UnaryServerInterceptor)
	return chain
}

// Run runs handler on req through chain, the first outermost.
func Run(ctx context.Context, chain []grpc.UnaryServerInterceptor, info *grpc.UnaryServerInfo, req any, handler grpc.UnaryHandler) (any, error) {
	if len(chain) == 0 {
		return handler(ctx, req)
	}
	next := func(ctx context.Context, req any) (any, error) {
		return Run(ctx, chain[1:], info, req, handler)
	}
	return chain[0](ctx, req, info, next)
}

// TraceContext is the W3C trace context an operation carries (its
// StreamOperation's trace_parent and trace_state): what a unary call
// carries in its traceparent and tracestate metadata.
type TraceContext struct {
	Parent, State string
}

type traceKey struct{}

// WithTraceContext returns ctx carrying the operation's trace context, for
// the interceptors that Run runs it through.
func WithTraceContext(ctx context.Context, tc TraceContext) context.Context {
	return context.WithValue(ctx, traceKey{}, tc)
}

// TraceContextOf returns the trace context of the operation of ctx; ok is
// false when it carries none.
func TraceContextOf(ctx context.Context) (tc TraceContext, ok bool) {
	tc, ok = ctx.Value(traceKey{}).(TraceContext)
	return tc, ok && tc.Parent != ""
}
