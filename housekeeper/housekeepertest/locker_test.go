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

func TestLockerEndsLeasesWhenTold(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		end     func(l *hkt.Locker)
		freeNow bool // the name can be taken right after
	}{
		{"expire", func(l *hkt.Locker) { l.Expire("n") }, true},
		{"steal", func(l *hkt.Locker) { l.Steal("n", time.Second) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := hkt.NewLocker()
			le, err := l.TryLock(ctx, "n", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			tt.end(l)
			if !closed(le.Done()) {
				t.Error("Done not closed")
			}
			_, err = l.TryLock(ctx, "n", time.Second)
			if (err == nil) != tt.freeNow {
				t.Errorf("TryLock after %s: %v", tt.name, err)
			}
		})
	}
}

func TestLockerWithoutKeepAliveExpiresLeasesAfterTheirTTL(t *testing.T) {
	l := hkt.NewLocker(hkt.WithoutKeepAlive())
	le, err := l.TryLock(context.Background(), "n", 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-le.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease did not expire")
	}
	if held := l.Held(); len(held) != 0 {
		t.Errorf("held after expiry: %v", held)
	}
}
