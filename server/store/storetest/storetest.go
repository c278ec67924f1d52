// Package storetest is the conformance suite every store.Store must pass.
// It drives the store through its interface with real time and short TTLs,
// so the same assertions hold for the memory store and for Redis.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// Options are the store settings a test needs.
type Options struct {
	// LockDelay keeps the name of an expired lease from being granted again.
	LockDelay time.Duration
}

// Factory returns a fresh, empty store for one test, with opts. The suite
// closes it.
type Factory func(t *testing.T, opts Options) store.Store

// Run runs every conformance test against stores made by newStore.
func Run(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
		opts Options
	}{
		{"GrantThenRefuseOtherHolder", testGrantThenRefuse, Options{}},
		{"ReacquireByHolderIsIdempotent", testReacquireIdempotent, Options{}},
		{"TokensIncreaseAcrossReleaseAndExpiry", testTokensIncrease, Options{}},
		{"ExpiredLeaseIsGrantedToAnother", testExpiry, Options{}},
		{"RenewIsCompareAndSet", testRenewCAS, Options{}},
		{"RenewMayShortenLease", testRenewShortens, Options{}},
		{"ReleaseIsCompareAndSet", testReleaseCAS, Options{}},
		{"DescribeReportsLeaseAndLastToken", testDescribe, Options{}},
		{"WaitersAreServedInArrivalOrder", testFIFO, Options{}},
		{"NonWaiterIsRefusedWhileWaitersQueue", testNonWaiterRefused, Options{}},
		{"DeadWaiterIsDroppedAfterItsTTL", testDeadWaiterPruned, Options{}},
		{"DequeueLetsTheNextWaiterIn", testDequeue, Options{}},
		{"SubscribersHearOfChanges", testSubscribe, Options{}},
		{"ListPagesThroughHeldLeases", testList, Options{}},
		{"NamesAreOpaque", testOpaqueNames, Options{}},
		{"ContendedLeasesNeverOverlap", testContention, Options{}},
		{"LockDelayFollowsExpiryNotRelease", testLockDelay, Options{LockDelay: lockDelay}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, tc.opts)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

const (
	longTTL   = time.Minute
	shortTTL  = 150 * time.Millisecond
	lockDelay = 400 * time.Millisecond
)

func acquire(t *testing.T, s store.Store, req store.AcquireRequest) store.AcquireResult {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = longTTL
	}
	if req.Waiter != "" && req.WaiterTTL == 0 {
		req.WaiterTTL = longTTL
	}
	res, err := s.Acquire(context.Background(), req)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", req, err)
	}
	return res
}

func mustAcquire(t *testing.T, s store.Store, name, holder string) store.Lease {
	t.Helper()
	res := acquire(t, s, store.AcquireRequest{Name: name, Holder: holder})
	if !res.Acquired {
		t.Fatalf("%s could not acquire %q (held by %q)", holder, name, res.Lease.Holder)
	}
	return res.Lease
}

func mustRelease(t *testing.T, s store.Store, l store.Lease) {
	t.Helper()
	ok, err := s.Release(context.Background(), l.Name, l.Holder, l.Token)
	if err != nil || !ok {
		t.Fatalf("Release(%s, %s, %d) = %v, %v; want true", l.Name, l.Holder, l.Token, ok, err)
	}
}

func testGrantThenRefuse(t *testing.T, s store.Store) {
	before := time.Now()
	l := mustAcquire(t, s, "job", "a")
	if l.Name != "job" || l.Holder != "a" || l.Token == 0 || l.TTL != longTTL {
		t.Fatalf("granted lease = %+v", l)
	}
	// The store's clock may differ from ours a little, never by much.
	if d := l.ExpiresAt.Sub(before.Add(longTTL)); d < -2*time.Second || d > 2*time.Second {
		t.Fatalf("expires_at %v is %v away from now+ttl", l.ExpiresAt, d)
	}
	res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "b"})
	if res.Acquired {
		t.Fatal("b acquired a lease a holds")
	}
	if res.Lease.Holder != "a" || res.Lease.Token != l.Token {
		t.Fatalf("refusal reports holder %q token %d, want a %d", res.Lease.Holder, res.Lease.Token, l.Token)
	}
	if !res.RetryAt.Equal(l.ExpiresAt) && res.RetryAt.Sub(l.ExpiresAt).Abs() > 5*time.Millisecond {
		t.Fatalf("refusal's RetryAt %v; want the lease's expiry %v", res.RetryAt, l.ExpiresAt)
	}
}

