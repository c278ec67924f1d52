package client

import (
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
)

// TestNoGoroutineOutlivesAReleasedLease: once its leases are released and
// its default session closed, a Client runs no goroutine.
func TestNoGoroutineOutlivesAReleasedLease(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	clock := clockwork.NewFakeClock()
	c := dial(t, coord, withClock(clock), withSessionIdle(50*time.Millisecond))
	_, _ = c.Leader(ctx, "warm-up") // connects
	idle := goleak.IgnoreCurrent()

	l, err := c.TryLock(ctx, "leak")
	if err != nil {
		t.Fatal(err)
	}
	renew(t, clock, l.l.session) // the scheduler and the stream are running
	lctx := l.Context(ctx)
	e, err := c.Campaign(ctx, "leak-election", nil)
	if err != nil {
		t.Fatal(err)
	}
	renew(t, clock, e.l.session)
	if _, err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-lctx.Done()
	if _, err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	// They were in the default session, which lives on until closed.
	s, err := c.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.SessionID() != s.ID() || e.SessionID() != s.ID() {
		t.Fatalf("leases in sessions %q and %q; want the default session %s", l.SessionID(), e.SessionID(), s.ID())
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The operation stream closes once idle.
	eventually(t, "the session stream closed", func() bool {
		c.stream.mu.Lock()
		defer c.stream.mu.Unlock()
		return !c.stream.running
	})
	goleak.VerifyNone(t, idle)
}

func TestNoGoroutineOutlivesClose(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	before := goleak.IgnoreCurrent()

	clock := clockwork.NewFakeClock()
	c, err := New(coord.Addr(), withClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := c.TryLock(ctx, fmt.Sprintf("close-leak/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	e, err := c.Campaign(ctx, "close-leak-election", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	_ = e.Context(ctx)
	events := c.Observe(ctx, "close-leak-election")
	<-events
	renew(t, clock, e.l.session)
	go func() { _, _ = c.Lock(ctx, "close-leak/0") }() // waiting when Close comes
	eventually(t, "Lock waiting", func() bool {
		d, err := c.Describe(ctx, "close-leak/0")
		return err == nil && d.Waiters == 1
	})

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
}
