package server_test

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
)

// The service's own tests serve a bare Service over a store on a real
// loopback listener, without the coordinator process around it: no codec,
// interceptors, limits or access checks; servertest makes the usual calls. The
// service's behaviour through a whole coordinator (coordtest) is tested in
// package coordinatord, the layer above, which this one never imports.

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
