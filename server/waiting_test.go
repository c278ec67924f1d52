package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/servertest"
	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
	"github.com/coordinator-dev/coordinator/server/store/redisstore"
)

// countingStore counts the store calls that waiting costs. It wraps a real
// store; nothing is faked.
type countingStore struct {
	store.Store
	waiterAcquires atomic.Int64 // Acquire calls of waiting callers
	refreshes      atomic.Int64

	mu sync.Mutex
	// waiterOf maps holders to the waiter ids of their waiting calls.
	waiterOf map[string]string
	// unrefreshed is a holder whose place RefreshWaiters leaves out, as if
	// its refreshes were lost.
	unrefreshed string
	// deaf, when set, loses every announcement: Changes never delivers.
	deaf bool
}

func (c *countingStore) Changes(name string) *store.Changes {
	if c.deaf {
		return store.NewChanges(make(chan store.Change), func() {})
	}
	return c.Store.Changes(name)
}

func (c *countingStore) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if req.Waiter != "" {
		c.waiterAcquires.Add(1)
		c.mu.Lock()
		if c.waiterOf == nil {
			c.waiterOf = map[string]string{}
		}
		c.waiterOf[req.Holder] = req.Waiter
		c.mu.Unlock()
	}
	return c.Store.Acquire(ctx, req)
}

func (c *countingStore) RefreshWaiters(ctx context.Context, name string, waiters []string, ttl time.Duration) error {
	c.refreshes.Add(1)
	c.mu.Lock()
	if skip, ok := c.waiterOf[c.unrefreshed]; ok {
		waiters = slices.DeleteFunc(slices.Clone(waiters), func(w string) bool { return w == skip })
	}
	c.mu.Unlock()
	return c.Store.RefreshWaiters(ctx, name, waiters, ttl)
}

// openStore opens a store of the given kind; a Redis one uses the shared
// test Redis under a key prefix of its own.
func openStore(t *testing.T, kind string) store.Store {
	t.Helper()
	if kind == storeMemory {
		st := memstore.New()
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	st, err := redisstore.NewFromURL(context.Background(), redistest.URL(t), redisstore.Options{KeyPrefix: "test-" + hex.EncodeToString(b[:])})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// serveCounted serves a Service over a counting wrapper of a store of the
// given kind on a real loopback listener.
func serveCounted(t *testing.T, kind string) (*countingStore, *coordinator) {
	t.Helper()
	st := &countingStore{Store: openStore(t, kind)}
	_, conn := serveStore(t, st, server.ServiceOptions{})
	return st, &coordinator{client: coordinatorv1.NewCoordinatorClient(conn), conn: conn}
}

// parkWaiters queues n waiting callers w0..w(n-1) on name, in that order,
// and returns their answers as they come. Those still waiting when the test
// ends are cancelled.
func parkWaiters(t *testing.T, c *coordinator, name string, n int) <-chan *coordinatorv1.TryAcquireResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	granted := make(chan *coordinatorv1.TryAcquireResponse, n)
	for i := range n {
		wg.Go(func() {
			resp, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{
				Name: name, Holder: fmt.Sprintf("w%d", i), Ttl: servertest.Dur(time.Minute), Wait: servertest.Dur(time.Minute),
			})
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("w%d: %v", i, err)
				}
				return
			}
			granted <- resp
		})
		servertest.WaitQueued(t, c.client, name, i+1)
	}
	return granted
}

func release(t *testing.T, c *coordinator, l *coordinatorv1.Lease) {
	t.Helper()
	resp, err := c.client.Release(servertest.Timeout(t, 10*time.Second), &coordinatorv1.ReleaseRequest{Name: l.GetName(), Holder: l.GetHolder(), Token: l.GetToken()})
	if err != nil || !resp.GetReleased() {
		t.Fatalf("Release(%s by %s) = %v, %v", l.GetName(), l.GetHolder(), resp, err)
	}
}

