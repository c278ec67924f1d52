package redisstore

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testproxy"
	"github.com/coordinator-dev/coordinator/server/store"
)

// TestReplicaAcknowledgedGrants runs a real primary and replica: with
// MinReplicas 1 a grant or renewal (a group's too) is reported only once the
// replica has it.
func TestReplicaAcknowledgedGrants(t *testing.T) {
	t.Parallel()
	// Generous: a replica that is up acknowledges well within it even on a
	// machine whose cores are all busy (1s was seen to run out there).
	const replicaTimeout = 2 * time.Second
	tests := []struct {
		name string
		// fault stops the replica acknowledging; heal undoes it.
		fault, heal func(t *testing.T, replica *redistest.Server)
	}{
		{"a frozen replica", func(_ *testing.T, r *redistest.Server) { r.Freeze() }, func(_ *testing.T, r *redistest.Server) { r.Thaw() }},
		{"a killed replica", func(_ *testing.T, r *redistest.Server) { r.Kill() }, func(_ *testing.T, r *redistest.Server) {
			r.Restart()
			r.WaitInSync()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			primary := redistest.Start(t, false)
			replica := redistest.StartReplica(t, primary, false)
			s := openPrivate(t, primary.Addr(), Options{KeyPrefix: testPrefix(t), NewStore: true,
				MinReplicas: 1, ReplicaTimeout: replicaTimeout, CallTimeout: 5 * time.Second})
			ctx := testCtx(t)

			l := mustGrant(t, s, req("job", "a", time.Minute, ""))
			if _, err := s.Renew(ctx, "job", "a", l.Token, time.Minute); err != nil {
				t.Fatalf("Renew with the replica up: %v", err)
			}

			tc.fault(t, replica)
			for _, call := range []struct {
				what string
				do   func() error
			}{
				{"grant", func() error { _, err := s.Acquire(ctx, req("other", "b", time.Minute, "")); return err }},
				{"renewal", func() error { _, err := s.Renew(ctx, "job", "a", l.Token, time.Minute); return err }},
				{"group grant", func() error {
					_, err := s.AcquireGroup(ctx, store.GroupRequest{Members: []store.GroupMember{{Name: "g1"}, {Name: "g2"}}, Holder: "b", TTL: time.Minute})
					return err
				}},
			} {
				began := time.Now()
				err := call.do()
				took := time.Since(began)
				if !errors.Is(err, store.ErrUnavailable) {
					t.Fatalf("%s without the replica: %v, want ErrUnavailable", call.what, err)
				}
				// The wait ends at the replica timeout; the call timeout
				// bounds the call in any case.
				if took < replicaTimeout || took > s.callTimeout {
					t.Errorf("%s failed after %s, want about the replica timeout %s", call.what, took, replicaTimeout)
				}
			}
			// The grant that was not acknowledged is left to expire: no one
			// else gets the name meanwhile.
			if res, err := s.Acquire(ctx, req("other", "c", time.Minute, "")); err == nil && res.Acquired {
				t.Fatal("the unacknowledged grant's name went to another holder")
			}

			tc.heal(t, replica)
			healed := time.Now()
			// The same holder asking again renews the lease it was not told of.
			untilGrantedDespite(t, s, req("other", "b", time.Minute, ""), 10*time.Second, unavailable)
			t.Logf("recovery: grants resumed %s after the replica came back", time.Since(healed).Round(time.Millisecond))
			if _, err := s.Renew(ctx, "job", "a", l.Token, time.Minute); err != nil {
				t.Fatalf("Renew after the replica came back: %v", err)
			}
		})
	}
}

func TestMinReplicasOptions(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	for _, o := range []Options{
		{MinReplicas: -1},
		{MinReplicas: 1, ReplicaTimeout: -time.Second},
		{MinReplicas: 1, ReplicaTimeout: 3 * time.Second, CallTimeout: 2 * time.Second},
	} {
		o.KeyPrefix = testPrefix(t)
		if s, err := New(testCtx(t), c, o); err == nil {
			_ = s.Close()
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// TestPrimaryChangeQuarantines fails over to a replica that kept the
// data-loss marker: no script can see the loss, so the change of primary
// itself starts the quarantine.
func TestPrimaryChangeQuarantines(t *testing.T) {
	t.Parallel()
	const quarantine = time.Second
	primary := redistest.Start(t, false)
	replica := redistest.StartReplica(t, primary, false)
	front := testproxy.New(t, primary.Addr())
	var losses atomic.Int32
	s := openPrivate(t, front.Addr(), Options{KeyPrefix: testPrefix(t), NewStore: true, Quarantine: quarantine,
		OnDataLoss: func(time.Duration) { losses.Add(1) }})
	ctx := testCtx(t)
	before := mustGrant(t, s, req("job", "a", time.Minute, ""))
	replica.WaitInSync()

	replica.Promote()
	front.Retarget(replica.Addr())
	front.Drop()
	primary.Kill()
	healed := time.Now()

	var q *store.QuarantineError
	for q == nil {
		_, err := s.Acquire(ctx, req("other", "b", time.Minute, ""))
		if q = asQuarantine(err); q == nil && !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Acquire after the failover: %v, want a QuarantineError", err)
		}
		if time.Since(healed) > 5*time.Second {
			t.Fatalf("no quarantine within 5s of the failover: %v", err)
		}
	}
	if n := losses.Load(); n != 1 {
		t.Errorf("OnDataLoss called %d times, want 1", n)
	}
	l, at := untilGranted(t, s, req("other", "b", time.Minute, ""), quarantine+time.Second)
	t.Logf("recovery: grants resumed %s after the failover (quarantine %s)", at.Sub(healed).Round(time.Millisecond), quarantine)
	if l.Token <= before.Token {
		t.Errorf("token %d after the failover, %d before", l.Token, before.Token)
	}
	if n := losses.Load(); n != 1 {
		t.Errorf("OnDataLoss called %d times in all, want 1", n)
	}
}

// TestPrimaryRestartedInPlaceIsNoFailover: a primary without replicas that
// restarts with its data is the same store, not a change of primary.
func TestPrimaryRestartedInPlaceIsNoFailover(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, true)
	var losses atomic.Int32
	s := openPrivate(t, srv.Addr(), Options{KeyPrefix: testPrefix(t), NewStore: true, Quarantine: time.Minute,
		OnDataLoss: func(time.Duration) { losses.Add(1) }})
	mustGrant(t, s, req("job", "a", time.Minute, ""))
	srv.Restart()
	untilGrantedDespite(t, s, req("other", "a", time.Minute, ""), 5*time.Second, unavailable)
	if n := losses.Load(); n != 0 {
		t.Errorf("OnDataLoss called %d times, want 0", n)
	}
}

// unavailable is an error a store may return while Redis or its replica
// recovers.
func unavailable(err error) bool { return errors.Is(err, store.ErrUnavailable) }
