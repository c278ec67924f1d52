package server_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

func TestZeroServiceOptionsServeWithDefaults(t *testing.T) {
	svc, client := serveService(t, server.ServiceOptions{})
	ctx := servertest.Timeout(t, 10*time.Second)

	resp, err := client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "zero", Holder: "a", Ttl: servertest.Dur(server.DefaultMaxTTL)})
	if err != nil || !resp.GetAcquired() {
		t.Fatalf("TryAcquire with the default max TTL = %v, %v", resp, err)
	}
	if _, err := client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "zero", Holder: "a", Ttl: servertest.Dur(server.DefaultMaxTTL + time.Second)}); status.Code(err) != codes.InvalidArgument {
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
	if _, err := client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: "zero-election", Candidate: "c", Ttl: servertest.Dur(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || ev.GetEvent().GetKind() != coordinatorv1.LeaderEvent_KIND_ELECTED {
		t.Fatalf("after a campaign: %v, %v; want ELECTED", ev, err)
	}
	svc.Stop()
	svc.Stop() // a second Stop is harmless
}

func TestStopEndsAnIdleObserveStream(t *testing.T) {
	svc, client := serveService(t, server.ServiceOptions{})
	ctx := servertest.Timeout(t, 10*time.Second)
	observe, err := client.Observe(ctx, &coordinatorv1.ObserveRequest{Election: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := observe.Recv(); err != nil { // the current state
		t.Fatal(err)
	}
	svc.Stop()
	done := make(chan error, 1)
	go func() { _, err := observe.Recv(); done <- err }()
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable {
			t.Errorf("Observe after Stop: %v; want Unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Observe stream still open 5s after Stop")
	}
}

// TestStopEndsAnIdleStream holds a lease through an operation stream that then
// sits idle: Stop ends the stream with Unavailable.
func TestStopEndsAnIdleStream(t *testing.T) {
	svc, client := serveService(t, server.ServiceOptions{})
	stream, err := client.Stream(servertest.Timeout(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	acquire := &coordinatorv1.StreamOperation{Id: 1, Operation: &coordinatorv1.StreamOperation_Acquire{Acquire: &coordinatorv1.TryAcquireRequest{
		Name: "idle", Holder: "h", Ttl: servertest.Dur(time.Minute), Wait: servertest.Dur(0),
	}}}
	if err := stream.Send(&coordinatorv1.StreamRequest{Operations: []*coordinatorv1.StreamOperation{acquire}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults(); len(r) != 1 || r[0].GetId() != 1 || !r[0].GetAcquire().GetAcquired() {
		t.Fatalf("acquire: %v", resp)
	}
	svc.Stop()
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("the stream ended with %v; want Unavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream is still open after Stop")
	}
}
