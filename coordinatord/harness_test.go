package coordinatord_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordinator-dev/coordinator/coordinatord"
	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// The process's tests, and the service's tests through a whole coordinator
// (election, fault, observe, rules, service, session, waiting), share this
// harness: coordtest runs the coordinator on a loopback port. The service's
// tests of a bare Service, without the process, are in package server.

// storeKinds are the stores every service test runs against.
var storeKinds = []string{coordinatord.StoreMemory, coordinatord.StoreRedis}

func testConfig(t *testing.T, kind string) coordinatord.Config { return coordtest.Config(t, kind) }

// coordinator is a whole coordinator under test, reached over a real
// loopback listener with a plaintext client.
type coordinator struct {
	*coordtest.Coordinator
	client coordinatorv1.CoordinatorClient
	conn   *grpc.ClientConn
}

func start(t *testing.T, cfg coordinatord.Config) *coordinator {
	t.Helper()
	c := &coordinator{Coordinator: coordtest.Start(t, cfg)}
	c.conn = c.Dial(t)
	c.client = coordinatorv1.NewCoordinatorClient(c.conn)
	return c
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

// checkGrantOrder checks that the holders on the closed channel order were
// granted in arrival order, w0, w1, …, and, when want > 0, that there were
// want of them.
func checkGrantOrder(t *testing.T, order <-chan string, want int) {
	t.Helper()
	i := 0
	for holder := range order {
		if w := fmt.Sprintf("w%d", i); holder != w {
			t.Fatalf("grant #%d went to %s, want %s", i, holder, w)
		}
		i++
	}
	if want > 0 && i != want {
		t.Fatalf("%d of %d waiters granted", i, want)
	}
}
