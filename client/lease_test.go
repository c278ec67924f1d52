package client

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/coordinator-dev/coordinator/coordinatord"
	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testlog"
)

// Done must close before the coordinator's own expiry whenever renewals
// stop: refused at once when the coordinator forgot the lease, at the local
// deadline when it cannot be reached.
func TestLeaseEndsBeforeCoordinatorExpiry(t *testing.T) {
	type fault struct {
		name  string
		ttl   time.Duration
		start func(t *testing.T) *coordtest.Coordinator
		// inject stops renewals from succeeding.
		inject  func(t *testing.T, coord *coordtest.Coordinator)
		wantErr error
	}
	var paused *redistest.Server
	for _, f := range []fault{
		{
			name: "memory coordinator restarted forgets the lease",
			ttl:  3 * time.Second,
			start: func(t *testing.T) *coordtest.Coordinator {
				return coordtest.Start(t, coordtest.Config(t, "memory"))
			},
			inject:  func(t *testing.T, coord *coordtest.Coordinator) { coord.Restart() },
			wantErr: ErrLost,
		},
		{
			name: "coordinator killed",
			ttl:  3 * time.Second,
			start: func(t *testing.T) *coordtest.Coordinator {
				return coordtest.Start(t, coordtest.Config(t, "redis"))
			},
			inject:  func(t *testing.T, coord *coordtest.Coordinator) { coord.Kill() },
			wantErr: ErrExpired,
		},
		{
			name: "redis paused",
			ttl:  3 * time.Second,
			start: func(t *testing.T) *coordtest.Coordinator {
				paused = redistest.Start(t, false)
				cfg := coordtest.Config(t, "memory")
				cfg.Store, cfg.RedisURL = coordinatord.StoreRedis, paused.URL()
				return coordtest.Start(t, cfg)
			},
			inject:  func(t *testing.T, coord *coordtest.Coordinator) { paused.Pause(6 * time.Second) },
			wantErr: ErrExpired,
		},
	} {
		t.Run(f.name, func(t *testing.T) {
			coord := f.start(t)
			c := dial(t, coord, WithTTL(f.ttl))
			lease, err := c.TryLock(testCtx(t), "fragile")
			if err != nil {
				t.Fatal(err)
			}
			waitRenewed(t, lease.l.session, 1)

			f.inject(t, coord)
			doneAt := waitDone(t, lease.Done(), 4*f.ttl, "lease after the fault")
			confirmed, ttl := confirmedAt(lease.l.session), lease.TTL()
			serverExpiry := confirmed.Add(ttl) // the earliest it can be
			if !errors.Is(lease.Err(), f.wantErr) {
				t.Fatalf("Err = %v; want %v", lease.Err(), f.wantErr)
			}
			if !doneAt.Before(serverExpiry) {
				t.Fatalf("Done closed %s after the coordinator's expiry at the earliest", doneAt.Sub(serverExpiry))
			}
			localDeadline := confirmed.Add(ttl - driftMargin(ttl))
			switch {
			case errors.Is(f.wantErr, ErrExpired) && doneAt.Before(localDeadline):
				t.Fatalf("Done closed %s before the local deadline: gave up too early", localDeadline.Sub(doneAt))
			case errors.Is(f.wantErr, ErrLost) && !doneAt.Before(localDeadline):
				t.Fatalf("refused renewal noticed only at the deadline")
			}
			t.Logf("ended %s before the earliest coordinator expiry: %v", serverExpiry.Sub(doneAt), lease.Err())

			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			released, err := lease.Release(ctx)
			if errors.Is(f.wantErr, ErrLost) && (released || err != nil) {
				t.Fatalf("Release of a lost lease = %t, %v; want a no-op", released, err)
			}
		})
	}
}

func TestTryLockReportsTheHolder(t *testing.T) {
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c := dial(t, coord)
		first, err := c.TryLock(ctx, "solo")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = first.Release(ctx) }()
		// The same Client, as another acquisition, is excluded too.
		_, err = c.TryLock(ctx, "solo")
		var notAcquired *NotAcquiredError
		if !errors.Is(err, ErrNotAcquired) || !errors.As(err, &notAcquired) || notAcquired.Holder != first.Holder() {
			t.Fatalf("second TryLock = %v; want ErrNotAcquired held by %s", err, first.Holder())
		}

		// Lock until a deadline: not acquired, matching the deadline too.
		lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = c.Lock(lctx, "solo")
		if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock past its deadline = %v; want ErrNotAcquired and DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited < 250*time.Millisecond {
			t.Fatalf("Lock gave up after %s, before its deadline", waited)
		}
	})
}

