package redisstore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/store"
)

// openPrivate makes a Store on a private Redis at addr; the server dies with
// the test, so nothing is cleaned up but the client and the store.
func openPrivate(t testing.TB, addr string, opts Options) *Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(testCtx(t), c, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// untilGranted polls Acquire until it grants, refusing anything but a
// quarantine meanwhile, and returns the lease and when it was granted.
func untilGranted(t testing.TB, s *Store, r store.AcquireRequest, within time.Duration) (store.Lease, time.Time) {
	t.Helper()
	return untilGrantedDespite(t, s, r, within, func(err error) bool { return asQuarantine(err) != nil })
}

// untilGrantedDespite polls Acquire until it grants, refusing any error
// but those passing meanwhile, and returns the lease and when it was
// granted.
func untilGrantedDespite(t testing.TB, s *Store, r store.AcquireRequest, within time.Duration, passing func(error) bool) (store.Lease, time.Time) {
	t.Helper()
	var granted store.Lease
	testwait.Until(t, within, fmt.Sprintf("a grant of %q", r.Name), func() bool {
		res, err := s.Acquire(testCtx(t), r)
		switch {
		case err == nil && res.Acquired:
			granted = res.Lease
			return true
		case err == nil:
			t.Fatalf("Acquire(%q) refused: held by %q", r.Name, res.Lease.Holder)
		case !passing(err):
			t.Fatalf("Acquire(%q): %v, want a grant, or an error that passes", r.Name, err)
		}
		return false
	})
	return granted, time.Now()
}

// grantedNotBefore polls Acquire until it grants, refusing anything but a
// refusal or a quarantine meanwhile, and fails t if the grant came before
// notBefore: a name whose lease, session or quarantine ends then.
func grantedNotBefore(t testing.TB, s *Store, r store.AcquireRequest, notBefore time.Time) store.Lease {
	t.Helper()
	var granted store.Lease
	var at time.Time
	testwait.Until(t, time.Until(notBefore)+10*time.Second, fmt.Sprintf("a grant of %q", r.Name), func() bool {
		at = time.Now()
		res, err := s.Acquire(testCtx(t), r)
		if err != nil && asQuarantine(err) == nil {
			t.Fatalf("Acquire(%q): %v, want a grant, a refusal or a quarantine", r.Name, err)
		}
		granted = res.Lease
		return err == nil && res.Acquired
	})
	if early := notBefore.Sub(at); early > 0 {
		t.Fatalf("%q granted %s before %s", r.Name, early, notBefore.Format(time.StampMilli))
	}
	return granted
}

// TestDataLostWhileDownIsDetectedAtStart: markers that New finds missing mean
// the data was lost while no coordinator ran, and grants wait for the
// quarantine; unless the deployment says the store is new.
func TestDataLostWhileDownIsDetectedAtStart(t *testing.T) {
	t.Parallel()
	const quarantine = time.Second
	tests := []struct {
		name string
		// persist runs Redis with an append-only file.
		persist bool
		// lose loses (or keeps) the data while no store is open.
		lose     func(t *testing.T, srv *redistest.Server)
		newStore bool
		wantLoss bool
	}{
		{"a flush while down quarantines", true, flushAll, false, true},
		{"a restart without persistence while down quarantines", false, restart, false, true},
		{"a restart with persistence keeps the markers: no quarantine", true, restart, false, false},
		{"a new store after a flush does not wait", true, flushAll, true, false},
		{"a new store that kept its markers does not wait", true, func(*testing.T, *redistest.Server) {}, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, tc.persist)
			prefix := testPrefix(t)
			first := openPrivate(t, srv.Addr(), Options{KeyPrefix: prefix, Quarantine: quarantine, NewStore: true})
			before := mustGrant(t, first, req("job", "a", time.Minute, ""))
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}

			tc.lose(t, srv)
			var losses atomic.Int32
			s := openPrivate(t, srv.Addr(), Options{KeyPrefix: prefix, Quarantine: quarantine, NewStore: tc.newStore,
				OnDataLoss: func(time.Duration) { losses.Add(1) }})
			started := time.Now()
			if got := losses.Load() == 1; got != tc.wantLoss {
				t.Fatalf("OnDataLoss called %d times at New, want a loss: %v", losses.Load(), tc.wantLoss)
			}
			if !tc.wantLoss {
				if l := mustGrant(t, s, req("other", "b", time.Minute, "")); l.Token <= before.Token {
					t.Errorf("token %d after %d", l.Token, before.Token)
				}
				return
			}
			_, err := s.Acquire(testCtx(t), req("job", "b", time.Minute, ""))
			q := asQuarantine(err)
			if q == nil || q.RetryAfter <= 0 || q.RetryAfter > quarantine {
				t.Fatalf("Acquire after a loss while down: %v, want a QuarantineError within %s", err, quarantine)
			}
			l, at := untilGranted(t, s, req("job", "b", time.Minute, ""), quarantine+time.Second)
			t.Logf("recovery: grants resumed %s after the store started (quarantine %s)", at.Sub(started).Round(time.Millisecond), quarantine)
			if l.Token <= before.Token {
				t.Errorf("token %d after the loss, %d before", l.Token, before.Token)
			}
			if n := losses.Load(); n != 1 {
				t.Errorf("OnDataLoss called %d times, want 1", n)
			}
		})
	}
}

func flushAll(t *testing.T, srv *redistest.Server) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer func() { _ = c.Close() }()
	if err := c.FlushAll(testCtx(t)).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestFirstStartWithoutNewStoreWaits: without the new-store setting, a first
// start cannot tell an empty Redis from one that lost its data.
func TestFirstStartWithoutNewStoreWaits(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, false)
	s := openPrivate(t, srv.Addr(), Options{KeyPrefix: testPrefix(t), Quarantine: time.Minute})
	_, err := s.Acquire(testCtx(t), req("job", "a", time.Second, ""))
	if q := asQuarantine(err); q == nil || q.RetryAfter <= 50*time.Second {
		t.Fatalf("Acquire at a first start: %v, want a QuarantineError of about a minute", err)
	}
	// Every coordinator that starts later finds the markers: the quarantine
	// is not started again.
	var losses atomic.Int32
	openPrivate(t, srv.Addr(), Options{KeyPrefix: s.prefix, Quarantine: time.Minute, OnDataLoss: func(time.Duration) { losses.Add(1) }})
	if n := losses.Load(); n != 0 {
		t.Errorf("a second start reported %d losses, want 0", n)
	}
}

func restart(_ *testing.T, srv *redistest.Server) { srv.Restart() }
