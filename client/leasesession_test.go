package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// sessionTTL is short, so that tests see several renewals, and long enough
// that a loaded 2-core machine renews in time (1s missed there once).
const sessionTTL = 2 * time.Second

// TestASessionKeepsItsLocksAndTheyEndTogether: locks attached to a session
// outlive many of its TTLs with no renewal of their own; releasing one
// keeps the others; closing the session ends them all at once, and others
// get the names.
func TestASessionKeepsItsLocksAndTheyEndTogether(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c, other := dial(t, coord), dial(t, coord)
		s, err := c.NewSession(ctx, WithTTL(sessionTTL))
		if err != nil {
			t.Fatal(err)
		}
		var locks []*Lease
		for i := range 3 {
			l, err := c.TryLock(ctx, fmt.Sprintf("parts/%d", i), WithSession(s))
			if err != nil {
				t.Fatal(err)
			}
			if l.TTL() != s.TTL() {
				t.Errorf("an attached lease's TTL is %s; want the session's %s", l.TTL(), s.TTL())
			}
			locks = append(locks, l)
		}
		time.Sleep(3 * sessionTTL) // three TTLs in which only the session's renewals keep them
		for _, l := range locks {
			if err := l.Err(); err != nil {
				t.Fatalf("%s ended while its session lived: %v", l.Name(), err)
			}
			if _, err := other.TryLock(ctx, l.Name()); !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("another client got %s of a live session: %v", l.Name(), err)
			}
		}
		if _, err := locks[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		if l, err := other.TryLock(ctx, locks[0].Name()); err != nil {
			t.Fatalf("the released lock was not free: %v", err)
		} else {
			_, _ = l.Release(ctx)
		}
		if locks[1].Err() != nil {
			t.Fatalf("releasing one lease ended another: %v", locks[1].Err())
		}
		if err := s.Close(ctx); err != nil {
			t.Fatalf("Session.Close: %v", err)
		}
		for _, l := range locks[1:] {
			waitDone(t, l.Done(), 5*time.Second, l.Name()+" after the session's Close")
			if !errors.Is(l.Err(), ErrReleased) {
				t.Errorf("%s: Err = %v; want ErrReleased", l.Name(), l.Err())
			}
			if _, err := other.TryLock(ctx, l.Name()); err != nil {
				t.Errorf("%s after the session closed: %v; want granted", l.Name(), err)
			}
		}
	})
}

// TestALostSessionEndsItsLeases: a session the coordinator refuses to renew
// (closed behind the Client's back) is lost, and every lease attached to it
// ends with ErrLost before their validity would have run out.
func TestALostSessionEndsItsLeases(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c := dial(t, coord)
		s, err := c.NewSession(ctx, WithTTL(sessionTTL))
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.TryLock(ctx, "job", WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.API().CloseSession(ctx, &coordinatorv1.CloseSessionRequest{SessionId: s.ID()}); err != nil {
			t.Fatal(err)
		}
		waitDone(t, s.Done(), 5*sessionTTL, "the lost session")
		waitDone(t, l.Done(), time.Second, "the lease of the lost session")
		if !errors.Is(s.Err(), ErrLost) || !errors.Is(l.Err(), ErrLost) {
			t.Errorf("Err = %v, %v; want ErrLost", s.Err(), l.Err())
		}
		if _, err := c.TryLock(ctx, "late", WithSession(s)); err == nil {
			t.Error("a lock was attached to a lost session")
		}
		if !errors.Is(s.Close(context.Background()), ErrLost) {
			t.Error("Close of a lost session did not report the loss")
		}
	})
}
