package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/coordinator-dev/coordinator/server/store"
)

// RunSessions runs the conformance tests of sessions (store.Sessions)
// against stores made by newStore, whose Store must implement it.
func RunSessions(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, Subject, store.Sessions)
		opts Options
	}{
		{"OneRenewalKeepsEveryAttachedLease", testSessionRenewKeepsAll, Options{}},
		{"ExpiryEndsEveryAttachedLeaseWithTheLockDelay", testSessionExpiryEndsAll, Options{LockDelay: lockDelay}},
		{"CloseReleasesEveryAttachedLeaseAtOnce", testSessionCloseEndsAll, Options{LockDelay: lockDelay}},
		{"ReleasingOneAttachedLeaseKeepsTheOthers", testSessionReleaseOne, Options{}},
		{"AttachedGrantsKeepTheirTokensAndReacquireIsIdempotent", testSessionTokens, Options{}},
		{"ASessionIsACapabilityOfItsOwner", testSessionOwner, Options{}},
		{"ADeadSessionNeverRevives", testSessionDeadForEver, Options{}},
		{"AnAttachedLeaseIsRenewedThroughItsSession", testSessionLeaseRenew, Options{}},
		{"AttachedSemaphoreGrantsShareTheCapacity", testSessionSemaphore, Options{}},
		{"ReleasingAttachedSharesOneByOneFreesTheirWeight", testSessionSharesReleased, Options{}},
		{"ObserversSeeTheVacancyOfAnExpiredSession", testSessionObservers, Options{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, tc.opts)
			t.Cleanup(func() { _ = s.Close() })
			ss, ok := s.Store.(store.Sessions)
			if !ok {
				t.Fatalf("%T does not implement store.Sessions", s.Store)
			}
			tc.fn(t, s, ss)
		})
	}
}

const owner = "alice"

func newSession(t *testing.T, ss store.Sessions) store.Session {
	t.Helper()
	sess, err := ss.CreateSession(context.Background(), owner, shortTTL)
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if sess.ID == "" || sess.Owner != owner || sess.TTL != shortTTL {
		t.Fatalf("CreateSession = %+v", sess)
	}
	return sess
}

// attach acquires name for holder in sess, which must be granted.
func attach(t *testing.T, s Subject, sess store.Session, name, holder string) store.Lease {
	t.Helper()
	res, err := s.Acquire(context.Background(), store.AcquireRequest{Name: name, Holder: holder, Session: sess.ID, SessionOwner: sess.Owner})
	if err != nil {
		t.Fatalf("Acquire(%s) in session: %v", name, err)
	}
	if !res.Acquired {
		t.Fatalf("%s could not acquire %q in its session (held by %q)", holder, name, res.Lease.Holder)
	}
	if res.Lease.Session != sess.ID || res.Lease.TTL != sess.TTL {
		t.Fatalf("attached lease = %+v; want session %s, ttl %s", res.Lease, sess.ID, sess.TTL)
	}
	return res.Lease
}

func renewSession(t *testing.T, ss store.Sessions, sess store.Session) store.Session {
	t.Helper()
	got, err := ss.RenewSession(context.Background(), sess.ID, sess.Owner)
	if err != nil {
		t.Fatalf("RenewSession: %v", err)
	}
	if got.ID != sess.ID || got.ExpiresAt.Before(sess.ExpiresAt) {
		t.Fatalf("RenewSession = %+v after %+v", got, sess)
	}
	return got
}

// heldBy reports whether name has a live grant of holder, by Describe.
func heldBy(t *testing.T, s Subject, name, holder string) bool {
	t.Helper()
	d, err := s.Describe(context.Background(), name)
	if err != nil {
		t.Fatalf("Describe(%s): %v", name, err)
	}
	return slices.ContainsFunc(d.Holders, func(l store.Lease) bool { return l.Holder == holder })
}

var sessionNames = []string{"p0", "p1", "p2"}

func testSessionRenewKeepsAll(t *testing.T, s Subject, ss store.Sessions) {
	sess := newSession(t, ss)
	for _, name := range sessionNames {
		attach(t, s, sess, name, "w")
	}
	// Renewed twice, the session outlives its first expiry, and so does
	// every lease attached to it, which nobody renewed on its own.
	for range 2 {
		pass(s, shortTTL/2)
		sess = renewSession(t, ss, sess)
	}
	pass(s, shortTTL/2)
	for _, name := range sessionNames {
		if !heldBy(t, s, name, "w") {
			t.Fatalf("%s: the attached lease ended although its session was renewed", name)
		}
		if res := acquire(t, s, store.AcquireRequest{Name: name, Holder: "other"}); res.Acquired {
			t.Fatalf("%s: granted to another while the session lives", name)
		} else if res.Lease.Holder != "w" || res.Lease.Session != sess.ID {
			t.Fatalf("%s: refusal names %+v; want w in session %s", name, res.Lease, sess.ID)
		}
	}
	d, err := ss.DescribeSession(context.Background(), sess.ID, owner)
	if err != nil || !slices.Equal(d.Names, sessionNames) {
		t.Fatalf("DescribeSession = %+v, %v; want names %v", d, err, sessionNames)
	}
	pass(s, shortTTL+margin)
	for _, name := range sessionNames {
		mustAcquire(t, s, name, "other")
	}
}

