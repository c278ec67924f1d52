package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/coordinator-dev/coordinator/server/store"
)

func TestIdleNamesAreForgottenWithoutTokensGoingBack(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Now())
	s := New(WithClock(clock))
	ctx := context.Background()
	acquire := func(name, holder string) store.Lease {
		t.Helper()
		res, err := s.Acquire(ctx, store.AcquireRequest{Name: name, Holder: holder, TTL: time.Second})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire(%s, %s) = %+v, %v", name, holder, res, err)
		}
		return res.Lease
	}
	first := acquire("idle", "a")
	held := acquire("held", "a")
	if _, err := s.Release(ctx, "idle", "a", first.Token); err != nil {
		t.Fatal(err)
	}

	clock.Advance(forgetAfter + time.Second)
	if _, err := s.Renew(ctx, "held", "a", held.Token, time.Hour); err == nil {
		t.Fatal("renewed a lease that expired long ago")
	}
	fresh := acquire("held", "b") // keeps "held" active
	for i := range sweepEvery {
		acquire(fmt.Sprintf("filler-%d", i), "f")
	}
	s.mu.Lock()
	_, idleKnown := s.names["idle"]
	_, heldKnown := s.names["held"]
	s.mu.Unlock()
	if idleKnown || !heldKnown {
		t.Fatalf("after a sweep: idle known %v (want false), held known %v (want true)", idleKnown, heldKnown)
	}
	if again := acquire("idle", "c"); again.Token <= first.Token {
		t.Fatalf("token %d after the name was forgotten, but %d was issued before", again.Token, first.Token)
	}
	if fresh.Token <= held.Token {
		t.Fatalf("token %d after %d", fresh.Token, held.Token)
	}
}