func testReacquireIdempotent(t *testing.T, s store.Store) {
	first := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", Value: []byte("v1"), TTL: time.Second})
	again := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", Value: []byte("v1"), TTL: longTTL})
	if !again.Acquired || again.Lease.Token != first.Lease.Token {
		t.Fatalf("reacquire = %+v, want the same token %d", again, first.Lease.Token)
	}
	if again.Lease.TTL != longTTL || !again.Lease.ExpiresAt.After(first.Lease.ExpiresAt) {
		t.Fatalf("reacquire did not take the new ttl: %+v", again.Lease)
	}
	if again.Changed {
		t.Fatal("reacquire with the same value reported a change")
	}
	proclaimed := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", Value: []byte("v2")})
	if !proclaimed.Changed || !bytes.Equal(proclaimed.Lease.Value, []byte("v2")) || proclaimed.Lease.Token != first.Lease.Token {
		t.Fatalf("reacquire with a new value = %+v", proclaimed)
	}
}

func testTokensIncrease(t *testing.T, s store.Store) {
	var last uint64
	check := func(l store.Lease) {
		t.Helper()
		if l.Token <= last {
			t.Fatalf("token %d after %d", l.Token, last)
		}
		last = l.Token
	}
	for i := range 3 {
		l := mustAcquire(t, s, "job", fmt.Sprintf("h%d", i))
		check(l)
		mustRelease(t, s, l)
	}
	res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "x", TTL: shortTTL})
	check(res.Lease)
	time.Sleep(shortTTL + 50*time.Millisecond)
	check(mustAcquire(t, s, "job", "y"))
	// Another name has its own counter, but it too only goes up.
	other := mustAcquire(t, s, "other", "a")
	mustRelease(t, s, other)
	if again := mustAcquire(t, s, "other", "a"); again.Token <= other.Token {
		t.Fatalf("other: token %d after %d", again.Token, other.Token)
	}
}

func testExpiry(t *testing.T, s store.Store) {
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", TTL: shortTTL})
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "b"}); res.Acquired {
		t.Fatal("b acquired before a's lease expired")
	}
	time.Sleep(shortTTL + 50*time.Millisecond)
	mustAcquire(t, s, "job", "b")
}

func testRenewCAS(t *testing.T, s store.Store) {
	ctx := context.Background()
	l := mustAcquire(t, s, "job", "a")
	expired := acquire(t, s, store.AcquireRequest{Name: "short", Holder: "a", TTL: shortTTL}).Lease
	released := mustAcquire(t, s, "gone", "a")
	mustRelease(t, s, released)
	time.Sleep(shortTTL + 50*time.Millisecond)

	for _, tc := range []struct {
		name, lease, holder string
		token               uint64
	}{
		{"other holder", "job", "b", l.Token},
		{"stale token", "job", "a", l.Token - 1},
		{"newer token", "job", "a", l.Token + 1},
		{"expired", "short", "a", expired.Token},
		{"released", "gone", "a", released.Token},
		{"never granted", "nothing", "a", 1},
	} {
		if _, err := s.Renew(ctx, tc.lease, tc.holder, tc.token, longTTL); !errors.Is(err, store.ErrLeaseNotHeld) {
			t.Errorf("%s: Renew err = %v, want ErrLeaseNotHeld", tc.name, err)
		}
	}
	renewed, err := s.Renew(ctx, "job", "a", l.Token, 2*longTTL)
	if err != nil {
		t.Fatalf("Renew by the holder: %v", err)
	}
	if renewed.Token != l.Token || renewed.TTL != 2*longTTL || !renewed.ExpiresAt.After(l.ExpiresAt) {
		t.Fatalf("renewed = %+v, was %+v", renewed, l)
	}
}