func TestLeaseContextIsCancelledOnLoss(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	c := dial(t, coord, WithTTL(300*time.Millisecond))
	lease, err := c.TryLock(ctx, "ctx")
	if err != nil {
		t.Fatal(err)
	}
	lctx := lease.Context(ctx)
	// An operator closes its session behind the holder's back.
	if _, err := c.API().CloseSession(ctx, &coordinatorv1.CloseSessionRequest{SessionId: lease.SessionID()}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, lctx.Done(), 10*time.Second, "lease context")
	if !errors.Is(context.Cause(lctx), ErrLost) || !errors.Is(lease.Err(), ErrLost) {
		t.Fatalf("cause %v, Err %v; want ErrLost", context.Cause(lctx), lease.Err())
	}
	if lease.Context(ctx).Err() == nil {
		t.Fatal("a context derived from an ended lease is not done")
	}
}

// Validity is counted on the Client's clock from when the session's
// creation or last renewal was sent: TTL less the drift margin, for a
// lease and a leadership alike.
func TestDeadlineFollowsEachRenewal(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	clock := clockwork.NewFakeClock()
	const ttl = time.Minute
	c := dial(t, coord, withClock(clock), WithTTL(ttl))
	lease, err := c.TryLock(ctx, "deadline")
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Campaign(ctx, "deadline-election", nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Election() != "deadline-election" {
		t.Fatalf("Election = %q", e.Election())
	}
	check := func(sent time.Time) {
		t.Helper()
		want := sent.Add(ttl - driftMargin(ttl))
		if lease.TTL() != ttl || !lease.Deadline().Equal(want) {
			t.Fatalf("lease: TTL %s, deadline %s; want %s, %s", lease.TTL(), lease.Deadline(), ttl, want)
		}
		if e.TTL() != ttl || !e.Deadline().Equal(want) {
			t.Fatalf("leadership: TTL %s, deadline %s; want %s, %s", e.TTL(), e.Deadline(), ttl, want)
		}
	}
	check(clock.Now()) // granted
	for range 3 {
		renew(t, clock, lease.l.session)
		check(clock.Now()) // renewed, sent at the time the clock was moved to
	}
}

// Waiting on a coordinator that cannot be reached looks like waiting for
// the lock, so the retries are logged.
func TestLockLogsItsRetries(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens there now

	var logs testlog.Buffer
	c, err := New(addr, WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(testCtx(t), time.Second)
	defer cancel()
	_, err = c.Lock(ctx, "unreachable")
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last error") {
		t.Fatalf("Lock = %v; want not acquired by the deadline, with the last error", err)
	}
	if !strings.Contains(logs.String(), "acquisition failed; retrying") || !strings.Contains(logs.String(), "unreachable") {
		t.Fatalf("logged %q; want the retries", logs.String())
	}
}

// With no close timeout, Close ends the leases here but leaves them to
// expire on the coordinator.
func TestCloseWithoutTimeoutLeavesLeasesToExpire(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	c := dial(t, coord, WithCloseTimeout(0))
	lease, err := c.TryLock(ctx, "left")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(lease.Err(), ErrClosed) {
		t.Fatalf("Err = %v; want ErrClosed", lease.Err())
	}
	d, err := dial(t, coord).Describe(ctx, "left")
	if err != nil || len(d.Holders) != 1 || d.Holders[0].Token != lease.Token() {
		t.Fatalf("after Close the coordinator says %+v, %v; want still held with token %d", d, err, lease.Token())
	}
}

// A coordinator that crashes and comes back on a Redis store has lost
// nothing: a lease held through it keeps its session renewed over a new stream,
// without a gap, with the same token.
func TestLeaseSurvivesACoordinatorCrashOnRedis(t *testing.T) {
	// The renewal after the restart must land before the TTL runs out:
	// a TTL of 5s leaves over 3s for kill -9, exec and the first Redis
	// round trip of the new process, which a loaded machine needs (2s
	// once failed there). Waiting past one TTL shows renewals went on.
	const ttl = 5 * time.Second
	coord := coordtest.Start(t, coordtest.Config(t, "redis"))
	c := dial(t, coord, WithTTL(ttl))
	ctx := testCtx(t)
	lease, err := c.TryLock(ctx, "crash-survivor")
	if err != nil {
		t.Fatal(err)
	}
	coord.Restart() // kill -9 and start again on the same address
	select {
	case <-lease.Done():
		t.Fatalf("the lease ended across a coordinator restart on Redis: %v", lease.Err())
	case <-time.After(ttl + time.Second): // past one TTL: renewals went on
	}
	d, err := c.Describe(ctx, "crash-survivor")
	if err != nil || len(d.Holders) != 1 || d.Holders[0].Token != lease.Token() {
		t.Fatalf("after the restart the coordinator says %+v, %v; want held with token %d", d, err, lease.Token())
	}
}
