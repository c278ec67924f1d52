package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testproxy"
)

// A network that stalls, the connection staying open and carrying nothing
// as a half-open TCP connection does, is the fault a client cannot tell from
// a slow coordinator. The lease must end at its local deadline, before the
// coordinator's expiry; the next holder must get the name only after that
// expiry, with a larger token; and the Client must work again once its
// keepalive has given up the dead connection, without being rebuilt.
func TestAStalledNetworkEndsTheLeaseAndTheClientRecovers(t *testing.T) {
	const ttl = 3 * time.Second
	t.Parallel() // most of it is waiting out the keepalive
	{
		coord := coordtest.Start(t, coordtest.Config(t, "redis"))
		stall := testproxy.New(t, coord.Addr())
		c, err := New(stall.Addr(), WithTTL(ttl), WithCloseTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		next := dial(t, coord)
		ctx := testCtx(t)

		lease, err := c.TryLock(ctx, "stalled")
		if err != nil {
			t.Fatal(err)
		}
		waitRenewed(t, lease.l.session, 1)
		stall.Freeze()

		type grant struct {
			lease *Lease
			at    time.Time
			err   error
		}
		granted := make(chan grant, 1)
		go func() {
			l, err := next.Lock(ctx, "stalled")
			granted <- grant{l, time.Now(), err}
		}()

		endedAt := waitDone(t, lease.Done(), 4*ttl, "the stalled lease")
		confirmed := confirmedAt(lease.l.session)
		expiry := confirmed.Add(ttl) // the coordinator's, at the earliest
		if !errors.Is(lease.Err(), ErrExpired) {
			t.Fatalf("Err = %v; want ErrExpired", lease.Err())
		}
		if !endedAt.Before(expiry) {
			t.Fatalf("the lease ended %s after the coordinator's expiry at the earliest", endedAt.Sub(expiry))
		}
		var g grant
		select {
		case g = <-granted:
		case <-time.After(20 * time.Second):
			t.Fatal("the next holder was not granted the name 20s after the stall")
		}
		if g.err != nil {
			t.Fatal(g.err)
		}
		if !g.at.After(expiry) || g.lease.Token() <= lease.Token() {
			t.Fatalf("the next holder got token %d at %s, %s after the stalled holder's expiry at the earliest; want after it, with a token above %d",
				g.lease.Token(), g.at.Format(time.StampMicro), g.at.Sub(expiry), lease.Token())
		}
		t.Logf("the stalled lease ended %s before the coordinator's expiry at the earliest", expiry.Sub(endedAt))

		// Keepalive (10s idle, 5s to answer) closes the dead connection; the
		// Client then dials again, through the proxy, whose new
		// connections work.
		eventually(t, "a lock through the Client after the stall", func() bool {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			l, err := c.TryLock(ctx, "after-the-stall") // in a new default session
			if err != nil {
				return false
			}
			_, _ = l.Release(ctx)
			return true
		})
	}
}
