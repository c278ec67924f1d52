package coordinatord_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordinator-dev/coordinator/coordinatord"
	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/servertest"
	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

// The process's tests, and the service's tests through a whole coordinator
// (election, fault, observe, rules, service, session, waiting), share this
// harness: coordtest runs the coordinator on a loopback port, and servertest
// makes the usual calls, as it does for the service's tests of a bare
// Service, without the process, in package server.

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

// ctxTimeout is servertest.Timeout, as readme_test.go calls it.
func ctxTimeout(t *testing.T, d time.Duration) context.Context { return servertest.Timeout(t, d) }

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

// contendedResources returns the names that the contention tests' workers
// fight over, and a fenced resource for each.
func contendedResources() ([]string, map[string]*storetest.Resource) {
	names := []string{"r0", "r1", "r2"}
	resources := map[string]*storetest.Resource{}
	for _, n := range names {
		resources[n] = &storetest.Resource{}
	}
	return names, resources
}

// actInside acts at resource as holder, with token, for a pause of up to
// 3 ms that rng picks, inside a lease valid until validUntil; it reports
// whether the resource let it in.
func actInside(t *testing.T, resource *storetest.Resource, holder string, token uint64, validUntil time.Time, rng *rand.Rand) bool {
	if err := resource.Enter(holder, token, validUntil); err != nil {
		t.Error(err)
		return false
	}
	time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond) // a pause inside the lease
	resource.Leave(holder)
	return true
}

// goAcquire has holder ask for name, waiting up to wait, on a goroutine of
// its own; the answer comes on the channel returned.
func goAcquire(t *testing.T, c *coordinator, name, holder string, wait time.Duration) <-chan *coordinatorv1.TryAcquireResponse {
	got := make(chan *coordinatorv1.TryAcquireResponse, 1)
	go func() {
		resp, err := servertest.TryAcquire(c.client, name, holder, time.Minute, wait)
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	return got
}

// granted waits up to within for the answer on got, which must be a grant,
// and returns it.
func granted(t *testing.T, got <-chan *coordinatorv1.TryAcquireResponse, within time.Duration, who string) *coordinatorv1.TryAcquireResponse {
	t.Helper()
	select {
	case resp := <-got:
		if !resp.GetAcquired() {
			t.Fatalf("%s got %v; want a grant", who, resp)
		}
		return resp
	case <-time.After(within):
		t.Fatalf("%s was not granted the name within %s", who, within)
		return nil
	}
}
