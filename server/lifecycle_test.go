package server_test

import (
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
)

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
// until the end of t; closing st is the caller's.
func serveStore(t *testing.T, st store.Store, opts server.ServiceOptions) (*server.Service, *grpc.ClientConn) {
	t.Helper()
	svc := server.NewService(st, opts)
	g := grpc.NewServer()
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

func TestZeroServiceOptionsServeWithDefaults(t *testing.T) {
	svc, client := serveService(t, server.ServiceOptions{})
	ctx := ctxTimeout(t, 10*time.Second)

	resp, err := client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "zero", Holder: "a", Ttl: dur(server.DefaultMaxTTL)})
	if err != nil || !resp.GetAcquired() {
		t.Fatalf("TryAcquire with the default max TTL = %v, %v", resp, err)
	}
	if _, err := client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "zero", Holder: "a", Ttl: dur(server.DefaultMaxTTL + time.Second)}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("TryAcquire over the default max TTL: %v; want InvalidArgument", err)
	}

	// Observe works with the default reconcile interval (a zero one used to
	// spin): the current state arrives, then a change.
	stream, err := client.Observe(ctx, &coordinatorv1.ObserveRequest{Election: "zero-election"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || ev.GetEvent().GetKind() != coordinatorv1.LeaderEvent_KIND_VACANT {
		t.Fatalf("first event %v, %v; want VACANT", ev, err)
	}
	if _, err := client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: "zero-election", Candidate: "c", Ttl: dur(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || ev.GetEvent().GetKind() != coordinatorv1.LeaderEvent_KIND_ELECTED {
		t.Fatalf("after a campaign: %v, %v; want ELECTED", ev, err)
	}
	svc.Stop()
	svc.Stop() // a second Stop is harmless
}

func TestStopEndsIdleStreams(t *testing.T) {
	svc, client := serveService(t, server.ServiceOptions{})
	ctx := ctxTimeout(t, 10*time.Second)
	keepAlive, err := client.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	observe, err := client.Observe(ctx, &coordinatorv1.ObserveRequest{Election: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := observe.Recv(); err != nil { // the current state
		t.Fatal(err)
	}
	// Make sure the KeepAlive handler is running and blocked on its next
	// request before stopping.
	if err := keepAlive.Send(&coordinatorv1.KeepAliveRequest{Name: "idle", Holder: "a", Token: 1, Ttl: dur(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if resp, err := keepAlive.Recv(); err != nil || resp.GetLost() == nil {
		t.Fatalf("renewing a lease never granted: %v, %v; want lost", resp, err)
	}

	svc.Stop()
	for name, recv := range map[string]func() error{
		"KeepAlive": func() error { _, err := keepAlive.Recv(); return err },
		"Observe":   func() error { _, err := observe.Recv(); return err },
	} {
		done := make(chan error, 1)
		go func() { done <- recv() }()
		select {
		case err := <-done:
			if status.Code(err) != codes.Unavailable {
				t.Errorf("%s after Stop: %v; want Unavailable", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s stream still open 5s after Stop", name)
		}
	}
}
