package storetest

import (
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

// The semaphore behaviours: a name of capacity above 1 shared by weighted
// grants, each a lease of its own.

// share asks for weight of a name of capacity for holder, queueing it as
// waiter when waiter is not empty.
func share(t *testing.T, s Subject, name, holder string, capacity, weight int64, waiter string) store.AcquireResult {
	t.Helper()
	return acquire(t, s, store.AcquireRequest{Name: name, Holder: holder, Capacity: capacity, Weight: weight, Waiter: waiter})
}

func mustShare(t *testing.T, s Subject, name, holder string, capacity, weight int64) store.Lease {
	t.Helper()
	res := share(t, s, name, holder, capacity, weight, "")
	if !res.Acquired {
		t.Fatalf("%s could not take %d of %q (capacity %d)", holder, weight, name, capacity)
	}
	if res.Lease.Weight != weight {
		t.Fatalf("%s was granted weight %d, asked for %d", holder, res.Lease.Weight, weight)
	}
	return res.Lease
}

func holders(d store.Description) []string {
	out := make([]string, len(d.Holders))
	for i, l := range d.Holders {
		out[i] = fmt.Sprintf("%s:%d", l.Holder, l.Weight)
	}
	return out
}

func testSemaphoreGrantsUpToItsCapacity(t *testing.T, s Subject) {
	ctx := context.Background()
	var last uint64
	for _, h := range []string{"a", "b", "c"} {
		l := mustShare(t, s, "pool", h, 3, 1)
		if l.Token <= last {
			t.Fatalf("%s got token %d after %d: tokens must increase across holders", h, l.Token, last)
		}
		last = l.Token
	}
	res := share(t, s, "pool", "d", 3, 1, "")
	if res.Acquired {
		t.Fatal("a fourth holder was granted a name of capacity 3")
	}
	if res.Lease.Holder == "" || res.RetryAt.IsZero() {
		t.Fatalf("refusal %+v: want a holder named and a retry time", res)
	}
	d, err := s.Describe(ctx, "pool")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(holders(d)); got != "[a:1 b:1 c:1]" || !d.Held || d.Capacity != 3 || d.LastToken != last || d.Lease.Holder != "a" {
		t.Fatalf("Describe = %+v (holders %s); want a, b and c of weight 1 in token order, capacity 3, last token %d", d, got, last)
	}
	page, err := s.List(ctx, "po", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Leases) != 3 || page.Leases[2].Holder != "c" || page.Leases[2].Weight != 1 {
		t.Fatalf("List = %+v; want the three grants", page)
	}
	ds, err := s.Watch(ctx, []string{"pool"}, time.Minute)
	if err != nil || len(ds) != 1 || len(ds[0].Holders) != 3 || ds[0].Capacity != 3 {
		t.Fatalf("Watch = %+v, %v; want the three grants and the capacity", ds, err)
	}
	mustRelease(t, s, d.Holders[1])
	if l := mustShare(t, s, "pool", "d", 3, 1); l.Token <= last {
		t.Fatalf("token %d after %d", l.Token, last)
	}
}

func testSemaphoreWeightsAddUp(t *testing.T, s Subject) {
	mustShare(t, s, "pool", "a", 5, 3)
	if res := share(t, s, "pool", "b", 5, 3, ""); res.Acquired {
		t.Fatal("granted 3 beside 3 in a capacity of 5")
	}
	b := mustShare(t, s, "pool", "b", 5, 2)
	if res := share(t, s, "pool", "c", 5, 1, ""); res.Acquired {
		t.Fatal("granted 1 beside 5 in a capacity of 5")
	}
	mustRelease(t, s, b)
	mustShare(t, s, "pool", "c", 5, 1)
	mustShare(t, s, "pool", "d", 5, 1)
}

// testWriterBehindReadersComesFirst: a read-write lock is a capacity with
// readers of weight 1 and writers of all of it. A writer waiting behind
// readers is granted before the readers that came after it.
func testWriterBehindReadersComesFirst(t *testing.T, s Subject) {
	const rw = store.RWCapacity
	r1 := mustShare(t, s, "rw", "r1", rw, 1)
	r2 := mustShare(t, s, "rw", "r2", rw, 1)
	if res := share(t, s, "rw", "w", rw, rw, "w"); res.Acquired {
		t.Fatal("a writer was granted beside readers")
	}
	if res := share(t, s, "rw", "r3", rw, 1, "r3"); res.Acquired {
		t.Fatal("a reader that came after a waiting writer was granted before it")
	}
	if res := share(t, s, "rw", "r4", rw, 1, ""); res.Acquired {
		t.Fatal("a reader that does not wait was granted while a writer waits")
	}
	d, err := s.Describe(context.Background(), "rw")
	if err != nil || d.Waiters != 2 || d.WaitingWeight != rw+1 {
		t.Fatalf("Describe = %+v, %v; want 2 waiters weighing %d", d, err, rw+1)
	}
	mustRelease(t, s, r1)
	if res := share(t, s, "rw", "r3", rw, 1, "r3"); res.Acquired {
		t.Fatal("a later reader passed the waiting writer")
	}
	mustRelease(t, s, r2)
	if res := share(t, s, "rw", "r3", rw, 1, "r3"); res.Acquired {
		t.Fatal("a later reader passed the waiting writer once the name was free")
	}
	w := share(t, s, "rw", "w", rw, rw, "w")
	if !w.Acquired || w.Lease.Weight != rw {
		t.Fatalf("the writer was not granted the free name: %+v", w)
	}
	if w.Lease.Token <= r2.Token {
		t.Fatalf("the writer's token %d is not above the readers' %d", w.Lease.Token, r2.Token)
	}
	if res := share(t, s, "rw", "r3", rw, 1, "r3"); res.Acquired {
		t.Fatal("a reader was granted beside the writer")
	}
	mustRelease(t, s, w.Lease)
	if res := share(t, s, "rw", "r3", rw, 1, "r3"); !res.Acquired || res.Lease.Token <= w.Lease.Token {
		t.Fatalf("the reader after the writer: %+v", res)
	}
}

// testWaiterPassesOnlyWhenThoseAheadFit: a waiter is granted before waiters
// ahead of it only when they would all fit beside it, so that it never
// delays them.
func testWaiterPassesOnlyWhenThoseAheadFit(t *testing.T, s Subject) {
	h := mustShare(t, s, "pool", "h", 4, 4)
	for _, w := range []struct {
		id     string
		weight int64
	}{{"a", 2}, {"b", 2}, {"c", 3}} {
		if res := share(t, s, "pool", w.id, 4, w.weight, w.id); res.Acquired {
			t.Fatalf("%s was granted a full name", w.id)
		}
	}
	mustRelease(t, s, h)
	// a (2) has not retried yet; b (2) fits beside it.
	if res := share(t, s, "pool", "b", 4, 2, "b"); !res.Acquired {
		t.Fatal("b was refused though a, ahead of it, fits beside it")
	}
	// c (3) would fit alone in the 2 left, no: 2 + 3 > 4; nor beside a.
	if res := share(t, s, "pool", "c", 4, 3, "c"); res.Acquired {
		t.Fatal("c passed a, which does not fit beside it")
	}
	if res := share(t, s, "pool", "a", 4, 2, "a"); !res.Acquired {
		t.Fatal("a was refused its place")
	}
	// d (1) arrives behind c (3): with 0 free it waits; c comes first.
	if res := share(t, s, "pool", "d", 4, 1, "d"); res.Acquired {
		t.Fatal("d was granted a full name")
	}
	d, err := s.Describe(context.Background(), "pool")
	if err != nil || fmt.Sprint(holders(d)) != "[b:2 a:2]" || d.Waiters != 2 || d.WaitingWeight != 4 {
		t.Fatalf("Describe = %+v, %v; want b and a holding, c and d waiting with 4", d, err)
	}
}

func testCapacityMustAgree(t *testing.T, s Subject) {
	ctx := context.Background()
	l := mustShare(t, s, "pool", "a", 5, 1)
	_, err := s.Acquire(ctx, store.AcquireRequest{Name: "pool", Holder: "b", TTL: longTTL, Capacity: 3})
	var ce *store.CapacityError
	if !errors.As(err, &ce) || ce.Have != 5 || ce.Asked != 3 || ce.Name != "pool" {
		t.Fatalf("an acquire of capacity 3 on a held name of 5: %v; want a CapacityError naming both", err)
	}
	if _, err := s.Acquire(ctx, store.AcquireRequest{Name: "pool", Holder: "a", TTL: longTTL}); !errors.As(err, &ce) {
		t.Fatalf("the holder renewing with capacity 1: %v; want a CapacityError", err)
	}
	// A waiter keeps the capacity too.
	mustShare(t, s, "pool", "b", 5, 4)
	if res := share(t, s, "pool", "w", 5, 2, "w"); res.Acquired {
		t.Fatal("granted past the capacity")
	}
	mustRelease(t, s, l)
	d, _ := s.Describe(ctx, "pool")
	mustRelease(t, s, d.Holders[0])
	if _, err := s.Acquire(ctx, store.AcquireRequest{Name: "pool", Holder: "c", TTL: longTTL, Capacity: 3}); !errors.As(err, &ce) {
		t.Fatalf("capacity 3 while a waiter of 5 waits: %v; want a CapacityError", err)
	}
	if err := s.Dequeue(ctx, "pool", "w"); err != nil {
		t.Fatal(err)
	}
	// Nobody holds or waits: the name takes the new capacity.
	mustShare(t, s, "pool", "c", 3, 3)
	if d, err := s.Describe(ctx, "pool"); err != nil || d.Capacity != 3 {
		t.Fatalf("Describe = %+v, %v; want capacity 3", d, err)
	}
}

func testHolderCap(t *testing.T, s Subject) {
	ctx := context.Background()
	req := func(h string) store.AcquireRequest {
		return store.AcquireRequest{Name: "pool", Holder: h, TTL: longTTL, Capacity: 10, MaxHolders: 2}
	}
	for _, h := range []string{"a", "b"} {
		if res, err := s.Acquire(ctx, req(h)); err != nil || !res.Acquired {
			t.Fatalf("%s: %+v, %v", h, res, err)
		}
	}
	_, err := s.Acquire(ctx, req("c"))
	var he *store.HolderLimitError
	if !errors.As(err, &he) || he.Limit != 2 {
		t.Fatalf("a third holder with a cap of 2: %v; want a HolderLimitError", err)
	}
	// The holders renew at the cap.
	if res, err := s.Acquire(ctx, req("a")); err != nil || !res.Acquired {
		t.Fatalf("a holder renewing at the cap: %+v, %v", res, err)
	}
}

func testSemaphoreReacquireKeepsTokenAndWeight(t *testing.T, s Subject) {
	l := mustShare(t, s, "pool", "a", 5, 2)
	res := share(t, s, "pool", "a", 5, 3, "")
	if !res.Acquired || res.Lease.Token != l.Token || res.Lease.Weight != 2 {
		t.Fatalf("re-acquire = %+v; want token %d and weight 2 kept", res, l.Token)
	}
	r, err := s.Renew(context.Background(), "pool", "a", l.Token, longTTL)
	if err != nil || r.Weight != 2 || r.Token != l.Token {
		t.Fatalf("Renew = %+v, %v; want the grant's weight and token", r, err)
	}
	d, _ := s.Describe(context.Background(), "pool")
	if len(d.Holders) != 1 {
		t.Fatalf("holders %v after a re-acquire; want one", holders(d))
	}
}

// testDeadHoldersGiveTheirWeightBack: a holder that dies without releasing
// holds its weight until its lease and the lock delay end.
func testDeadHoldersGiveTheirWeightBack(t *testing.T, s Subject) {
	ctx := context.Background()
	dead := acquire(t, s, store.AcquireRequest{Name: "pool", Holder: "dead", TTL: shortTTL, Capacity: 2}).Lease
	mustShare(t, s, "pool", "live", 2, 1)
	pass(s, shortTTL+margin)
	d, err := s.Describe(ctx, "pool")
	if err != nil || fmt.Sprint(holders(d)) != "[live:1]" {
		t.Fatalf("Describe after the dead lease's expiry = %+v, %v; want live alone", d, err)
	}
	res := share(t, s, "pool", "new", 2, 1, "")
	if res.Acquired {
		t.Fatal("the dead holder's weight was granted during its lock delay")
	}
	if want := dead.ExpiresAt.Add(lockDelay); !closeTo(res.RetryAt, want) {
		t.Fatalf("RetryAt %v; want the end of the dead holder's lock delay, %v", res.RetryAt, want)
	}
	pass(s, lockDelay)
	if l := mustShare(t, s, "pool", "new", 2, 1); l.Token <= dead.Token {
		t.Fatalf("token %d after %d", l.Token, dead.Token)
	}
}

// testSemaphoreNeverOverGrants has goroutines ask for random weights of a
// few names, waiting or not, with short leases, random pauses and holders
// that vanish without releasing. Each one that believes it holds acts on a
// WeightedResource, which fails the test when valid leases weigh more than
// the capacity or a token goes below an exclusive holder's.
func testSemaphoreNeverOverGrants(t *testing.T, s Subject) {
	const (
		workers  = 32
		rounds   = 30
		capacity = 6
		ttl      = 150 * time.Millisecond
	)
	names := []string{"s0", "s1"}
	resources := map[string]*WeightedResource{}
	for _, n := range names {
		resources[n] = &WeightedResource{Capacity: capacity}
	}
	var grants, weight atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11)) //nolint:gosec // G404: reproducible choices for a test, not a secret
			for round := range rounds {
				holder := fmt.Sprintf("worker-%d-%d", w, round)
				name := names[rng.IntN(len(names))]
				want := int64(1 + rng.IntN(3))
				if rng.IntN(6) == 0 {
					want = capacity // exclusive
				}
				waiter := ""
				if rng.IntN(2) == 0 {
					waiter = holder
				}
				req := store.AcquireRequest{Name: name, Holder: holder, TTL: ttl, Capacity: capacity, Weight: want, Waiter: waiter, WaiterTTL: time.Second}
				var res store.AcquireResult
				for try := 0; try < 20; try++ {
					sent := time.Now()
					var err error
					res, err = s.Acquire(context.Background(), req)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Acquired {
						if err := actWeighted(rng, resources[name], res.Lease, sent.Add(ttl-30*time.Millisecond)); err != nil {
							t.Error(err)
							return
						}
						break
					}
					time.Sleep(time.Duration(1+rng.IntN(4)) * time.Millisecond)
				}
				if !res.Acquired {
					if waiter != "" {
						_ = s.Dequeue(context.Background(), name, waiter)
					}
					continue
				}
				grants.Add(1)
				weight.Add(res.Lease.Weight)
				if rng.IntN(4) == 0 {
					continue // vanish without releasing: the grant must expire
				}
				if _, err := s.Release(context.Background(), name, holder, res.Lease.Token); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if grants.Load() < int64(workers) {
		t.Fatalf("only %d grants: the test did not contend", grants.Load())
	}
	for name, r := range resources {
		if r.MostHolders() < 2 {
			t.Errorf("%s: at most %d holders at once; they never shared it", name, r.MostHolders())
		}
	}
	t.Logf("%d grants weighing %d in all", grants.Load(), weight.Load())
}

func actWeighted(rng *rand.Rand, r *WeightedResource, l store.Lease, validUntil time.Time) error {
	if err := r.Enter(l.Holder, l.Token, l.Weight, validUntil); err != nil {
		return err
	}
	time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	r.Leave(l.Holder)
	return nil
}
