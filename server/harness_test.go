package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/redistest"
	"github.com/coordinator-dev/coordinator/server"
)

// storeKinds are the stores every service test runs against.
var storeKinds = []string{server.StoreMemory, server.StoreRedis}

// testConfig is the default configuration, on the given store, with a key
// prefix of its own so that tests can share one Redis.
func testConfig(t *testing.T, kind string) server.Config {
	t.Helper()
	cfg, err := server.ParseConfig(flag.NewFlagSet("test", flag.ContinueOnError), nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = kind
	if kind == server.StoreRedis {
		cfg.RedisURL = redistest.URL(t)
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.RedisKeyPrefix = "test-" + hex.EncodeToString(b[:])
	}
	return cfg
}

// coordinator is a server under test, reached over a real loopback listener.
type coordinator struct {
	*server.Server
	client coordinatorv1.CoordinatorClient
	conn   *grpc.ClientConn
	addr   string
	done   chan struct{}
}

func start(t *testing.T, cfg server.Config) *coordinator {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	srv, err := server.New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &coordinator{Server: srv, addr: lis.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if err := srv.Serve(lis); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	c.conn, err = grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c.client = coordinatorv1.NewCoordinatorClient(c.conn)
	t.Cleanup(c.stop)
	return c
}

// stop shuts the coordinator down; it is safe to call more than once.
func (c *coordinator) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.Shutdown(ctx)
	<-c.done
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// tryAcquire is TryAcquire with a generous deadline; it may run on any
// goroutine.
func (c *coordinator) tryAcquire(name, holder string, ttl, wait time.Duration) (*coordinatorv1.TryAcquireResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: dur(ttl), Wait: dur(wait)})
}

// acquire is tryAcquire that must succeed as a call; only for the test's
// own goroutine.
func (c *coordinator) acquire(t *testing.T, name, holder string, ttl, wait time.Duration) *coordinatorv1.TryAcquireResponse {
	t.Helper()
	resp, err := c.tryAcquire(name, holder, ttl, wait)
	if err != nil {
		t.Fatalf("TryAcquire(%s, %s): %v", name, holder, err)
	}
	return resp
}

func (c *coordinator) mustAcquire(t *testing.T, name, holder string, ttl time.Duration) *coordinatorv1.Lease {
	t.Helper()
	resp := c.acquire(t, name, holder, ttl, 0)
	if !resp.GetAcquired() {
		t.Fatalf("%s could not acquire %s: held by %q", holder, name, resp.GetHolder())
	}
	return resp.GetLease()
}

// errorDetails returns the status code, ErrorInfo reason and BadRequest
// field of err.
func errorDetails(err error) (code codes.Code, reason, field string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.BadRequest:
			if v := d.GetFieldViolations(); len(v) > 0 {
				field = v[0].GetField()
			}
		}
	}
	return st.Code(), reason, field
}

func errCode(err error) codes.Code { return status.Code(err) }
