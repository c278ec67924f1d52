package client

import (
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// All of a Client's leases are renewed over one stream: its operation
// stream, or its KeepAlive stream with unary calls.
func TestManyLeasesShareOneStream(t *testing.T) {
	forEachModeAndStore(t, func(t *testing.T, mode Option, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		clock := clockwork.NewFakeClock()
		c := dial(t, coord, mode, withClock(clock))
		const n = 200
		leases := make([]*Lease, 0, n)
		inner := make([]*lease, 0, n)
		for i := range n {
			l, err := c.TryLock(ctx, fmt.Sprintf("many/%03d", i), WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			leases, inner = append(leases, l), append(inner, l.l)
		}
		// Every lease renewed twice.
		renewAll(t, clock, inner...)
		renewAll(t, clock, inner...)
		want := map[string]int{"Stream": 1, "KeepAlive": 0}
		if c.unary {
			want = map[string]int{"Stream": 0, "KeepAlive": 1}
		}
		for method, n := range want {
			if got := startedStreams(t, coord, method); got != n {
				t.Fatalf("%d %s streams for %d leases; want %d", got, method, len(leases), n)
			}
		}
		for _, l := range leases {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestNoGoroutineOutlivesAReleasedLease: once its leases are released and
// its default session closed, a Client runs no goroutine.
func TestNoGoroutineOutlivesAReleasedLease(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode Option) {
		coord := coordtest.Start(t, coordtest.Config(t, "memory"))
		ctx := testCtx(t)
		clock := clockwork.NewFakeClock()
		c := dial(t, coord, mode, withClock(clock), withSessionIdle(50*time.Millisecond))
		_, _ = c.Leader(ctx, "warm-up") // connects
		idle := goleak.IgnoreCurrent()

		l, err := c.TryLock(ctx, "leak")
		if err != nil {
			t.Fatal(err)
		}
		renew(t, clock, l.l) // the scheduler and the stream are running
		lctx := l.Context(ctx)
		e, err := c.Campaign(ctx, "leak-election", nil)
		if err != nil {
			t.Fatal(err)
		}
		renewAll(t, clock, l.l, e.l)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		<-lctx.Done()
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		// They were in the default session, which lives on until closed.
		s, err := c.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.SessionID() != s.ID() || e.SessionID() != s.ID() {
			t.Fatalf("leases in sessions %q and %q; want the default session %s", l.l.sessionID, e.l.sessionID, s.ID())
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
	})
}

func TestNoGoroutineOutlivesClose(t *testing.T) {
	forEachMode(t, func(t *testing.T, mode Option) {
		coord := coordtest.Start(t, coordtest.Config(t, "memory"))
		ctx := testCtx(t)
		before := goleak.IgnoreCurrent()

		clock := clockwork.NewFakeClock()
		c, err := New(coord.Addr(), mode, withClock(clock))
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
		renew(t, clock, e.l)
		go func() { _, _ = c.Lock(ctx, "close-leak/0") }() // waiting when Close comes
		eventually(t, "Lock waiting", func() bool {
			d, err := c.API().Describe(ctx, &coordinatorv1.DescribeRequest{Name: "close-leak/0"})
			return err == nil && d.GetWaiters() == 1
		})

		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		goleak.VerifyNone(t, before)
	})
}
