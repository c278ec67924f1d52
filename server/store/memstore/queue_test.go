package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
)

// A waiter whose deadline passed has lost its place, even where the store
// has not dropped it yet (dead waiters are dropped from the head, and from
// the whole queue only when all of it is read): asking again, it queues at
// the back with the weight it asks for now, behind the waiters that came
// after it. Found by the model-based check (model_test.go); each case is
// the shrunk sequence of its finding.
func TestALapsedWaiterQueuesAgainAtTheBack(t *testing.T) {
	const name = "pool"
	for _, tc := range []struct {
		what string
		// afterRelease: the lapsed waiter asks again once the holder
		// released (else while it holds).
		afterRelease bool
	}{
		// Refused, it was revived in its old place with its old weight (2),
		// ahead of b, which came after it lapsed.
		{what: "refused, it queues behind those who came after it"},
		// Its dead place counted as its place: only a (1) was counted
		// ahead of it, and it was granted, passing b.
		{what: "its dead place is not its place", afterRelease: true},
	} {
		t.Run(tc.what, func(t *testing.T) {
			ctx := context.Background()
			clock := clockwork.NewFakeClockAt(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			s := memstore.New(memstore.WithClock(clock))
			defer func() { _ = s.Close() }()
			ask := func(holder string, weight int64, waiterTTL time.Duration) store.AcquireResult {
				t.Helper()
				res, err := s.Acquire(ctx, store.AcquireRequest{Name: name, Holder: holder, TTL: time.Minute, Capacity: 2, Weight: weight,
					Waiter: holder, WaiterTTL: waiterTTL})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			x := ask("x", 2, time.Minute).Lease
			ask("a", 1, time.Minute)
			ask("w", 2, time.Second) // lapses
			ask("b", 2, time.Minute)
			clock.Advance(2 * time.Second)
			if tc.afterRelease {
				if ok, err := s.Release(ctx, name, "x", x.Token); err != nil || !ok {
					t.Fatalf("release: %v, %v", ok, err)
				}
			}
			if res := ask("w", 1, time.Minute); res.Acquired {
				t.Fatalf("the lapsed waiter asking again: %+v; want refused (a and b come first)", res)
			}
			if d, err := s.Describe(ctx, name); err != nil || d.Waiters != 3 || d.WaitingWeight != 1+2+1 {
				t.Fatalf("Describe = %+v, %v; want a, b and w waiting for 1, 2 and 1", d, err)
			}
			if !tc.afterRelease {
				if ok, err := s.Release(ctx, name, "x", x.Token); err != nil || !ok {
					t.Fatalf("release: %v, %v", ok, err)
				}
			}
			a := ask("a", 1, time.Minute)
			if !a.Acquired {
				t.Fatalf("a, first in line: %+v", a)
			}
			if ok, err := s.Release(ctx, name, "a", a.Lease.Token); err != nil || !ok {
				t.Fatalf("release a: %v, %v", ok, err)
			}
			if res := ask("w", 1, time.Minute); res.Acquired {
				t.Fatalf("the lapsed waiter was granted before b, which came after it lapsed: %+v", res)
			}
			if res := ask("b", 2, time.Minute); !res.Acquired {
				t.Fatalf("b, ahead of the lapsed waiter now: %+v", res)
			}
		})
	}
}