// handOff releases held and waits for the parked waiter want to be granted
// the name next, within the time given; it returns want's lease.
func handOff(t *testing.T, c *coordinator, held *coordinatorv1.Lease, granted <-chan *coordinatorv1.TryAcquireResponse, want string, within time.Duration) *coordinatorv1.Lease {
	t.Helper()
	release(t, c, held)
	next := nextGrant(t, granted, within)
	if next.GetHolder() != want {
		t.Fatalf("%s's release of %s went to %s, want %s", held.GetHolder(), held.GetName(), next.GetHolder(), want)
	}
	return next
}

// nextGrant waits for the next answer of a parked waiter, which must be a
// grant.
func nextGrant(t *testing.T, granted <-chan *coordinatorv1.TryAcquireResponse, within time.Duration) *coordinatorv1.Lease {
	t.Helper()
	select {
	case resp := <-granted:
		if !resp.GetAcquired() {
			t.Fatalf("a waiter was answered %v; want a grant", resp)
		}
		return resp.GetLease()
	case <-time.After(within):
		t.Fatalf("no waiter was granted within %s", within)
		return nil
	}
}

// TestAReleaseWakesOnlyTheNextWaiter parks 200 waiters on one name and
// counts what a handoff costs the store: one Acquire call, the next
// waiter's grant. The waiter after it does not ask who holds the name: the
// line knows that from the grant, and the grant's own announcement is no
// news to it. The handoff is prompt: the holder's lease lasts a minute, so
// only the release's announcement can have woken the next waiter.
func TestAReleaseWakesOnlyTheNextWaiter(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const waiters = 200
			st, c := serveCounted(t, kind)
			held := servertest.MustAcquire(t, c.client, "herd", "owner", time.Minute)
			granted := parkWaiters(t, c, "herd", waiters)

			for i := range 3 {
				before := st.waiterAcquires.Load()
				released := time.Now()
				held = handOff(t, c, held, granted, fmt.Sprintf("w%d", i), 10*time.Second)
				took := time.Since(released)
				// Time for the grant's announcement to arrive, and for the
				// new first waiter to ask, if it wrongly did.
				time.Sleep(300 * time.Millisecond)
				if n := st.waiterAcquires.Load() - before; n != 1 {
					t.Fatalf("handoff %d (%s) cost %d Acquire calls with %d waiters queued; want 1, the grant", i, took, n, waiters-i)
				}
			}
		})
	}
}

// TestAReleaseHereWakesTheNextWaiterAtOnce loses every announcement: a
// release made through the coordinator of the waiters still wakes the next
// one, since the coordinator tells its line itself, both when the holder
// came from outside the line and when it was the waiter before (whom the
// next one was told to wait out: a minute, longer than the test).
func TestAReleaseHereWakesTheNextWaiterAtOnce(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			st := &countingStore{Store: openStore(t, kind), deaf: true}
			_, conn := serveStore(t, st, server.ServiceOptions{})
			c := &coordinator{client: coordinatorv1.NewCoordinatorClient(conn), conn: conn}
			held := servertest.MustAcquire(t, c.client, "deaf", "owner", time.Minute)
			granted := parkWaiters(t, c, "deaf", 3)
			for i := range 3 {
				held = handOff(t, c, held, granted, fmt.Sprintf("w%d", i), 20*time.Second)
			}
		})
	}
}