func testSessionExpiryEndsAll(t *testing.T, s Subject, ss store.Sessions) {
	sess := newSession(t, ss)
	leases := map[string]store.Lease{}
	for _, name := range sessionNames {
		leases[name] = attach(t, s, sess, name, "w")
		if res := acquire(t, s, store.AcquireRequest{Name: name, Holder: "next", Waiter: "next"}); res.Acquired {
			t.Fatalf("%s: the waiter was granted at once", name)
		}
	}
	pass(s, shortTTL+margin)
	for _, name := range sessionNames {
		res := acquire(t, s, store.AcquireRequest{Name: name, Holder: "next", Waiter: "next"})
		if res.Acquired {
			t.Fatalf("%s: granted in the lock delay of the session's expiry", name)
		}
		if want := leases[name].ExpiresAt.Add(lockDelay); !closeTo(res.RetryAt, want) {
			t.Fatalf("%s: RetryAt %v; want the session's expiry plus the lock delay, %v", name, res.RetryAt, want)
		}
	}
	pass(s, lockDelay)
	for _, name := range sessionNames {
		res := acquire(t, s, store.AcquireRequest{Name: name, Holder: "next", Waiter: "next"})
		if !res.Acquired {
			t.Fatalf("%s: the waiter was not granted after the session expired", name)
		}
		if res.Lease.Token <= leases[name].Token {
			t.Fatalf("%s: token %d after %d", name, res.Lease.Token, leases[name].Token)
		}
	}
}

func testSessionCloseEndsAll(t *testing.T, s Subject, ss store.Sessions) {
	ctx := context.Background()
	sess := newSession(t, ss)
	for _, name := range sessionNames {
		attach(t, s, sess, name, "w")
		acquire(t, s, store.AcquireRequest{Name: name, Holder: "next", Waiter: "next"})
	}
	c := s.Changes(sessionNames[0])
	defer c.Cancel()
	drain(c)
	if err := ss.CloseSession(ctx, sess.ID, owner); err != nil {
		t.Fatalf("CloseSession: %v", err)
	}
	waitChange(t, c, "close")
	// A close is a release: no lock delay.
	for _, name := range sessionNames {
		if res := acquire(t, s, store.AcquireRequest{Name: name, Holder: "next", Waiter: "next"}); !res.Acquired {
			t.Fatalf("%s: the waiter was not granted after the close", name)
		}
	}
	if err := ss.CloseSession(ctx, sess.ID, owner); err != nil {
		t.Fatalf("a second CloseSession: %v; want success", err)
	}
	if _, err := ss.RenewSession(ctx, sess.ID, owner); !errors.Is(err, store.ErrSessionClosed) {
		t.Fatalf("RenewSession after close: %v; want ErrSessionClosed", err)
	}
	_, err := s.Acquire(ctx, store.AcquireRequest{Name: "late", Holder: "w", Session: sess.ID, SessionOwner: owner})
	if !errors.Is(err, store.ErrSessionClosed) {
		t.Fatalf("attach after close: %v; want ErrSessionClosed", err)
	}
	if heldBy(t, s, "late", "w") {
		t.Fatal("a closed session was granted a lease")
	}
}

func testSessionReleaseOne(t *testing.T, s Subject, ss store.Sessions) {
	ctx := context.Background()
	sess := newSession(t, ss)
	leases := make([]store.Lease, len(sessionNames))
	for i, name := range sessionNames {
		leases[i] = attach(t, s, sess, name, "w")
	}
	if ok, err := s.Release(ctx, leases[0].Name, "w", leases[0].Token+1); err != nil || ok {
		t.Fatalf("Release with a wrong token = %v, %v; want false", ok, err)
	}
	mustRelease(t, s, leases[0])
	mustAcquire(t, s, leases[0].Name, "other")
	pass(s, shortTTL/2)
	renewSession(t, ss, sess)
	pass(s, shortTTL/2+margin)
	for _, l := range leases[1:] {
		if !heldBy(t, s, l.Name, "w") {
			t.Fatalf("%s ended when another lease of its session was released", l.Name)
		}
	}
	d, err := ss.DescribeSession(ctx, sess.ID, owner)
	if err != nil || !slices.Equal(d.Names, sessionNames[1:]) {
		t.Fatalf("DescribeSession = %+v, %v; want names %v", d, err, sessionNames[1:])
	}
}

