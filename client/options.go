package client

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Option configures a Client. Options are given to New.
type Option interface {
	applyClient(*config)
}

// LockOption configures one acquisition: TryLock, Lock (and their
// semaphore and read-write variants), LockAll, AcquireAll (and their Try
// variants), Campaign or RunAsLeader. WithSession is the one there is.
type LockOption interface {
	applyLock(*lockConfig)
}

// SessionOption configures a session that NewSession makes. WithTTL is the
// one there is.
type SessionOption interface {
	applySession(*time.Duration)
}

type config struct {
	ttl          time.Duration
	identity     string
	log          *slog.Logger
	closeTimeout time.Duration
	token        *bearerToken
	creds        credentials.TransportCredentials
	dialOpts     []grpc.DialOption
	clock        clockwork.Clock
	sessionIdle  time.Duration
	// tracer is WithTracerProvider's; nil: no tracing.
	tracer trace.TracerProvider
}

type lockConfig struct {
	// session, when set, is the session the lease attaches to (WithSession)
	// instead of the Client's default session.
	session *Session
}

type optionFunc func(*config)

func (f optionFunc) applyClient(c *config) { f(c) }

// TTLOption sets a session's time to live. It is both an Option (the TTL
// of the Client's default session, DefaultTTL when not given) and a
// SessionOption (that of a session NewSession makes). The coordinator
// accepts TTLs from 100ms up to its configured maximum (5 minutes by
// default).
type TTLOption time.Duration

// WithTTL sets the time to live of sessions, and so of every lease held in
// them: a session is renewed about every ttl/3, so the TTL is how long a
// holder that stopped (crashed, partitioned) keeps others waiting.
func WithTTL(ttl time.Duration) TTLOption { return TTLOption(ttl) }

func (o TTLOption) applyClient(c *config)           { c.ttl = time.Duration(o) }
func (o TTLOption) applySession(ttl *time.Duration) { *ttl = time.Duration(o) }

// WithIdentity sets the Client's identity, which prefixes the holder of every
// lease and the candidate of every campaign it makes: each acquisition holds
// as identity + "#" + a sequence number, so that two acquisitions through one
// Client exclude each other like any two clients. The default is the host
// name, the process id and a random suffix. At most 100 bytes of printable
// UTF-8.
func WithIdentity(identity string) Option {
	return optionFunc(func(c *config) { c.identity = identity })
}

// WithLogger sets where the Client logs what it cannot return: renewal
// failures, stream reconnects, retried acquisitions, errors of
// RunAsLeader's function. The default discards everything.
func WithLogger(log *slog.Logger) Option {
	return optionFunc(func(c *config) { c.log = log })
}

// WithBearerToken sends "authorization: Bearer token" with every call, as a
// coordinator started with -auth-token requires. The connection must be
// secure (WithTLS or WithTransportCredentials): New refuses to send a token
// over plaintext, where anyone on the path can read it. See
// WithInsecureBearerToken.
func WithBearerToken(token string) Option {
	return optionFunc(func(c *config) { c.token = &bearerToken{token: token} })
}

// WithInsecureBearerToken is WithBearerToken that also sends the token over
// a plaintext connection. It is for loopback and tests only: on any other
// network, the token is anyone's who can see the traffic.
func WithInsecureBearerToken(token string) Option {
	return optionFunc(func(c *config) { c.token = &bearerToken{token: token, allowInsecure: true} })
}

// bearerToken is the per-call credential of WithBearerToken. Through
// RequireTransportSecurity gRPC itself refuses to send it over a connection
// that is not secure, whatever the dial options say.
type bearerToken struct {
	token         string
	allowInsecure bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b *bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (b *bearerToken) RequireTransportSecurity() bool { return !b.allowInsecure }

// WithTLS connects with TLS using cfg (nil: the system roots, no client
// certificate).
func WithTLS(cfg *tls.Config) Option {
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return WithTransportCredentials(credentials.NewTLS(cfg))
}

// WithTransportCredentials connects with creds, for security that a
// tls.Config does not describe (SPIFFE, ALTS…). The default is a plaintext
// connection.
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return optionFunc(func(c *config) { c.creds = creds })
}

// WithDialOptions adds gRPC dial options, after the Client's own: for what
// no other Option covers, such as interceptors and stats handlers (for
// tracing, see WithTracerProvider).
// Give transport credentials with WithTLS or WithTransportCredentials
// instead, which WithBearerToken checks.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return optionFunc(func(c *config) { c.dialOpts = append(c.dialOpts, opts...) })
}

// WithTracerProvider traces the Client's calls with OpenTelemetry through
// tp (nil: the global provider, otel.GetTracerProvider()): otelgrpc's client
// stats handler makes a client span of every RPC, a child of the span in the
// call's context, and sends its W3C trace context and baggage to the
// coordinator, whose server span and store spans then join the trace. By
// default nothing is installed, and calls pay nothing for tracing.
//
// The lease calls of a Client go over its operation stream. The stream,
// open while the Client is busy, is one
// RPC whose span is part of no caller's trace, so each TryLock, Lock,
// Campaign, Release and Resign made on it gets a client span of its own,
// named as its unary method, a child of the caller's span, and sends its
// trace context in the operation (trace_parent, trace_state): the
// coordinator's span of the operation joins the caller's trace, as it does
// for a unary call. Renewals, which no caller waits for, are not traced
// here. Describe, Leader, List, Observe and the session calls other than
// renewals are RPCs of their own.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp == nil {
			tp = otel.GetTracerProvider()
		}
		c.tracer = tp
	})
}

// tracingDialOption is otelgrpc's client stats handler, tracing through tp
// (its metrics off: this option is for tracing).
func tracingDialOption(tp trace.TracerProvider) grpc.DialOption {
	return grpc.WithStatsHandler(otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelgrpc.WithMeterProvider(noop.NewMeterProvider()),
	))
}

// WithCloseTimeout sets how long Close spends releasing the leases and
// leaderships still held (DefaultCloseTimeout). Zero or less: Close does not
// release them, and they expire after their TTL.
func WithCloseTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.closeTimeout = d })
}

// withClock sets the clock of lease validity and renewal scheduling, so
// that tests can move time forward instead of waiting.
func withClock(clock clockwork.Clock) Option {
	return optionFunc(func(c *config) { c.clock = clock })
}

// withSessionIdle sets how long the operation stream stays open with nothing
// in flight (defaultStreamIdle), so that tests need not wait.
func withSessionIdle(d time.Duration) Option {
	return optionFunc(func(c *config) { c.sessionIdle = d })
}
