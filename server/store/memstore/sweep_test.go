package memstore

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/coordinator-dev/coordinator/server/store"
)

// The conformance suite proves, through Describe and tokens, that forgetting
// is safe; this test proves that the memory is given back.
func TestIdleNamesLeaveMemory(t *testing.T) {
	const retention = time.Minute
	clock := clockwork.NewFakeClockAt(time.Now())
	s := New(WithClock(clock), WithIdleNameTTL(retention), WithLockDelay(time.Second))
	ctx := context.Background()
	acquire := func(name, holder, waiter string, ttl time.Duration) store.AcquireResult {
		t.Helper()
		res, err := s.Acquire(ctx, store.AcquireRequest{Name: name, Holder: holder, TTL: ttl, Waiter: waiter, WaiterTTL: 10 * retention})
		if err != nil {
			t.Fatalf("Acquire(%s, %s): %v", name, holder, err)
		}
		return res
	}
	released := acquire("released", "a", "", time.Hour).Lease
	if _, err := s.Release(ctx, "released", "a", released.Token); err != nil {
		t.Fatal(err)
	}
	acquire("expired", "a", "", time.Second)
	acquire("held", "a", "", 10*retention)
	acquire("queued", "a", "", 10*retention)
	acquire("queued", "b", "w", time.Second) // waits longer than the retention

	clock.Advance(2 * retention)
	acquire("other", "a", "", time.Second) // sweeps
	want := map[string]bool{"released": false, "expired": false, "held": true, "queued": true, "other": true}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, known := range want {
		if _, ok := s.names[name]; ok != known {
			t.Errorf("%q known: %v, want %v", name, ok, known)
		}
	}
}
