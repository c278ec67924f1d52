package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// retention is the idle retention of the tests that watch names being
// forgotten.
const retention = time.Second

// testIdleNamesForgotten: once a name is idle for the retention, the store
// keeps nothing of it, yet Describe's last token stays a floor of the tokens
// issued before and the next grant's token is above them all, as after data
// loss. A name that is held or waited for is kept.
func testIdleNamesForgotten(t *testing.T, s Subject) {
	ctx := context.Background()
	released := mustAcquire(t, s, "released", "a")
	mustRelease(t, s, released)
	expired := acquire(t, s, store.AcquireRequest{Name: "expired", Holder: "a", TTL: shortTTL}).Lease
	held := mustAcquire(t, s, "held", "a")
	acquire(t, s, store.AcquireRequest{Name: "held", Holder: "w", Waiter: "w", WaiterTTL: longTTL})
	if _, err := s.Watch(ctx, []string{"watched"}, shortTTL); err != nil {
		t.Fatal(err)
	}

	// The expired lease's name is used until the end of its lock delay; a
	// store may forget a name up to one retention late.
	pass(s, shortTTL+lockDelay+2*retention+margin)
	mustAcquire(t, s, "other", "a") // a store may forget names on its next use

	if s.Remembers != nil {
		for name, want := range map[string]bool{"released": false, "expired": false, "watched": false, "held": true} {
			if got := s.Remembers(name); got != want {
				t.Errorf("the store remembers %q: %v, want %v", name, got, want)
			}
		}
	}
	if d, err := s.Describe(ctx, "held"); err != nil || !d.Held || d.LastToken != held.Token || d.Waiters != 1 {
		t.Errorf("Describe of a name held all along = %+v, %v; want held, last token %d, 1 waiter", d, err, held.Token)
	}
	for _, l := range []store.Lease{released, expired} {
		d, err := s.Describe(ctx, l.Name)
		if err != nil || d.Held || d.LastToken < l.Token {
			t.Errorf("Describe of forgotten %q = %+v, %v; want a last token of at least %d", l.Name, d, err, l.Token)
		}
		again := mustAcquire(t, s, l.Name, "b")
		if again.Token <= l.Token || again.Token <= d.LastToken {
			t.Errorf("%q: token %d after the name was forgotten; %d was issued before, Describe reported %d",
				l.Name, again.Token, l.Token, d.LastToken)
		}
	}
}

// testUseKeepsNameRemembered: renewals and a release count as uses, so the
// name's counter outlives them by the retention, however long the lease ran.
func testUseKeepsNameRemembered(t *testing.T, s Subject) {
	ctx := context.Background()
	const ttl = 2 * retention
	l := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", TTL: ttl}).Lease
	// Renewing every half retention, with a retention and a half to spare.
	for range 8 {
		pass(s, retention/2)
		var err error
		if l, err = s.Renew(ctx, "job", "a", l.Token, ttl); err != nil {
			t.Fatalf("Renew: %v", err)
		}
	}
	mustRelease(t, s, l)
	pass(s, retention/2)
	mustAcquire(t, s, "other", "a")
	if d, err := s.Describe(ctx, "job"); err != nil || d.LastToken != l.Token {
		t.Fatalf("Describe half a retention after the release = %+v, %v; want last token %d", d, err, l.Token)
	}
	if s.Remembers != nil && !s.Remembers("job") {
		t.Fatal("the store forgot a name half a retention after its release")
	}
}

// testLastTokenFloor: Describe's last token is at least every token issued
// before and below every token issued after, also for a name never granted.
func testLastTokenFloor(t *testing.T, s Subject) {
	ctx := context.Background()
	before, err := s.Describe(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, s, "job", "a")
	if l.Token <= before.LastToken {
		t.Fatalf("token %d, not above the last token %d Describe reported before", l.Token, before.LastToken)
	}
	mustRelease(t, s, l)
	after, err := s.Describe(ctx, "job")
	if err != nil || after.LastToken != l.Token {
		t.Fatalf("Describe after a grant = %+v, %v; want last token %d", after, err, l.Token)
	}
}

// testIdleSemaphoresForgotten: a semaphore's name is forgotten once its
// last grant ended, and remembered while any grant lives, whatever the
// others did: a renewal that shortened one, or a release beside others,
// must not cut the name's life below the longest grant's.
func testIdleSemaphoresForgotten(t *testing.T, s Subject) {
	ctx := context.Background()
	share := func(name, holder string, ttl time.Duration) store.Lease {
		t.Helper()
		res := acquire(t, s, store.AcquireRequest{Name: name, Holder: holder, TTL: ttl, Capacity: 3})
		if !res.Acquired {
			t.Fatalf("%s could not take a share of %q", holder, name)
		}
		return res.Lease
	}
	for _, h := range []string{"a", "b"} {
		mustRelease(t, s, share("sem-released", h, longTTL))
		share("sem-expired", h, shortTTL)
	}
	held := share("sem-held", "a", longTTL)
	b := share("sem-held", "b", longTTL)
	if _, err := s.Renew(ctx, "sem-held", "b", b.Token, shortTTL); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, s, share("sem-held", "c", shortTTL))

	pass(s, shortTTL+lockDelay+2*retention+margin)
	mustAcquire(t, s, "other", "a") // a store may forget names on its next use

	if s.Remembers != nil {
		for name, want := range map[string]bool{"sem-released": false, "sem-expired": false, "sem-held": true} {
			if got := s.Remembers(name); got != want {
				t.Errorf("the store remembers %q: %v, want %v", name, got, want)
			}
		}
	}
	d, err := s.Describe(ctx, "sem-held")
	if err != nil || len(d.Holders) != 1 || d.Holders[0].Token != held.Token || d.Capacity != 3 {
		t.Fatalf("Describe of a semaphore held all along = %+v, %v; want a alone, capacity 3", d, err)
	}
	for _, name := range []string{"sem-released", "sem-expired"} {
		if again := share(name, "z", longTTL); again.Token <= held.Token {
			t.Errorf("%q: token %d after the name was forgotten, below %d issued before", name, again.Token, held.Token)
		}
	}
}
