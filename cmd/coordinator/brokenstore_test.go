package main

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/linearize"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
)

// TestLinearizabilityCatchesBrokenStores proves the fault suite's
// linearizability check able to fail: the suite's contention, on a
// service over a deliberately broken store, must leave a history the check
// calls illegal, while the same run over the memory store passes.
func TestLinearizabilityCatchesBrokenStores(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wrap  func(store.Store) store.Store
		legal bool
	}{
		{"the memory store", func(st store.Store) store.Store { return st }, true},
		{"leases that end early (a grant to a holder whose lease is alive)", func(st store.Store) store.Store { return earlyExpiry{st} }, false},
		{"tokens that go back (no fencing)", func(st store.Store) store.Store { return reversedTokens{st} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &contention{client: serveInProcess(t, tc.wrap(memstore.New())), capacity: 1}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for w := range faultWorkers {
				wg.Go(func() { c.run(ctx, w) })
			}
			wg.Wait()
			if c.grants.Load() < faultNames {
				t.Fatalf("%d grants: too few to judge", c.grants.Load())
			}
			illegal := 0
			for _, v := range linearize.Verify(&c.history, linearize.CheckTimeout) {
				switch {
				case v.Result == porcupine.Illegal:
					illegal++
					t.Logf("%s (%d operations): illegal, as it should be when broken: %s", v.Name, v.Operations, v.Illegal)
				case v.Result != porcupine.Ok:
					t.Errorf("%s (%d operations): %v", v.Name, v.Operations, v.Result)
				}
			}
			if tc.legal && illegal > 0 {
				t.Errorf("%d names' histories illegal on a correct store", illegal)
			}
			if !tc.legal && illegal == 0 {
				t.Errorf("every history of %d grants legal: the check missed the broken store", c.grants.Load())
			}
		})
	}
}

// serveInProcess serves a service over st on a loopback listener until
// the end of t, with the fault suite's max TTL.
func serveInProcess(t *testing.T, st store.Store) coordinatorv1.CoordinatorClient {
	t.Helper()
	svc := server.NewService(st, server.ServiceOptions{MaxTTL: faultTTL})
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
		_ = st.Close()
	})
	return coordinatorv1.NewCoordinatorClient(conn)
}

// earlyExpiry is a broken store: it keeps a lease a quarter of the TTL it
// answers, so that it grants the name again while the holder's lease is
// alive.
type earlyExpiry struct{ store.Store }

func (s earlyExpiry) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	ttl := req.TTL
	req.TTL /= 4
	res, err := s.Store.Acquire(ctx, req)
	if res.Acquired {
		res.Lease.TTL, res.Lease.ExpiresAt = ttl, res.Lease.ExpiresAt.Add(ttl-req.TTL)
	}
	return res, err
}

// reversedTokens is a broken store: its tokens go down from grant to
// grant (it hands out the inner store's, mirrored), so they fence nothing.
type reversedTokens struct{ store.Store }

const mirror = 1 << 62

func (s reversedTokens) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if req.Token != 0 {
		req.Token = mirror - req.Token
	}
	res, err := s.Store.Acquire(ctx, req)
	if res.Lease.Token != 0 {
		res.Lease.Token = mirror - res.Lease.Token
	}
	return res, err
}

func (s reversedTokens) Release(ctx context.Context, name, holder string, token uint64) (bool, error) {
	return s.Store.Release(ctx, name, holder, mirror-token)
}
