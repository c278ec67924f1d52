package client

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordinator-dev/coordinator/internal/coordtest"
)

func TestManyLeasesShareOneKeepAliveStream(t *testing.T) {
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c := dial(t, coord)
		const n = 200
		const ttl = 1500 * time.Millisecond
		leases := make([]*Lease, 0, n)
		for i := range n {
			l, err := c.TryLock(ctx, fmt.Sprintf("many/%03d", i), WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			leases = append(leases, l)
		}
		// Every lease renewed at least twice more.
		for range 2 {
			before := make([]time.Time, n)
			for i, l := range leases {
				before[i], _ = confirmedAt(l.l)
			}
			eventually(t, "every lease renewed", func() bool {
				for i, l := range leases {
					if at, _ := confirmedAt(l.l); !at.After(before[i]) {
						return false
					}
				}
				return true
			})
		}
		for _, l := range leases {
			if err := l.Err(); err != nil {
				t.Fatalf("%s ended: %v", l, err)
			}
		}
		if got := startedStreams(t, coord, "KeepAlive"); got != 1 {
			t.Fatalf("%d KeepAlive streams for %d leases; want 1", got, n)
		}
		for _, l := range leases {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestNoGoroutineOutlivesAReleasedLease(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	c := dial(t, coord)
	_, _ = c.Leader(ctx, "warm-up") // connects
	idle := goleak.IgnoreCurrent()

	l, err := c.TryLock(ctx, "leak", WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitRenewed(t, l.l, 2) // the scheduler and the stream are running
	lctx := l.Context(ctx)
	e, err := c.Campaign(ctx, "leak-election", nil, WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	waitRenewed(t, e.l, 2)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-lctx.Done()
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, idle)
}

func TestNoGoroutineOutlivesClose(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	before := goleak.IgnoreCurrent()

	c, err := New(coord.Addr())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := c.TryLock(ctx, fmt.Sprintf("close-leak/%d", i), WithTTL(300*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	e, err := c.Campaign(ctx, "close-leak-election", []byte("x"), WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_ = e.Context(ctx)
	events := c.Observe(ctx, "close-leak-election")
	<-events
	waitRenewed(t, e.l, 2)
	go func() { _, _ = c.Lock(ctx, "close-leak/0") }() // waiting when Close comes

	time.Sleep(100 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
}
