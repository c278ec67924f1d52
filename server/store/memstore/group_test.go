package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
)

// TestGroupWhosePlaceTimedOutOnOneMemberQueuesAgainOnAll: two groups wait
// for {a, b}; the first one's place on a times out while its place on b
// lives. Queued again at the back of a only, it would be first on b and
// second on a, the other group the reverse: each would wait for the other
// for ever once a and b come free. It queues again at the back of both,
// and the other group is granted.
func TestGroupWhosePlaceTimedOutOnOneMemberQueuesAgainOnAll(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Now())
	s := memstore.New(memstore.WithClock(clock))
	defer func() { _ = s.Close() }()
	const ttl, waiterTTL = time.Minute, 3 * time.Second

	var held []store.Lease
	for _, name := range []string{"a", "b"} {
		res, err := s.Acquire(ctx, store.AcquireRequest{Name: name, Holder: "h", TTL: ttl})
		if err != nil || !res.Acquired {
			t.Fatalf("acquire %s: %v, %v", name, res, err)
		}
		held = append(held, res.Lease)
	}
	group := func(waiter string) store.GroupRequest {
		return store.GroupRequest{Members: []store.GroupMember{{Name: "a"}, {Name: "b"}}, Holder: waiter, TTL: ttl,
			Waiter: waiter, WaiterTTL: waiterTTL}
	}
	attempt := func(waiter string) store.GroupResult {
		t.Helper()
		res, err := s.AcquireGroup(ctx, group(waiter))
		if err != nil {
			t.Fatalf("%s: %v", waiter, err)
		}
		return res
	}
	attempt("g1")
	attempt("g2")
	// g1's place on a times out; every other place is refreshed.
	clock.Advance(waiterTTL / 2)
	if err := s.RefreshWaiters(ctx, "b", []string{"g1", "g2"}, waiterTTL); err != nil {
		t.Fatal(err)
	}
	if err := s.RefreshWaiters(ctx, "a", []string{"g2"}, waiterTTL); err != nil {
		t.Fatal(err)
	}
	clock.Advance(waiterTTL/2 + time.Millisecond)
	if _, err := s.ReleaseGroup(ctx, "h", []store.GroupLease{{Name: "a", Token: held[0].Token}, {Name: "b", Token: held[1].Token}}); err != nil {
		t.Fatal(err)
	}

	if res := attempt("g1"); res.Acquired {
		t.Fatal("g1 granted although g2 is ahead of it on a")
	}
	if res := attempt("g2"); !res.Acquired {
		t.Fatalf("g2 refused: %+v; g1 must have queued again behind it on both names", res.Members)
	}
}