func testSessionTokens(t *testing.T, s Subject, ss store.Sessions) {
	sess := newSession(t, ss)
	own := mustAcquire(t, s, "job", "a")
	mustRelease(t, s, own)
	first := attach(t, s, sess, "job", "w")
	if first.Token <= own.Token {
		t.Fatalf("attached token %d after %d", first.Token, own.Token)
	}
	again := attach(t, s, sess, "job", "w")
	if again.Token != first.Token {
		t.Fatalf("re-acquire in the session: token %d, want %d", again.Token, first.Token)
	}
	// Asked again with a TTL of its own, the grant leaves the session and
	// keeps its token: the session's end no longer ends it.
	detached := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w"})
	if !detached.Acquired || detached.Lease.Token != first.Token || detached.Lease.Session != "" {
		t.Fatalf("re-acquire with a TTL = %+v; want token %d, no session", detached, first.Token)
	}
	if err := ss.CloseSession(context.Background(), sess.ID, owner); err != nil {
		t.Fatal(err)
	}
	if !heldBy(t, s, "job", "w") {
		t.Fatal("closing the session ended a grant that left it")
	}
	mustRelease(t, s, detached.Lease)
	next := newSession(t, ss)
	if l := attach(t, s, next, "job", "x"); l.Token <= first.Token {
		t.Fatalf("token %d after %d", l.Token, first.Token)
	}
}

func testSessionOwner(t *testing.T, s Subject, ss store.Sessions) {
	ctx := context.Background()
	sess := newSession(t, ss)
	attach(t, s, sess, "job", "w")
	const mallory = "mallory"
	if _, err := ss.RenewSession(ctx, sess.ID, mallory); !errors.Is(err, store.ErrSessionNotOwned) {
		t.Fatalf("RenewSession by another owner: %v; want ErrSessionNotOwned", err)
	}
	if err := ss.CloseSession(ctx, sess.ID, mallory); !errors.Is(err, store.ErrSessionNotOwned) {
		t.Fatalf("CloseSession by another owner: %v; want ErrSessionNotOwned", err)
	}
	if _, err := ss.DescribeSession(ctx, sess.ID, mallory); !errors.Is(err, store.ErrSessionNotOwned) {
		t.Fatalf("DescribeSession by another owner: %v; want ErrSessionNotOwned", err)
	}
	_, err := s.Acquire(ctx, store.AcquireRequest{Name: "other", Holder: "m", Session: sess.ID, SessionOwner: mallory})
	if !errors.Is(err, store.ErrSessionNotOwned) {
		t.Fatalf("attach by another owner: %v; want ErrSessionNotOwned", err)
	}
	if !heldBy(t, s, "job", "w") {
		t.Fatal("another owner's calls ended the session's lease")
	}
	const unknown = "00000000000000000000000000000000"
	if _, err := ss.RenewSession(ctx, unknown, owner); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("RenewSession of an unknown id: %v; want ErrSessionNotFound", err)
	}
	_, err = s.Acquire(ctx, store.AcquireRequest{Name: "other", Holder: "w", Session: unknown, SessionOwner: owner})
	if !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("attach to an unknown id: %v; want ErrSessionNotFound", err)
	}
}

func testSessionDeadForEver(t *testing.T, s Subject, ss store.Sessions) {
	ctx := context.Background()
	sess := newSession(t, ss)
	attach(t, s, sess, "job", "w")
	pass(s, shortTTL+margin)
	if _, err := ss.RenewSession(ctx, sess.ID, owner); !errors.Is(err, store.ErrSessionExpired) {
		t.Fatalf("RenewSession after expiry: %v; want ErrSessionExpired", err)
	}
	_, err := s.Acquire(ctx, store.AcquireRequest{Name: "job", Holder: "w", Session: sess.ID, SessionOwner: owner})
	if !errors.Is(err, store.ErrSessionExpired) {
		t.Fatalf("re-acquire in an expired session: %v; want ErrSessionExpired", err)
	}
	if err := ss.CloseSession(ctx, sess.ID, owner); !errors.Is(err, store.ErrSessionExpired) {
		t.Fatalf("CloseSession after expiry: %v; want ErrSessionExpired", err)
	}
	if heldBy(t, s, "job", "w") {
		t.Fatal("an expired session's lease is reported held")
	}
	mustAcquire(t, s, "job", "other")
}