func testRenewShortens(t *testing.T, s store.Store) {
	l := mustAcquire(t, s, "job", "a")
	if _, err := s.Renew(context.Background(), "job", "a", l.Token, shortTTL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(shortTTL + 50*time.Millisecond)
	mustAcquire(t, s, "job", "b")
}

func testReleaseCAS(t *testing.T, s store.Store) {
	ctx := context.Background()
	l := mustAcquire(t, s, "job", "a")
	for _, tc := range []struct {
		name, holder string
		token        uint64
	}{
		{"other holder", "b", l.Token},
		{"stale token", "a", l.Token - 1},
	} {
		if ok, err := s.Release(ctx, "job", tc.holder, tc.token); err != nil || ok {
			t.Errorf("%s: Release = %v, %v; want false", tc.name, ok, err)
		}
	}
	mustRelease(t, s, l)
	if ok, err := s.Release(ctx, "job", "a", l.Token); err != nil || ok {
		t.Fatalf("second Release = %v, %v; want false (safe to retry)", ok, err)
	}
	mustAcquire(t, s, "job", "b")
}

func testDescribe(t *testing.T, s store.Store) {
	ctx := context.Background()
	d, err := s.Describe(ctx, "job")
	if err != nil || d.Held || d.LastToken != 0 {
		t.Fatalf("Describe of a new name = %+v, %v", d, err)
	}
	l := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", Value: []byte("v")}).Lease
	d, err = s.Describe(ctx, "job")
	if err != nil || !d.Held || d.Lease.Holder != "a" || d.Lease.Token != l.Token || d.LastToken != l.Token || string(d.Lease.Value) != "v" {
		t.Fatalf("Describe of a held name = %+v, %v", d, err)
	}
	mustRelease(t, s, l)
	d, err = s.Describe(ctx, "job")
	if err != nil || d.Held || d.LastToken != l.Token {
		t.Fatalf("Describe after release = %+v, %v; want not held, last token %d", d, err, l.Token)
	}
}

func testFIFO(t *testing.T, s store.Store) {
	holder := mustAcquire(t, s, "job", "owner")
	const n = 5
	for i := range n {
		w := fmt.Sprintf("w%d", i)
		if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: w, Waiter: w}); res.Acquired {
			t.Fatalf("%s acquired a held lease", w)
		}
	}
	mustRelease(t, s, holder)
	for i := range n {
		// Everyone tries, youngest first: only the oldest waiter may win.
		var winner store.Lease
		for j := n - 1; j >= i; j-- {
			w := fmt.Sprintf("w%d", j)
			res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: w, Waiter: w})
			if res.Acquired {
				if j != i {
					t.Fatalf("%s was granted before w%d", w, i)
				}
				winner = res.Lease
			}
		}
		if winner.Holder == "" {
			t.Fatalf("w%d was not granted", i)
		}
		mustRelease(t, s, winner)
	}
}

func testNonWaiterRefused(t *testing.T, s store.Store) {
	l := mustAcquire(t, s, "job", "owner")
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w", Waiter: "w"})
	mustRelease(t, s, l)
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "impatient"}); res.Acquired {
		t.Fatal("a request without a place in the queue jumped it")
	}
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w", Waiter: "w"}); !res.Acquired {
		t.Fatal("the queued waiter was not granted")
	}
}

func testDeadWaiterPruned(t *testing.T, s store.Store) {
	l := mustAcquire(t, s, "job", "owner")
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "dead", Waiter: "dead", WaiterTTL: shortTTL})
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "alive", Waiter: "alive"})
	mustRelease(t, s, l)
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "alive", Waiter: "alive"}); res.Acquired {
		t.Fatal("the second waiter overtook a live first waiter")
	}
	time.Sleep(shortTTL + 50*time.Millisecond)
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "alive", Waiter: "alive"}); !res.Acquired {
		t.Fatal("a dead waiter held the queue up past its ttl")
	}
}

func testDequeue(t *testing.T, s store.Store) {
	l := mustAcquire(t, s, "job", "owner")
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "quitter", Waiter: "quitter"})
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "next", Waiter: "next"})
	mustRelease(t, s, l)

	woken := make(chan string, 10)
	defer s.Subscribe(func(name string) { woken <- name })()
	if err := s.Dequeue(context.Background(), "job", "quitter"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, woken, "job")
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "next", Waiter: "next"}); !res.Acquired {
		t.Fatal("the next waiter was not granted after the first left")
	}
}

func waitFor(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == want {
				return
			}
		case <-timeout:
			t.Fatalf("no notification for %q", want)
		}
	}
}

func testSubscribe(t *testing.T, s store.Store) {
	ch := make(chan string, 100)
	unsubscribe := s.Subscribe(func(name string) {
		select {
		case ch <- name:
		default:
		}
	})
	defer unsubscribe()
	// A subscription may take a moment to be live; the store promises delivery
	// only after Subscribe returns, which Redis pub/sub meets once subscribed.
	time.Sleep(100 * time.Millisecond)
	if d, err := s.Watch(context.Background(), "granted", time.Minute); err != nil || d.Held {
		t.Fatalf("Watch of a new name = %+v, %v", d, err)
	}

	l := mustAcquire(t, s, "granted", "a")
	waitFor(t, ch, "granted")
	acquire(t, s, store.AcquireRequest{Name: "granted", Holder: "a", Value: []byte("new")})
	waitFor(t, ch, "granted")
	mustRelease(t, s, store.Lease{Name: "granted", Holder: "a", Token: l.Token})
	waitFor(t, ch, "granted")
}

