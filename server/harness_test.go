package server_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
)

// The service's own tests serve a bare Service over a store on a real
// loopback listener, without the coordinator process around it: no codec,
// interceptors, limits or access checks. The service's behaviour through a
// whole coordinator (coordtest) is tested in package coordinatord, the layer
// above, which this one never imports.

// The store kinds the tests over real stores run against.
const (
	storeMemory = "memory"
	storeRedis  = "redis"
)

var storeKinds = []string{storeMemory, storeRedis}

// serveService serves a bare Service over a memory store with opts, on a
// real loopback listener, without the rest of the coordinator process.
func serveService(t *testing.T, opts server.ServiceOptions) (*server.Service, coordinatorv1.CoordinatorClient) {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() }) // after the server stopped: cleanups run last first
	svc, conn := serveStore(t, st, opts)
	return svc, coordinatorv1.NewCoordinatorClient(conn)
}

// serveStore serves a bare Service over st on a real loopback listener,
// with the server options given, until the end of t; closing st is the
// caller's.
func serveStore(t *testing.T, st store.Store, opts server.ServiceOptions, serverOpts ...grpc.ServerOption) (*server.Service, *grpc.ClientConn) {
	t.Helper()
	svc := server.NewService(st, opts)
	g := grpc.NewServer(serverOpts...)
	coordinatorv1.RegisterCoordinatorServer(g, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		svc.Stop()
		g.Stop()
	})
	return svc, conn
}

// coordinator is a served Service as its clients reach it.
type coordinator struct {
	client coordinatorv1.CoordinatorClient
	conn   *grpc.ClientConn
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

// waitQueued waits until exactly n callers are queued for name: one more
// (a caller queued twice, or one that should not wait) fails it.
func waitQueued(t *testing.T, c *coordinator, name string, n int) {
	t.Helper()
	testwait.Until(t, 10*time.Second, fmt.Sprintf("%d waiters queued on %s", n, name), func() bool {
		desc, err := c.client.Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return int(desc.GetWaiters()) == n
	})
}