func testSessionLeaseRenew(t *testing.T, s Subject, ss store.Sessions) {
	sess := newSession(t, ss)
	l := attach(t, s, sess, "job", "w")
	if _, err := s.Renew(context.Background(), "job", "w", l.Token, longTTL); !errors.Is(err, store.ErrLeaseInSession) {
		t.Fatalf("Renew of an attached lease: %v; want ErrLeaseInSession", err)
	}
	pass(s, shortTTL+margin)
	if heldBy(t, s, "job", "w") {
		t.Fatal("a refused Renew kept the attached lease past its session")
	}
}

func testSessionSemaphore(t *testing.T, s Subject, ss store.Sessions) {
	ctx := context.Background()
	sess := newSession(t, ss)
	for i, holder := range []string{"r1", "r2"} {
		res, err := s.Acquire(ctx, store.AcquireRequest{Name: "pool", Holder: holder, Capacity: 3, Weight: int64(i + 1),
			Session: sess.ID, SessionOwner: owner})
		if err != nil || !res.Acquired {
			t.Fatalf("%s in the session = %+v, %v", holder, res, err)
		}
	}
	if res := share(t, s, "pool", "x", 3, 1, "x"); res.Acquired {
		t.Fatal("granted past the capacity")
	}
	if err := ss.CloseSession(ctx, sess.ID, owner); err != nil {
		t.Fatal(err)
	}
	if res := share(t, s, "pool", "x", 3, 3, "x"); !res.Acquired {
		t.Fatal("the whole capacity was not free after the session closed")
	}
}

// Shares of one name in one session, released one by one while the
// session lives: each release gives its weight back, for the session's own
// next shares as for anyone's.
func testSessionSharesReleased(t *testing.T, s Subject, ss store.Sessions) {
	ctx := context.Background()
	sess := newSession(t, ss)
	const capacity = 4
	tests := []struct {
		weights []int64 // held at once, in the session, then released in order
		next    int64   // then acquired in the session, and by a holder of its own
	}{
		{[]int64{1, 1, 1, 1}, 3},
		{[]int64{2, 2}, 2},
		{[]int64{3, 1}, 3},
		{[]int64{1, 2}, 1},
	}
	for round, tc := range tests {
		name := fmt.Sprintf("pool-%d", round)
		var leases []store.Lease
		for i, w := range tc.weights {
			res, err := s.Acquire(ctx, store.AcquireRequest{Name: name, Holder: fmt.Sprintf("h%d", i), Capacity: capacity, Weight: w,
				Session: sess.ID, SessionOwner: owner})
			if err != nil || !res.Acquired {
				t.Fatalf("%s: share %d (weight %d) in the session = %+v, %v", name, i, w, res, err)
			}
			leases = append(leases, res.Lease)
		}
		for i, l := range leases {
			if ok, err := s.Release(ctx, name, l.Holder, l.Token); err != nil || !ok {
				t.Fatalf("%s: Release of share %d = %v, %v", name, i, ok, err)
			}
		}
		res, err := s.Acquire(ctx, store.AcquireRequest{Name: name, Holder: "next", Capacity: capacity, Weight: tc.next,
			Session: sess.ID, SessionOwner: owner})
		if err != nil || !res.Acquired {
			t.Fatalf("%s: weight %d in the session after every share was released = %+v, %v; want granted", name, tc.next, res, err)
		}
		if res := share(t, s, name, "own", capacity, capacity-tc.next, ""); !res.Acquired {
			t.Fatalf("%s: the rest of the capacity (%d) by a holder of its own = %+v; want granted", name, capacity-tc.next, res)
		}
	}
}

func testSessionObservers(t *testing.T, s Subject, ss store.Sessions) {
	ctx := context.Background()
	sess := newSession(t, ss)
	attach(t, s, sess, "job", "w")
	pass(s, shortTTL/2)
	renewSession(t, ss, sess)
	pass(s, shortTTL/2+margin)
	if d, err := watchOne(ctx, s, "job"); err != nil || !d.Held || d.Lease.Holder != "w" {
		t.Fatalf("Watch while the session lives = %+v, %v; want held by w", d, err)
	}
	page, err := s.List(ctx, "", "", 0)
	if err != nil || len(page.Leases) != 1 || page.Leases[0].Session != sess.ID {
		t.Fatalf("List while the session lives = %+v, %v; want one lease of the session", page, err)
	}
	pass(s, shortTTL+margin)
	if d, err := watchOne(ctx, s, "job"); err != nil || d.Held {
		t.Fatalf("Watch after the session expired = %+v, %v; want vacant", d, err)
	}
	if page, err := s.List(ctx, "", "", 0); err != nil || len(page.Leases) != 0 {
		t.Fatalf("List after the session expired = %+v, %v; want empty", page, err)
	}
}