// TestTheNextWaiterTakesOverWhenAGrantRunsOut: the first waiter is granted
// a short lease and never releases it; the next one, told when that grant
// ends instead of asking, takes the name soon after, not before.
func TestTheNextWaiterTakesOverWhenAGrantRunsOut(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const ttl = 700 * time.Millisecond
			st, c := serveCounted(t, kind)
			held := servertest.MustAcquire(t, c.client, "runs-out", "owner", time.Minute)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			t.Cleanup(func() { cancel(); wg.Wait() })
			answers := make(chan *coordinatorv1.TryAcquireResponse, 2)
			for i := range 2 {
				wg.Go(func() {
					resp, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{
						Name: "runs-out", Holder: fmt.Sprintf("w%d", i), Ttl: servertest.Dur(ttl), Wait: servertest.Dur(time.Minute),
					})
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("w%d: %v", i, err)
						}
						return
					}
					answers <- resp
				})
				servertest.WaitQueued(t, c.client, "runs-out", i+1)
			}

			before := st.waiterAcquires.Load()
			released := time.Now()
			release(t, c, held)
			first := nextGrant(t, answers, 10*time.Second)
			if first.GetHolder() != "w0" {
				t.Fatalf("the release went to %s, want w0", first.GetHolder())
			}
			second := nextGrant(t, answers, 10*time.Second)
			if second.GetHolder() != "w1" || second.GetToken() <= first.GetToken() {
				t.Fatalf("then %s got token %d after w0's %d; want w1, a larger token", second.GetHolder(), second.GetToken(), first.GetToken())
			}
			// w0's grant began after the release was sent.
			if gap := time.Since(released); gap < ttl {
				t.Fatalf("w1 was granted %s after the release, within w0's grant of %s", gap, ttl)
			}
			// w0's grant, and w1's at its end (one more if it asked a moment
			// early by the store's clock, or in a lock delay).
			if n := st.waiterAcquires.Load() - before; n > 4 {
				t.Fatalf("the two grants cost %d Acquire calls; want 2 to 4", n)
			}
		})
	}
}

// TestParkedWaitersKeepTheirPlacesWithoutRetrying holds a name for several
// times the waiter TTL: the parked waiters send no Acquire at all (their
// places are refreshed together, one call per heartbeat), every place
// survives, and they are then served in arrival order.
func TestParkedWaitersKeepTheirPlacesWithoutRetrying(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const (
				waiters   = 5
				waiterTTL = 3 * time.Second // as in server/waiting.go
			)
			st, c := serveCounted(t, kind)
			held := servertest.MustAcquire(t, c.client, "parked", "owner", time.Minute)
			granted := parkWaiters(t, c, "parked", waiters)

			acquires, refreshes, parked := st.waiterAcquires.Load(), st.refreshes.Load(), time.Now()
			// Places that were not refreshed would have expired by then.
			testwait.Until(t, 30*time.Second, "the places refreshed 3 times, past the waiter TTL", func() bool {
				return st.refreshes.Load()-refreshes >= 3 && time.Since(parked) > waiterTTL+time.Second
			})
			if n := st.waiterAcquires.Load() - acquires; n != 0 {
				t.Fatalf("parked waiters sent %d Acquire calls in %s; want none", n, time.Since(parked))
			}
			desc, err := c.client.Describe(servertest.Timeout(t, 10*time.Second), &coordinatorv1.DescribeRequest{Name: "parked"})
			if err != nil || desc.GetWaiters() != waiters {
				t.Fatalf("after %s: Describe = %v, %v; want all %d waiters still queued", time.Since(parked), desc, err, waiters)
			}
			for i := range waiters {
				held = handOff(t, c, held, granted, fmt.Sprintf("w%d", i), 10*time.Second)
			}
		})
	}
}

// TestALineRecoversWhenItsFirstWaiterLostItsPlace loses the place of the
// first of three parked waiters (its refreshes go missing, as when the store
// was out of reach), so that it queues again behind the two others while
// still first in its coordinator's line. The name must still go round: to the
// waiter the store has first after a stall of a few seconds, then promptly to
// the others in the store's order.
func TestALineRecoversWhenItsFirstWaiterLostItsPlace(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			st, c := serveCounted(t, kind)
			st.mu.Lock()
			st.unrefreshed = "w0"
			st.mu.Unlock()
			held := servertest.MustAcquire(t, c.client, "lost", "owner", time.Minute)
			granted := parkWaiters(t, c, "lost", 3)
			testwait.Until(t, 20*time.Second, "w0's place timed out", func() bool {
				desc, err := c.client.Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: "lost"})
				if err != nil {
					t.Fatal(err)
				}
				return desc.GetWaiters() == 2
			})

			// The stall lasts twice the waiter TTL (3s), and a heartbeat.
			held = handOff(t, c, held, granted, "w1", 30*time.Second)
			for _, want := range []string{"w2", "w0"} {
				// Well within a second stall: the line was put in the store's order.
				held = handOff(t, c, held, granted, want, 5*time.Second)
			}
		})
	}
}