func testList(t *testing.T, s store.Store) {
	ctx := context.Background()
	want := []string{"team/a", "team/b", "team/c", "team/d", "team/e"}
	for _, name := range want {
		mustAcquire(t, s, name, "h")
	}
	mustAcquire(t, s, "other/x", "h")
	mustRelease(t, s, mustAcquire(t, s, "team/released", "h"))

	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatal("List does not end")
		}
		page, err := s.List(ctx, "team/", cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Leases) > 2 {
			t.Fatalf("page of %d leases, limit 2", len(page.Leases))
		}
		for _, l := range page.Leases {
			if l.Holder != "h" || l.Token == 0 {
				t.Fatalf("listed lease %+v", l)
			}
			got = append(got, l.Name)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
}

func testOpaqueNames(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, name := range []string{"}abc", "a{b}c", "{x}", "100%", "a:b:c", "名前/ジョブ", "a b", "%7B"} {
		l := mustAcquire(t, s, name, "h")
		d, err := s.Describe(ctx, name)
		if err != nil || !d.Held || d.Lease.Name != name || d.Lease.Token != l.Token {
			t.Errorf("Describe(%q) = %+v, %v", name, d, err)
		}
		page, err := s.List(ctx, name, "", 10)
		if err != nil || len(page.Leases) == 0 || page.Leases[0].Name != name {
			t.Errorf("List(%q) = %+v, %v", name, page, err)
		}
	}
}

// testContention has goroutines fight over a few names with short leases and
// random pauses. Each one that believes it holds a lease acts on a Resource
// that checks fencing tokens, the way a real protected resource should: an
// overlap of unexpired leases or a token that goes backwards fails the test.
func testContention(t *testing.T, s store.Store) {
	const (
		workers = 32
		rounds  = 40
		ttl     = 100 * time.Millisecond
	)
	names := []string{"n0", "n1", "n2"}
	resources := map[string]*Resource{}
	for _, n := range names {
		resources[n] = &Resource{}
	}
	var grants atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			holder := fmt.Sprintf("worker-%d", w)
			for range rounds {
				name := names[rng.IntN(len(names))]
				sent := time.Now()
				res, err := s.Acquire(context.Background(), store.AcquireRequest{Name: name, Holder: holder, TTL: ttl})
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Acquired {
					time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
					continue
				}
				grants.Add(1)
				// The lease is ours until sent+ttl by our own clock, less a margin.
				validUntil := sent.Add(ttl - 20*time.Millisecond)
				r := resources[name]
				if err := r.Enter(holder, res.Lease.Token, validUntil); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				r.Leave(holder)
				if rng.IntN(4) == 0 {
					// Vanish without releasing: the lease must expire.
					continue
				}
				if _, err := s.Release(context.Background(), name, holder, res.Lease.Token); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if grants.Load() < int64(len(names)) {
		t.Fatalf("only %d grants: the test did not contend", grants.Load())
	}
}

func testLockDelay(t *testing.T, s store.Store) {
	ctx := context.Background()
	released := mustAcquire(t, s, "released", "a")
	mustRelease(t, s, released)
	mustAcquire(t, s, "released", "b") // a clean release never delays

	expired := acquire(t, s, store.AcquireRequest{Name: "expired", Holder: "a", TTL: shortTTL}).Lease
	time.Sleep(shortTTL + 50*time.Millisecond)
	if res := acquire(t, s, store.AcquireRequest{Name: "expired", Holder: "b"}); res.Acquired {
		t.Fatal("granted during the lock delay")
	} else if until := time.Until(res.RetryAt); until <= 0 || until > lockDelay+time.Second {
		t.Fatalf("refused in the lock delay with RetryAt %v away", until)
	}
	if res := acquire(t, s, store.AcquireRequest{Name: "expired", Holder: "a"}); res.Acquired {
		t.Fatal("the expired holder got its name back during the lock delay")
	}
	if d, err := s.Describe(ctx, "expired"); err != nil || d.Held {
		t.Fatalf("Describe during the lock delay = %+v, %v; want not held", d, err)
	}
	if _, err := s.Renew(ctx, "expired", "a", expired.Token, longTTL); !errors.Is(err, store.ErrLeaseNotHeld) {
		t.Fatalf("Renew during the lock delay: %v; want ErrLeaseNotHeld", err)
	}
	if ok, err := s.Release(ctx, "expired", "a", expired.Token); err != nil || ok {
		t.Fatalf("Release during the lock delay = %v, %v; want false", ok, err)
	}
	time.Sleep(lockDelay)
	if l := mustAcquire(t, s, "expired", "b"); l.Token <= expired.Token {
		t.Fatalf("token %d after %d", l.Token, expired.Token)
	}
}
