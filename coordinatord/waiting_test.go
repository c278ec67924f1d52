package coordinatord_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/coordinatord"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

// TestFIFOAcrossCoordinators queues waiters alternately through two
// coordinators sharing one Redis: each coordinator wakes only its first
// waiter, yet the name goes round in arrival order across both.
func TestFIFOAcrossCoordinators(t *testing.T) { forEachPath(t, testFIFOAcrossCoordinators) }

func testFIFOAcrossCoordinators(t *testing.T, via string) {
	cfg := testConfig(t, coordinatord.StoreRedis)
	coords := []*coordinator{startVia(t, cfg, via), startVia(t, cfg, via)}
	const waiters = 60
	held := servertest.MustAcquire(t, coords[0].client, "shared", "owner", time.Minute)
	order := make(chan string, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		c := coords[i%2]
		holder := fmt.Sprintf("w%d", i)
		wg.Go(func() {
			resp, err := servertest.TryAcquire(c.client, "shared", holder, time.Minute, time.Minute)
			if err != nil || !resp.GetAcquired() {
				t.Errorf("%s: %v, %v", holder, resp, err)
				return
			}
			order <- holder
			// Released through the other coordinator: it must wake its own
			// first waiter.
			other := coords[(i+1)%2]
			if _, err := other.client.Release(context.Background(), &coordinatorv1.ReleaseRequest{Name: "shared", Holder: holder, Token: resp.GetLease().GetToken()}); err != nil {
				t.Error(err)
			}
		})
		servertest.WaitQueued(t, coords[0].client, "shared", i+1)
	}
	release(t, coords[0], held)
	wg.Wait()
	close(order)
	checkGrantOrder(t, order, waiters)
}

func release(t *testing.T, c *coordinator, l *coordinatorv1.Lease) {
	t.Helper()
	resp, err := c.client.Release(servertest.Timeout(t, 10*time.Second), &coordinatorv1.ReleaseRequest{Name: l.GetName(), Holder: l.GetHolder(), Token: l.GetToken()})
	if err != nil || !resp.GetReleased() {
		t.Fatalf("Release(%s by %s) = %v, %v", l.GetName(), l.GetHolder(), resp, err)
	}
}
