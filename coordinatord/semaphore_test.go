package coordinatord_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

// share is TryAcquire of weight of a name of capacity, waiting up to wait.
func (c *coordinator) share(name, holder string, capacity, weight uint32, wait time.Duration) (*coordinatorv1.TryAcquireResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{
		Name: name, Holder: holder, Ttl: servertest.Dur(time.Minute), Wait: servertest.Dur(wait), Capacity: capacity, Weight: weight,
	})
}

func TestSemaphoreOverGRPC(t *testing.T) { forEachPath(t, testSemaphoreOverGRPC) }

// testSemaphoreOverGRPC: a name of capacity 3 takes three holders, each with
// its own token and weight; Describe and List show them all; a writer that
// waits for the whole capacity is granted once they release, before a reader
// that came after it.
func testSemaphoreOverGRPC(t *testing.T, via string) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			c := startVia(t, testConfig(t, kind), via)
			ctx := servertest.Timeout(t, time.Minute)
			var leases []*coordinatorv1.Lease
			for _, h := range []string{"a", "b", "c"} {
				resp, err := c.share("pool", h, 3, 1, 0)
				if err != nil || !resp.GetAcquired() || resp.GetLease().GetWeight() != 1 {
					t.Fatalf("%s: %v, %v", h, resp, err)
				}
				if n := len(leases); n > 0 && resp.GetLease().GetToken() <= leases[n-1].GetToken() {
					t.Fatalf("token %d after %d", resp.GetLease().GetToken(), leases[n-1].GetToken())
				}
				leases = append(leases, resp.GetLease())
			}
			if resp, err := c.share("pool", "d", 3, 1, 0); err != nil || resp.GetAcquired() || resp.GetHolder() == "" {
				t.Fatalf("a fourth holder: %v, %v; want refused naming a holder", resp, err)
			}
			d, err := c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: "pool"})
			if err != nil || len(d.GetHolders()) != 3 || d.GetCapacity() != 3 || d.GetLease().GetHolder() != "a" {
				t.Fatalf("Describe = %v, %v; want three holders of capacity 3", d, err)
			}
			list, err := c.client.List(ctx, &coordinatorv1.ListRequest{Prefix: "po"})
			if err != nil || len(list.GetLeases()) != 3 {
				t.Fatalf("List = %v, %v; want the three grants", list, err)
			}

			writer := make(chan *coordinatorv1.TryAcquireResponse, 1)
			go func() {
				resp, err := c.share("pool", "w", 3, 3, 20*time.Second)
				if err != nil {
					t.Error(err)
				}
				writer <- resp
			}()
			eventually(t, "the writer waits", func() bool {
				d, err := c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: "pool"})
				return err == nil && d.GetWaiters() == 1 && d.GetWaitingWeight() == 3
			})
			if resp, err := c.share("pool", "r", 3, 1, 0); err != nil || resp.GetAcquired() {
				t.Fatalf("a reader after the waiting writer: %v, %v; want refused", resp, err)
			}
			for _, l := range leases {
				if _, err := c.client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: "pool", Holder: l.GetHolder(), Token: l.GetToken()}); err != nil {
					t.Fatal(err)
				}
			}
			w := <-writer
			if !w.GetAcquired() || w.GetLease().GetWeight() != 3 || w.GetLease().GetToken() <= leases[2].GetToken() {
				t.Fatalf("the writer: %v; want granted weight 3 with a token above %d", w, leases[2].GetToken())
			}
		})
	}
}

func TestSemaphoreRefusals(t *testing.T) {
	cfg := testConfig(t, "memory")
	cfg.Limits.HoldersPerName = 2
	c := start(t, cfg)
	ctx := servertest.Timeout(t, time.Minute)
	if resp, err := c.share("pool", "a", 5, 1, 0); err != nil || !resp.GetAcquired() {
		t.Fatalf("%v, %v", resp, err)
	}

	// Another capacity while held: FailedPrecondition naming both.
	_, err := c.share("pool", "b", 3, 1, 0)
	st := status.Convert(err)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if st.Code() != codes.FailedPrecondition || info.GetReason() != "CAPACITY_MISMATCH" ||
		info.GetMetadata()["capacity"] != "5" || info.GetMetadata()["requested"] != "3" ||
		st.Message() != `name "pool" has capacity 5, request asked for 3` {
		t.Fatalf("another capacity: %v (%v); want FailedPrecondition CAPACITY_MISMATCH naming 5 and 3", err, info)
	}
	// An election on a semaphore's name.
	_, err = c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: "pool", Candidate: "x", Ttl: servertest.Dur(time.Minute)})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != "CAPACITY_MISMATCH" {
		t.Fatalf("Campaign on a semaphore: %v; want FailedPrecondition CAPACITY_MISMATCH", err)
	}
	// A weight above the capacity is invalid.
	if _, err := c.share("pool", "b", 5, 6, 0); fieldOf(err) != "weight" {
		t.Fatalf("weight 6 of 5: %v; want INVALID_FIELD weight", err)
	}
	// The holder cap, a setting, counted with the other caps.
	if resp, err := c.share("pool", "b", 5, 1, 0); err != nil || !resp.GetAcquired() {
		t.Fatalf("%v, %v", resp, err)
	}
	_, err = c.share("pool", "c", 5, 1, 0)
	wantRefusal(t, err, "COORDINATOR_MAX_HOLDERS_PER_NAME")
	if n := metric(t, c.Coordinator, `coordinator_limit_refusals_total{limit="holders_per_name"}`); n != 1 {
		t.Fatalf("holders_per_name refusals = %v, want 1", n)
	}
}

// TestObserveReportsASemaphoresHolders: Observe on a name of capacity above
// 1 sends its whole set of grants, at first and after each change.
func TestObserveReportsASemaphoresHolders(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	ctx := servertest.Timeout(t, time.Minute)
	a, err := c.share("pool", "a", 4, 2, 0)
	if err != nil || !a.GetAcquired() {
		t.Fatalf("%v, %v", a, err)
	}
	stream, err := c.client.Observe(ctx, &coordinatorv1.ObserveRequest{Election: "pool"})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want int) *coordinatorv1.LeaderEvent {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		ev := resp.GetEvent()
		if ev.GetKind() != coordinatorv1.LeaderEvent_KIND_HOLDERS || len(ev.GetHolders()) != want || ev.GetCapacity() != 4 {
			t.Fatalf("event %v; want KIND_HOLDERS with %d holders of capacity 4", resp, want)
		}
		return ev
	}
	if ev := next(1); ev.GetHolders()[0].GetWeight() != 2 {
		t.Fatalf("initial %v; want a of weight 2", ev)
	}
	if _, err := c.share("pool", "b", 4, 1, 0); err != nil {
		t.Fatal(err)
	}
	next(2)
	if _, err := c.client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: "pool", Holder: "a", Token: a.GetLease().GetToken()}); err != nil {
		t.Fatal(err)
	}
	if ev := next(1); ev.GetHolders()[0].GetHolder() != "b" {
		t.Fatalf("after a's release: %v; want b alone", ev)
	}
}
