// Package sessionops lets a stream interceptor wrap each operation of a
// Session stream as it would wrap the unary call of the same name.
//
// Each operation of a Session stream is one unary call in all but transport:
// the stream's handler (server.Service.Session) runs it through the unary
// handler of the same name. What a unary interceptor does around a call (the
// limits' waiting places and lease counts, say) must be done around each
// operation as well; a stream interceptor that knows the Session method adds
// its unary interceptor to the stream with Intercept, and the handler runs
// every operation through the interceptors so added (Interceptors, Run), the
// first added outermost, with the unary method's name in its
// grpc.UnaryServerInfo (e.g. Coordinator_TryAcquire_FullMethodName).
//
// An interceptor that refuses an operation returns its error as it would
// for the call: the operation's result carries it, and the stream stays up.
//
// It is a leaf of the server layer, so that the middleware (server/limits)
// and the service meet here without one importing the other: it imports
// nothing of this module.
package sessionops

import (
	"context"
	"slices"

	"google.golang.org/grpc"
)

type key struct{}

// Intercept returns ss with i added to the interceptors that the Session
// handler runs each operation through. Call it from a stream interceptor, on
// the Session method only, and hand the returned stream on.
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
