package client

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testcert"
)

// A coordinator with TLS and a bearer token: the token reaches every call,
// the operation stream included, over TLS given either way.
func TestBearerTokenOverTLS(t *testing.T) {
	cert := testcert.Write(t, "coordinator test")
	certFile, keyFile, pool := cert.Cert, cert.Key, cert.Pool
	cfg := coordtest.Config(t, "memory")
	cfg.TLS.Cert, cfg.TLS.Key, cfg.AuthToken = certFile, keyFile, "s3cret"
	coord := coordtest.Start(t, cfg)
	tlsConfig := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}

	for _, tc := range []struct {
		name string
		opts []Option
		want codes.Code
	}{
		{"WithTLS", []Option{WithTLS(tlsConfig), WithBearerToken("s3cret")}, codes.OK},
		{"WithTransportCredentials", []Option{WithTransportCredentials(credentials.NewTLS(tlsConfig)), WithBearerToken("s3cret")}, codes.OK},
		{"no token", []Option{WithTLS(tlsConfig)}, codes.Unauthenticated},
		{"wrong token", []Option{WithTLS(tlsConfig), WithBearerToken("guess")}, codes.Unauthenticated},
		{"no TLS", []Option{WithInsecureBearerToken("s3cret")}, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			clock := clockwork.NewFakeClock()
			c := dial(t, coord, append(tc.opts, withClock(clock))...)
			lease, err := c.TryLock(ctx, "secure")
			if status.Code(err) != tc.want {
				t.Fatalf("TryLock = %v; want %s", err, tc.want)
			}
			if err != nil {
				return
			}
			renew(t, clock, lease.l.session)
			if _, err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// WithInsecureBearerToken is the one way to send a token in the clear.
func TestInsecureBearerTokenOverPlaintext(t *testing.T) {
	cfg := coordtest.Config(t, "memory")
	cfg.AuthToken = "s3cret"
	coord := coordtest.Start(t, cfg)
	ctx := testCtx(t)

	clock := clockwork.NewFakeClock()
	lease, err := dial(t, coord, WithInsecureBearerToken("s3cret"), withClock(clock)).TryLock(ctx, "loopback")
	if err != nil {
		t.Fatal(err)
	}
	renew(t, clock, lease.l.session)
	if _, err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, coord, WithInsecureBearerToken("guess")).TryLock(ctx, "loopback"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("TryLock with a wrong token = %v; want Unauthenticated", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	pool := testcert.Write(t, "coordinator test").Pool
	tlsConfig := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	for _, tc := range []struct {
		name string
		opts []Option
		says string
	}{
		{"long identity", []Option{WithIdentity(string(make([]byte, 101)))}, "at most 100"},
		{"unprintable identity", []Option{WithIdentity("a\nb")}, "unprintable"},
		{"zero TTL", []Option{WithTTL(0)}, "not positive"},
		{"empty token", []Option{WithTLS(tlsConfig), WithBearerToken("")}, "empty"},
		{"token over plaintext", []Option{WithBearerToken("s3cret")}, "WithInsecureBearerToken"},
		{"token over insecure credentials", []Option{WithTransportCredentials(insecure.NewCredentials()), WithBearerToken("s3cret")}, "plaintext"},
		// gRPC itself refuses, through the token's RequireTransportSecurity.
		{"token over dial options that undo TLS", []Option{WithTLS(tlsConfig), WithBearerToken("s3cret"),
			WithDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials()))}, "transport level security"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New("127.0.0.1:1", tc.opts...)
			if err == nil {
				_ = c.Close()
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("New = %v; want it to say %q", err, tc.says)
			}
		})
	}
	c, err := New("127.0.0.1:1", WithIdentity("worker-7"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if c.Identity() != "worker-7" || c.newHolder() != "worker-7#1" || c.newHolder() != "worker-7#2" {
		t.Fatal("holders are not the identity and a sequence number")
	}
}

// WithDialOptions reaches the connection: calls and streams go through its
// interceptors.
func TestDialOptionsReachEveryCall(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	var calls, streams atomic.Int32
	clock := clockwork.NewFakeClock()
	c := dial(t, coord, withClock(clock), WithDialOptions(
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			calls.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			streams.Add(1)
			return streamer(ctx, desc, cc, method, opts...)
		}),
	))
	lease, err := c.TryLock(ctx, "intercepted")
	if err != nil {
		t.Fatal(err)
	}
	renew(t, clock, lease.l.session)
	// The lease calls go over the operation stream; Leader is a unary call.
	if _, err := c.Leader(ctx, "nobody-leads"); !errors.Is(err, ErrNoLeader) {
		t.Fatal(err)
	}
	if calls.Load() == 0 || streams.Load() == 0 {
		t.Fatalf("%d calls and %d streams intercepted; want both", calls.Load(), streams.Load())
	}
}

func TestErrorReason(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	_, err := dial(t, coord).TryLock(testCtx(t), "")
	if got := ErrorReason(err); got != "INVALID_FIELD" {
		t.Fatalf("ErrorReason(%v) = %q; want INVALID_FIELD", err, got)
	}
	if got := ErrorReason(ErrClosed); got != "" {
		t.Fatalf("ErrorReason of a local error = %q; want none", got)
	}
}
