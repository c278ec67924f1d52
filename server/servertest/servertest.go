package servertest

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// callTimeout bounds every call made here: generous, for a loaded machine,
// and longer than the waits the tests ask for.
const callTimeout = 30 * time.Second

// Dur is d as the API takes it.
func Dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// Timeout is a context that ends after d or with t.
func Timeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TryAcquire calls TryAcquire with ttl and wait; it may run on any
// goroutine.
func TryAcquire(c coordinatorv1.CoordinatorClient, name, holder string, ttl, wait time.Duration) (*coordinatorv1.TryAcquireResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return c.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: Dur(ttl), Wait: Dur(wait)})
}

// Acquire is TryAcquire that must succeed as a call, granted or not; only
// for the test's own goroutine.
func Acquire(t testing.TB, c coordinatorv1.CoordinatorClient, name, holder string, ttl, wait time.Duration) *coordinatorv1.TryAcquireResponse {
	t.Helper()
	resp, err := TryAcquire(c, name, holder, ttl, wait)
	if err != nil {
		t.Fatalf("TryAcquire(%s, %s): %v", name, holder, err)
	}
	return resp
}

// MustAcquire is Acquire without a wait that must be granted; it returns
// the lease.
func MustAcquire(t testing.TB, c coordinatorv1.CoordinatorClient, name, holder string, ttl time.Duration) *coordinatorv1.Lease {
	t.Helper()
	resp := Acquire(t, c, name, holder, ttl, 0)
	if !resp.GetAcquired() {
		t.Fatalf("%s could not acquire %s: held by %q", holder, name, resp.GetHolder())
	}
	return resp.GetLease()
}

// WaitQueued waits until exactly n callers are queued for name, failing t
// after callTimeout. (It polls by itself: a test kit outside
// internal/testkit imports none of those, testwait included.)
func WaitQueued(t testing.TB, c coordinatorv1.CoordinatorClient, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	for {
		desc, err := c.Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if int(desc.GetWaiters()) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d waiters queued on %s, want %d", callTimeout, desc.GetWaiters(), name, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
