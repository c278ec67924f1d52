package server

import (
	"context"
	"slices"

	"google.golang.org/grpc"
)

// Session operations and interceptors. Each operation of a Session stream is
// one unary call in all but transport: the stream's handler runs it through
// the unary handler of the same name. What a unary interceptor does around a
// call (the limits' waiting places and lease counts, say) must be done
// around each operation as well; a stream interceptor that knows the Session
// method adds its unary interceptor to the stream with InterceptSessionOps,
// and the handler runs every operation through the interceptors so added,
// the first added outermost, with the unary method's name in its
// grpc.UnaryServerInfo (e.g. Coordinator_TryAcquire_FullMethodName).
//
// An interceptor that refuses an operation returns its error as it would
// for the call: the operation's result carries it, and the stream stays up.

type sessionOpsKey struct{}

// InterceptSessionOps returns ss with i added to the interceptors that the
// Session handler runs each operation through. Call it from a stream
// interceptor, on the Session method only, and hand the returned stream on.
func InterceptSessionOps(ss grpc.ServerStream, i grpc.UnaryServerInterceptor) grpc.ServerStream {
	ctx := ss.Context()
	chain, _ := ctx.Value(sessionOpsKey{}).([]grpc.UnaryServerInterceptor)
	chain = append(slices.Clip(chain), i)
	return &sessionOpsStream{ServerStream: ss, ctx: context.WithValue(ctx, sessionOpsKey{}, chain)}
}

type sessionOpsStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *sessionOpsStream) Context() context.Context { return s.ctx }

// sessionInterceptors returns the interceptors added to the stream of ctx.
func sessionInterceptors(ctx context.Context) []grpc.UnaryServerInterceptor {
	chain, _ := ctx.Value(sessionOpsKey{}).([]grpc.UnaryServerInterceptor)
	return chain
}

// intercepted runs handler on req through chain, the first outermost.
func intercepted(ctx context.Context, chain []grpc.UnaryServerInterceptor, info *grpc.UnaryServerInfo, req any, handler grpc.UnaryHandler) (any, error) {
	if len(chain) == 0 {
		return handler(ctx, req)
	}
	next := func(ctx context.Context, req any) (any, error) {
		return intercepted(ctx, chain[1:], info, req, handler)
	}
	return chain[0](ctx, req, info, next)
}
