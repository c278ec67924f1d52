// Package streamops lets a stream interceptor wrap each operation of a
// operation stream as it would wrap the unary call of the same name.
//
// Each operation of an operation stream is one unary call in all but transport:
// the stream's handler (server.Service.Stream) runs it through the unary
// handler of the same name. What a unary interceptor does around a call (the
// limits' waiting places and lease counts, say) must be done around each
// operation as well; a stream interceptor that knows the Stream method adds
// its unary interceptor to the stream with Intercept, and the handler runs
// every operation through the interceptors so added (Interceptors, Run), the
// first added outermost, with the unary method's name in its
// grpc.UnaryServerInfo (e.g. Coordinator_TryAcquire_FullMethodName).
//
// An operation's trace context (the W3C headers a unary call carries in its
// metadata) rides in the operation's context (WithTraceContext,
// TraceContextOf), for the tracing interceptor.
//
// An interceptor that refuses an operation returns its error as it would
// for the call: the operation's result carries it, and the stream stays up.
//
// It is a leaf of the server layer, so that the middleware (server/limits)
// and the service meet here without one importing the other: it imports
// nothing of this module.
package streamops
