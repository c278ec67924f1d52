package housekeepertest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordinator-dev/coordinator/housekeeper"
	hkt "github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestLockerGrantsEachNameToOneHolderWithIncreasingTokens(t *testing.T) {
	ctx := context.Background()
	l := hkt.NewLocker()
	a, err := l.TryLock(ctx, "a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(ctx, "a", time.Second); !errors.Is(err, housekeeper.ErrNotAcquired) {
		t.Fatalf("second TryLock of a held name: %v, want ErrNotAcquired", err)
	}
	b, err := l.TryLock(ctx, "b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Errorf("tokens %d then %d: not increasing", a.Token(), b.Token())
	}
	if err := a.Release(ctx); err != nil || !closed(a.Done()) {
		t.Fatalf("Release = %v, Done closed %v", err, closed(a.Done()))
	}
	if err := a.Release(ctx); !errors.Is(err, hkt.ErrNotHeld) {
		t.Errorf("second Release = %v, want ErrNotHeld", err)
	}
	a2, err := l.TryLock(ctx, "a", time.Second)
	if err != nil || a2.Token() <= b.Token() {
		t.Fatalf("TryLock after release = %v, %v; want a higher token", a2, err)
	}
}

func TestLockerStealEndsTheHoldersLeaseAndGrantsAHigherToken(t *testing.T) {
	ctx := context.Background()
	l := hkt.NewLocker()
	le, err := l.TryLock(ctx, "n", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	thief := l.Steal("n")
	if !closed(le.Done()) {
		t.Error("the robbed lease's Done is not closed")
	}
	if thief.Token() <= le.Token() {
		t.Errorf("thief's token %d is not above %d", thief.Token(), le.Token())
	}
	if _, err := l.TryLock(ctx, "n", time.Second); !errors.Is(err, housekeeper.ErrNotAcquired) {
		t.Errorf("TryLock after the theft: %v, want ErrNotAcquired", err)
	}
	if err := le.Release(ctx); !errors.Is(err, hkt.ErrNotHeld) {
		t.Errorf("Release of the robbed lease: %v, want ErrNotHeld", err)
	}
	if got := l.Grants("n"); got != 2 {
		t.Errorf("Grants = %d, want 2", got)
	}
}
