package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// Options are the store settings a test needs.
type Options struct {
	// LockDelay keeps the name of an expired lease from being granted again.
	LockDelay time.Duration
	// RealTime asks for a store on the real clock even when it could follow
	// a fake one: the test races goroutines against expiry.
	RealTime bool
	// IdleNameTTL is how long a name's state outlives its last use; 0 means
	// the store's default.
	IdleNameTTL time.Duration
}

// Subject is a store under test.
type Subject struct {
	store.Store
	// Sleep lets d pass on the store's clock, for a store on a fake clock;
	// nil means the store keeps real time and the suite sleeps.
	Sleep func(d time.Duration)
	// Remembers reports whether the store still keeps any state of name
	// (a Redis key, a map entry); nil skips the checks that need it.
	Remembers func(name string) bool
	// SplitsGroup reports whether the store may take a group of names in
	// several state changes (a Redis Cluster, the names in several slots),
	// holding some members while it waits for others; nil means it never
	// does. RunGroups then checks what a caller sees of such a group.
	SplitsGroup func(names []string) bool
}

// Factory returns a fresh, empty store for one test, with opts. The suite
// closes it.
type Factory func(t *testing.T, opts Options) Subject

// Run runs every conformance test against stores made by newStore.
func Run(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, Subject)
		opts Options
	}{
		{"GrantThenRefuseOtherHolder", testGrantThenRefuse, Options{}},
		{"ReacquireByHolderKeepsTheTokenAndTakesTTLAndValue", testReacquire, Options{}},
		{"TokensIncreaseAcrossReleaseAndExpiry", testTokensIncrease, Options{}},
		{"ExpiredLeaseIsGrantedToAnother", testExpiry, Options{}},
		{"RenewIsCompareAndSet", testRenewCAS, Options{}},
		{"RenewMayShortenLease", testRenewShortens, Options{}},
		{"TTLMustBePositive", testTTLMustBePositive, Options{}},
		{"ReleaseIsCompareAndSet", testReleaseCAS, Options{}},
		{"DescribeReportsLeaseLastTokenAndWaiters", testDescribe, Options{}},
		{"WaitersAreServedInArrivalOrder", testFIFO, Options{}},
		{"NonWaiterIsRefusedWhileWaitersQueue", testNonWaiterRefused, Options{}},
		{"DeadWaiterIsDroppedAfterItsTTL", testDeadWaiterPruned, Options{}},
		{"WaiterThatKeepsTryingKeepsItsPlace", testWaiterKeepsItsPlace, Options{}},
		{"WaiterTTLZeroMeansTheDefault", testWaiterTTLDefault, Options{}},
		{"DequeueLetsTheNextWaiterInAndAnnouncesIt", testDequeue, Options{}},
		{"DroppingADeadHeadAnnouncesTheName", testDeadHeadAnnounced, Options{}},
		{"ChangesAnnounceGrantRevalueAndRelease", testChanges, Options{}},
		{"ChangesChannelsCloseWithTheStore", testChangesClose, Options{}},
		{"ListPagesThroughHeldLeases", testList, Options{}},
		{"ListWithoutALimitReturnsADefaultPage", testListDefaultLimit, Options{}},
		{"NamesAreOpaque", testOpaqueNames, Options{}},
		{"ContendedLeasesNeverOverlap", testContention, Options{RealTime: true}},
		{"LockDelayFollowsExpiryNotRelease", testLockDelay, Options{LockDelay: lockDelay}},
		{"IdleNamesAreForgottenAndTheirTokensStillIncrease", testIdleNamesForgotten, Options{IdleNameTTL: retention, LockDelay: lockDelay}},
		{"RenewAndReleaseKeepANameRemembered", testUseKeepsNameRemembered, Options{IdleNameTTL: retention}},
		{"DescribeLastTokenIsAFloorOfIssuedTokens", testLastTokenFloor, Options{}},
		{"ALockCallByTheHolderKeepsItsValue", testKeepValue, Options{}},
		{"AnAcquireWithATokenOnlyRenewsThatGrant", testAcquireWithToken, Options{}},
		{"RefreshWaitersKeepsOnlyQueuedWaitersQueued", testRefreshWaiters, Options{}},
		{"WatchDescribesManyNamesInOrder", testWatchMany, Options{}},
		{"PingAnswers", testPing, Options{}},
		{"SemaphoreGrantsUpToItsCapacity", testSemaphoreGrantsUpToItsCapacity, Options{}},
		{"SemaphoreWeightsAddUp", testSemaphoreWeightsAddUp, Options{}},
		{"WriterWaitingBehindReadersComesBeforeLaterReaders", testWriterBehindReadersComesFirst, Options{}},
		{"WaiterPassesThoseAheadOnlyWhenTheyFit", testWaiterPassesOnlyWhenThoseAheadFit, Options{}},
		{"CapacityMustAgreeWhileHeldOrAwaited", testCapacityMustAgree, Options{}},
		{"HoldersPerNameAreCapped", testHolderCap, Options{}},
		{"SemaphoreReacquireKeepsTokenAndWeight", testSemaphoreReacquireKeepsTokenAndWeight, Options{}},
		{"DeadHoldersGiveTheirWeightBackAfterTheLockDelay", testDeadHoldersGiveTheirWeightBack, Options{LockDelay: lockDelay}},
		{"IdleSemaphoresAreForgottenAndHeldOnesKept", testIdleSemaphoresForgotten, Options{IdleNameTTL: retention, LockDelay: lockDelay}},
		{"SemaphoreNeverOverGrantsUnderConcurrency", testSemaphoreNeverOverGrants, Options{RealTime: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, tc.opts)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

const (
	longTTL = time.Minute
	// shortTTL is a lease or waiter meant to run out during the test. A
	// test may still count on it for the few calls right after it was set.
	shortTTL  = 500 * time.Millisecond
	lockDelay = time.Second
	// margin is waited beyond an expiry, for the store's millisecond
	// rounding.
	margin = 50 * time.Millisecond
	// slack is how far a time the store computed may be from the one
	// expected from other times it reported (millisecond rounding).
	slack = 5 * time.Millisecond
	// patience bounds the wait for an announcement.
	patience = 5 * time.Second
)

// pass lets d pass on s's clock.
func pass(s Subject, d time.Duration) {
	if s.Sleep != nil {
		s.Sleep(d)
		return
	}
	time.Sleep(d)
}

func acquire(t *testing.T, s Subject, req store.AcquireRequest) store.AcquireResult {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = longTTL
	}
	if req.Waiter != "" && req.WaiterTTL == 0 {
		req.WaiterTTL = longTTL
	}
	res, err := s.Acquire(context.Background(), req)
	if err != nil {
		t.Fatalf("Acquire(%+v): %v", req, err)
	}
	return res
}

func mustAcquire(t *testing.T, s Subject, name, holder string) store.Lease {
	t.Helper()
	res := acquire(t, s, store.AcquireRequest{Name: name, Holder: holder})
	if !res.Acquired {
		t.Fatalf("%s could not acquire %q (held by %q)", holder, name, res.Lease.Holder)
	}
	return res.Lease
}

func mustRelease(t *testing.T, s Subject, l store.Lease) {
	t.Helper()
	ok, err := s.Release(context.Background(), l.Name, l.Holder, l.Token)
	if err != nil || !ok {
		t.Fatalf("Release(%s, %s, %d) = %v, %v; want true", l.Name, l.Holder, l.Token, ok, err)
	}
}

func closeTo(got, want time.Time) bool { return got.Sub(want).Abs() <= slack }

func testGrantThenRefuse(t *testing.T, s Subject) {
	before := time.Now()
	l := mustAcquire(t, s, "job", "a")
	if l.Name != "job" || l.Holder != "a" || l.Token == 0 || l.TTL != longTTL {
		t.Fatalf("granted lease = %+v", l)
	}
	// The store's clock may differ from ours a little, never by much.
	if d := l.ExpiresAt.Sub(before.Add(longTTL)); d < -2*time.Second || d > 2*time.Second {
		t.Fatalf("expires_at %v is %v away from now+ttl", l.ExpiresAt, d)
	}
	res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "b"})
	if res.Acquired {
		t.Fatal("b acquired a lease a holds")
	}
	if res.Lease.Holder != "a" || res.Lease.Token != l.Token {
		t.Fatalf("refusal reports holder %q token %d, want a %d", res.Lease.Holder, res.Lease.Token, l.Token)
	}
	if !closeTo(res.RetryAt, l.ExpiresAt) {
		t.Fatalf("refusal's RetryAt %v; want the lease's expiry %v", res.RetryAt, l.ExpiresAt)
	}
}

func testReacquire(t *testing.T, s Subject) {
	first := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", Value: []byte("v1"), TTL: time.Second})
	again := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", Value: []byte("v1"), TTL: longTTL})
	if !again.Acquired || again.Lease.Token != first.Lease.Token {
		t.Fatalf("reacquire = %+v, want the same token %d", again, first.Lease.Token)
	}
	if again.Lease.TTL != longTTL || !again.Lease.ExpiresAt.After(first.Lease.ExpiresAt) {
		t.Fatalf("reacquire did not take the new ttl: %+v", again.Lease)
	}
	proclaimed := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", Value: []byte("v2")})
	if !proclaimed.Acquired || !bytes.Equal(proclaimed.Lease.Value, []byte("v2")) || proclaimed.Lease.Token != first.Lease.Token {
		t.Fatalf("reacquire with a new value = %+v", proclaimed)
	}
	if d, err := s.Describe(context.Background(), "job"); err != nil || string(d.Lease.Value) != "v2" {
		t.Fatalf("Describe after the new value = %+v, %v", d, err)
	}
}

func testTokensIncrease(t *testing.T, s Subject) {
	var last uint64
	check := func(l store.Lease) {
		t.Helper()
		if l.Token <= last {
			t.Fatalf("token %d after %d", l.Token, last)
		}
		last = l.Token
	}
	for i := range 3 {
		l := mustAcquire(t, s, "job", fmt.Sprintf("h%d", i))
		check(l)
		mustRelease(t, s, l)
	}
	res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "x", TTL: shortTTL})
	check(res.Lease)
	pass(s, shortTTL+margin)
	check(mustAcquire(t, s, "job", "y"))
	// Another name has its own counter, but it too only goes up.
	other := mustAcquire(t, s, "other", "a")
	mustRelease(t, s, other)
	if again := mustAcquire(t, s, "other", "a"); again.Token <= other.Token {
		t.Fatalf("other: token %d after %d", again.Token, other.Token)
	}
}

func testExpiry(t *testing.T, s Subject) {
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", TTL: shortTTL})
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "b"}); res.Acquired {
		t.Fatal("b acquired before a's lease expired")
	}
	pass(s, shortTTL+margin)
	mustAcquire(t, s, "job", "b")
}

func testRenewCAS(t *testing.T, s Subject) {
	ctx := context.Background()
	l := mustAcquire(t, s, "job", "a")
	expired := acquire(t, s, store.AcquireRequest{Name: "short", Holder: "a", TTL: shortTTL}).Lease
	released := mustAcquire(t, s, "gone", "a")
	mustRelease(t, s, released)
	pass(s, shortTTL+margin)

	for _, tc := range []struct {
		name, lease, holder string
		token               uint64
	}{
		{"other holder", "job", "b", l.Token},
		{"stale token", "job", "a", l.Token - 1},
		{"newer token", "job", "a", l.Token + 1},
		{"expired", "short", "a", expired.Token},
		{"released", "gone", "a", released.Token},
		{"never granted", "nothing", "a", 1},
	} {
		if _, err := s.Renew(ctx, tc.lease, tc.holder, tc.token, longTTL); !errors.Is(err, store.ErrLeaseNotHeld) {
			t.Errorf("%s: Renew err = %v, want ErrLeaseNotHeld", tc.name, err)
		}
	}
	renewed, err := s.Renew(ctx, "job", "a", l.Token, 2*longTTL)
	if err != nil {
		t.Fatalf("Renew by the holder: %v", err)
	}
	if renewed.Token != l.Token || renewed.TTL != 2*longTTL || !renewed.ExpiresAt.After(l.ExpiresAt) {
		t.Fatalf("renewed = %+v, was %+v", renewed, l)
	}
}

func testRenewShortens(t *testing.T, s Subject) {
	l := mustAcquire(t, s, "job", "a")
	if _, err := s.Renew(context.Background(), "job", "a", l.Token, shortTTL); err != nil {
		t.Fatal(err)
	}
	pass(s, shortTTL+margin)
	mustAcquire(t, s, "job", "b")
}

func testTTLMustBePositive(t *testing.T, s Subject) {
	ctx := context.Background()
	for _, ttl := range []time.Duration{0, -time.Second} {
		if res, err := s.Acquire(ctx, store.AcquireRequest{Name: "job", Holder: "a", TTL: ttl}); err == nil {
			t.Errorf("Acquire with ttl %s = %+v; want an error", ttl, res)
		}
	}
	l := mustAcquire(t, s, "job", "a")
	for _, ttl := range []time.Duration{0, -time.Second} {
		if _, err := s.Renew(ctx, "job", "a", l.Token, ttl); err == nil || errors.Is(err, store.ErrLeaseNotHeld) {
			t.Errorf("Renew with ttl %s: err = %v; want an error other than ErrLeaseNotHeld", ttl, err)
		}
	}
	if d, err := s.Describe(ctx, "job"); err != nil || !d.Held || !d.Lease.ExpiresAt.Equal(l.ExpiresAt) {
		t.Fatalf("after refused renewals Describe = %+v, %v; want the lease unchanged", d, err)
	}
}

func testReleaseCAS(t *testing.T, s Subject) {
	ctx := context.Background()
	l := mustAcquire(t, s, "job", "a")
	for _, tc := range []struct {
		name, holder string
		token        uint64
	}{
		{"other holder", "b", l.Token},
		{"stale token", "a", l.Token - 1},
	} {
		if ok, err := s.Release(ctx, "job", tc.holder, tc.token); err != nil || ok {
			t.Errorf("%s: Release = %v, %v; want false", tc.name, ok, err)
		}
	}
	mustRelease(t, s, l)
	if ok, err := s.Release(ctx, "job", "a", l.Token); err != nil || ok {
		t.Fatalf("second Release = %v, %v; want false (safe to retry)", ok, err)
	}
	mustAcquire(t, s, "job", "b")
}

func testDescribe(t *testing.T, s Subject) {
	ctx := context.Background()
	d, err := s.Describe(ctx, "job")
	if err != nil || d.Held || d.Waiters != 0 {
		t.Fatalf("Describe of a new name = %+v, %v", d, err)
	}
	l := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", Value: []byte("v")}).Lease
	if l.Token <= d.LastToken {
		t.Fatalf("first token %d, not above the last token %d Describe reported before", l.Token, d.LastToken)
	}
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w1", Waiter: "w1"})
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w2", Waiter: "w2"})
	d, err = s.Describe(ctx, "job")
	if err != nil || !d.Held || d.Lease.Holder != "a" || d.Lease.Token != l.Token || d.LastToken != l.Token ||
		string(d.Lease.Value) != "v" || d.Lease.TTL != l.TTL || !closeTo(d.Lease.ExpiresAt, l.ExpiresAt) || d.Waiters != 2 {
		t.Fatalf("Describe of a held name with two waiters = %+v, %v; granted %+v", d, err, l)
	}
	mustRelease(t, s, l)
	if err := s.Dequeue(ctx, "job", "w1"); err != nil {
		t.Fatal(err)
	}
	d, err = s.Describe(ctx, "job")
	if err != nil || d.Held || d.LastToken != l.Token || d.Waiters != 1 {
		t.Fatalf("Describe after release and dequeue = %+v, %v; want not held, last token %d, 1 waiter", d, err, l.Token)
	}
}

func testFIFO(t *testing.T, s Subject) {
	holder := mustAcquire(t, s, "job", "owner")
	const n = 5
	for i := range n {
		w := fmt.Sprintf("w%d", i)
		if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: w, Waiter: w}); res.Acquired {
			t.Fatalf("%s acquired a held lease", w)
		}
	}
	// Attempts keep their place.
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w0", Waiter: "w0"})
	mustRelease(t, s, holder)
	for i := range n {
		// Everyone tries, youngest first: only the oldest waiter may win.
		var winner store.Lease
		for j := n - 1; j >= i; j-- {
			w := fmt.Sprintf("w%d", j)
			res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: w, Waiter: w})
			if res.Acquired {
				if j != i {
					t.Fatalf("%s was granted before w%d", w, i)
				}
				winner = res.Lease
			}
		}
		if winner.Holder == "" {
			t.Fatalf("w%d was not granted", i)
		}
		mustRelease(t, s, winner)
	}
}

func testNonWaiterRefused(t *testing.T, s Subject) {
	l := mustAcquire(t, s, "job", "owner")
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w", Waiter: "w"})
	mustRelease(t, s, l)
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "impatient"}); res.Acquired {
		t.Fatal("a request without a place in the queue jumped it")
	} else if res.Lease.Holder != "" || !res.RetryAt.IsZero() {
		t.Fatalf("refused for a waiter with %+v; want no lease and no RetryAt", res)
	}
	w := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w", Waiter: "w"})
	if !w.Acquired {
		t.Fatal("the queued waiter was not granted")
	}
	mustRelease(t, s, w.Lease)
	mustAcquire(t, s, "job", "impatient") // the queue is empty again
}

func testDeadWaiterPruned(t *testing.T, s Subject) {
	l := mustAcquire(t, s, "job", "owner")
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "dead", Waiter: "dead", WaiterTTL: shortTTL})
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "alive", Waiter: "alive"})
	mustRelease(t, s, l)
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "alive", Waiter: "alive"}); res.Acquired {
		t.Fatal("the second waiter overtook a live first waiter")
	}
	pass(s, shortTTL+margin)
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "alive", Waiter: "alive"}); !res.Acquired {
		t.Fatal("a dead waiter held the queue up past its ttl")
	}
}

func testWaiterKeepsItsPlace(t *testing.T, s Subject) {
	l := mustAcquire(t, s, "job", "owner")
	// Tries 0.6s apart keep a 1.5s WaiterTTL alive with room for a busy
	// machine's scheduling delays, which ate up a 0.5s TTL's 0.25s margin.
	const waiterTTL, every = 1500 * time.Millisecond, 600 * time.Millisecond
	first := store.AcquireRequest{Name: "job", Holder: "w1", Waiter: "w1", WaiterTTL: waiterTTL}
	acquire(t, s, first)
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w2", Waiter: "w2"})
	for range 5 { // twice w1's WaiterTTL in all
		pass(s, every)
		acquire(t, s, first)
	}
	mustRelease(t, s, l)
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w2", Waiter: "w2"}); res.Acquired {
		t.Fatal("a waiter that kept trying lost its place after its first WaiterTTL")
	}
	if res := acquire(t, s, first); !res.Acquired {
		t.Fatal("the first waiter was not granted")
	}
}

func testWaiterTTLDefault(t *testing.T, s Subject) {
	l := mustAcquire(t, s, "job", "owner")
	// Not through acquire, which fills in a WaiterTTL.
	res, err := s.Acquire(context.Background(), store.AcquireRequest{Name: "job", Holder: "w0", TTL: longTTL, Waiter: "w0"})
	if err != nil || res.Acquired {
		t.Fatalf("Acquire by a waiter without a WaiterTTL = %+v, %v; want refused", res, err)
	}
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w1", Waiter: "w1"})
	pass(s, shortTTL)
	mustRelease(t, s, l)
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w1", Waiter: "w1"}); res.Acquired {
		t.Fatal("a waiter queued without a WaiterTTL lost its place at once")
	}
	if d, err := s.Describe(context.Background(), "job"); err != nil || d.Waiters != 2 {
		t.Fatalf("Describe = %+v, %v; want 2 waiters", d, err)
	}
	if s.Sleep == nil {
		return // waiting out DefaultWaiterTTL needs a fake clock
	}
	pass(s, store.DefaultWaiterTTL-shortTTL+margin)
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w1", Waiter: "w1"}); !res.Acquired {
		t.Fatalf("the first waiter outlived DefaultWaiterTTL without trying again")
	}
}

// waitChange waits for a value on c: an announcement, or a hint to look
// again.
func waitChange(t *testing.T, c *store.Changes, what string) {
	t.Helper()
	nextChange(t, c, what)
}

// nextChange waits for a value on c and returns it.
func nextChange(t *testing.T, c *store.Changes, what string) store.Change {
	t.Helper()
	select {
	case ch, ok := <-c.C:
		if !ok {
			t.Fatalf("%s: the Changes channel closed", what)
		}
		return ch
	case <-time.After(patience):
		t.Fatalf("%s: nothing announced within %s", what, patience)
	}
	return store.Change{}
}

// waitGrant waits for the announcement of the grant of token on c, which
// names it; hints to look again (zero values) may come first.
func waitGrant(t *testing.T, c *store.Changes, token uint64) {
	t.Helper()
	for {
		switch ch := nextChange(t, c, "grant"); ch.Granted {
		case token:
			return
		case 0:
		default:
			t.Fatalf("the grant of token %d was announced as that of %d", token, ch.Granted)
		}
	}
}

// drain empties c of pending values.
func drain(c *store.Changes) {
	for {
		select {
		case <-c.C:
		default:
			return
		}
	}
}

func testDequeue(t *testing.T, s Subject) {
	l := mustAcquire(t, s, "job", "owner")
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "quitter", Waiter: "quitter"})
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "next", Waiter: "next"})
	c := s.Changes("job")
	defer c.Cancel()
	mustRelease(t, s, l)
	waitChange(t, c, "release")
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "next", Waiter: "next"}); res.Acquired {
		t.Fatal("the second waiter overtook the first")
	}
	drain(c)

	if err := s.Dequeue(context.Background(), "job", "quitter"); err != nil {
		t.Fatal(err)
	}
	waitChange(t, c, "dequeue")
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "next", Waiter: "next"}); !res.Acquired {
		t.Fatal("the next waiter was not granted after the first left")
	}
	if err := s.Dequeue(context.Background(), "job", "unknown"); err != nil {
		t.Fatalf("Dequeue of a waiter never queued: %v", err)
	}
}

// testDeadHeadAnnounced: when the head of a queue is dropped because its
// waiter vanished, the next waiter is told that it is first now, instead of
// finding out at its next retry.
func testDeadHeadAnnounced(t *testing.T, s Subject) {
	l := mustAcquire(t, s, "job", "owner")
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "dead", Waiter: "dead", WaiterTTL: shortTTL})
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "alive", Waiter: "alive"})
	c := s.Changes("job")
	defer c.Cancel()
	mustRelease(t, s, l)
	waitChange(t, c, "release")
	pass(s, shortTTL+margin)
	drain(c)

	// Someone else's attempt finds the dead head and drops it.
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "impatient"}); res.Acquired {
		t.Fatal("a request without a place in the queue jumped it")
	}
	waitChange(t, c, "dropped head")
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "alive", Waiter: "alive"}); !res.Acquired {
		t.Fatal("the new head was not granted")
	}
}

func testChanges(t *testing.T, s Subject) {
	ctx := context.Background()
	// A watched name is announced even without waiters.
	if d, err := watchOne(ctx, s, "job"); err != nil || d.Held {
		t.Fatalf("Watch of a new name = %+v, %v", d, err)
	}
	c := s.Changes("job")
	defer c.Cancel()
	other := s.Changes("other")
	defer other.Cancel()

	l := mustAcquire(t, s, "job", "a")
	waitChange(t, c, "grant")
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", Value: []byte("new")})
	waitChange(t, c, "new value")
	mustRelease(t, s, l)
	waitChange(t, c, "release")

	// Values arrived, so the subscription is up (a store that subscribes
	// to Redis may have missed the first grant, hinting instead): a grant's
	// announcement names its token, a release's the token released, and
	// other changes name none.
	l = mustAcquire(t, s, "job", "a")
	waitGrant(t, c, l.Token)
	acquire(t, s, store.AcquireRequest{Name: "job", Holder: "a", Value: []byte("newer")})
	if ch := nextChange(t, c, "new value"); ch.Granted != 0 {
		t.Fatalf("a new value was announced as the grant of token %d", ch.Granted)
	}
	mustRelease(t, s, l)
	if ch := nextChange(t, c, "release"); ch != (store.Change{Released: l.Token}) {
		t.Fatalf("the release of token %d was announced as %+v", l.Token, ch)
	}
	// So is a share's, released beside another.
	var shares []store.Lease
	for _, holder := range []string{"a", "b"} {
		res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: holder, Capacity: 2})
		if !res.Acquired {
			t.Fatalf("%s was refused a share of capacity 2: %+v", holder, res)
		}
		waitGrant(t, c, res.Lease.Token)
		shares = append(shares, res.Lease)
	}
	mustRelease(t, s, shares[0])
	if ch := nextChange(t, c, "a share's release"); ch != (store.Change{Released: shares[0].Token}) {
		t.Fatalf("the release of share %d was announced as %+v", shares[0].Token, ch)
	}
	mustRelease(t, s, shares[1])
	waitChange(t, c, "the last share's release")

	if d, err := watchOne(ctx, s, "job"); err != nil || d.Held {
		t.Fatalf("Watch after release = %+v, %v", d, err)
	}
	c.Cancel()
	c.Cancel() // twice is harmless
	mustAcquire(t, s, "job", "b")
	drain(other) // a hint to look again may reach every subscriber
	select {
	case <-other.C:
		t.Fatal("a change of job was announced to a subscriber of other")
	case <-time.After(20 * time.Millisecond):
	}
}

func testChangesClose(t *testing.T, s Subject) {
	before := s.Changes("job")
	defer before.Cancel()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	after := s.Changes("job")
	defer after.Cancel()
	for what, c := range map[string]*store.Changes{"before Close": before, "after Close": after} {
		deadline := time.After(patience)
		for open := true; open; {
			select {
			case _, open = <-c.C:
			case <-deadline:
				t.Fatalf("a Changes channel made %s stayed open", what)
			}
		}
	}
}

func testList(t *testing.T, s Subject) {
	ctx := context.Background()
	want := []string{"team/a", "team/b", "team/c", "team/d", "team/e"}
	for _, name := range want {
		mustAcquire(t, s, name, "h")
	}
	mustAcquire(t, s, "other/x", "h")
	mustRelease(t, s, mustAcquire(t, s, "team/released", "h"))
	acquire(t, s, store.AcquireRequest{Name: "team/expired", Holder: "h", TTL: shortTTL})
	pass(s, shortTTL+margin)

	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatal("List does not end")
		}
		page, err := s.List(ctx, "team/", cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Leases) > 2 {
			t.Fatalf("page of %d leases, limit 2", len(page.Leases))
		}
		for _, l := range page.Leases {
			if l.Holder != "h" || l.Token == 0 || l.TTL != longTTL {
				t.Fatalf("listed lease %+v", l)
			}
			got = append(got, l.Name)
		}
		if page.Next == "" {
			break
		}
		if len(page.Leases) == 0 || page.Next != page.Leases[len(page.Leases)-1].Name {
			t.Fatalf("page %+v: Next is not the last name", page)
		}
		cursor = page.Next
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
}

func testListDefaultLimit(t *testing.T, s Subject) {
	for i := range store.DefaultListLimit + 1 {
		mustAcquire(t, s, fmt.Sprintf("n%03d", i), "h")
	}
	for _, limit := range []int{0, -1} {
		page, err := s.List(context.Background(), "", "", limit)
		if err != nil || len(page.Leases) != store.DefaultListLimit || page.Next != fmt.Sprintf("n%03d", store.DefaultListLimit-1) {
			t.Fatalf("List with limit %d = %d leases, next %q, %v; want %d and a next page",
				limit, len(page.Leases), page.Next, err, store.DefaultListLimit)
		}
	}
}

func testOpaqueNames(t *testing.T, s Subject) {
	ctx := context.Background()
	for _, name := range []string{"", "}abc", "a{b}c", "{x}", "100%", "%00", "a:b:c", "名前/ジョブ", "a b", "%7B", `glob*?[x]\`} {
		l := mustAcquire(t, s, name, "h")
		d, err := s.Describe(ctx, name)
		if err != nil || !d.Held || d.Lease.Name != name || d.Lease.Token != l.Token {
			t.Errorf("Describe(%q) = %+v, %v", name, d, err)
		}
		page, err := s.List(ctx, name, "", 10)
		if err != nil || len(page.Leases) == 0 || page.Leases[0].Name != name {
			t.Errorf("List(%q) = %+v, %v", name, page, err)
		}
	}
}

// testContention has goroutines fight over a few names with short leases and
// random pauses. Each one that believes it holds a lease acts on a Resource
// that checks fencing tokens, the way a real protected resource should: an
// overlap of unexpired leases or a token that goes backwards fails the test.
func testContention(t *testing.T, s Subject) {
	const (
		workers = 32
		rounds  = 40
		ttl     = 100 * time.Millisecond
	)
	names := []string{"n0", "n1", "n2"}
	resources := map[string]*Resource{}
	for _, n := range names {
		resources[n] = &Resource{}
	}
	var grants atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7)) //nolint:gosec // G404: reproducible pauses for a test, not a secret
			holder := fmt.Sprintf("worker-%d", w)
			for range rounds {
				name := names[rng.IntN(len(names))]
				sent := time.Now()
				res, err := s.Acquire(context.Background(), store.AcquireRequest{Name: name, Holder: holder, TTL: ttl})
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Acquired {
					time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
					continue
				}
				grants.Add(1)
				// The lease is ours until sent+ttl by our own clock, less a margin.
				validUntil := sent.Add(ttl - 20*time.Millisecond)
				r := resources[name]
				if err := r.Enter(holder, res.Lease.Token, validUntil); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				r.Leave(holder)
				if rng.IntN(4) == 0 {
					// Vanish without releasing: the lease must expire.
					continue
				}
				if _, err := s.Release(context.Background(), name, holder, res.Lease.Token); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if grants.Load() < int64(len(names)) {
		t.Fatalf("only %d grants: the test did not contend", grants.Load())
	}
}

func testLockDelay(t *testing.T, s Subject) {
	ctx := context.Background()
	released := mustAcquire(t, s, "released", "a")
	mustRelease(t, s, released)
	mustAcquire(t, s, "released", "b") // a clean release never delays

	expired := acquire(t, s, store.AcquireRequest{Name: "expired", Holder: "a", TTL: shortTTL}).Lease
	pass(s, shortTTL+margin)
	if res := acquire(t, s, store.AcquireRequest{Name: "expired", Holder: "b"}); res.Acquired {
		t.Fatal("granted during the lock delay")
	} else if want := expired.ExpiresAt.Add(lockDelay); !closeTo(res.RetryAt, want) {
		t.Fatalf("refused in the lock delay with RetryAt %v; want the end of the delay, %v", res.RetryAt, want)
	}
	if res := acquire(t, s, store.AcquireRequest{Name: "expired", Holder: "a"}); res.Acquired {
		t.Fatal("the expired holder got its name back during the lock delay")
	}
	if d, err := s.Describe(ctx, "expired"); err != nil || d.Held {
		t.Fatalf("Describe during the lock delay = %+v, %v; want not held", d, err)
	}
	if _, err := s.Renew(ctx, "expired", "a", expired.Token, longTTL); !errors.Is(err, store.ErrLeaseNotHeld) {
		t.Fatalf("Renew during the lock delay: %v; want ErrLeaseNotHeld", err)
	}
	if ok, err := s.Release(ctx, "expired", "a", expired.Token); err != nil || ok {
		t.Fatalf("Release during the lock delay = %v, %v; want false", ok, err)
	}
	pass(s, lockDelay)
	if l := mustAcquire(t, s, "expired", "b"); l.Token <= expired.Token {
		t.Fatalf("token %d after %d", l.Token, expired.Token)
	}
}

// watchOne watches one name for a minute and describes it.
func watchOne(ctx context.Context, s Subject, name string) (store.Description, error) {
	ds, err := s.Watch(ctx, []string{name}, time.Minute)
	if err != nil {
		return store.Description{}, err
	}
	if len(ds) != 1 {
		return store.Description{}, fmt.Errorf("watch of one name returned %d descriptions", len(ds))
	}
	return ds[0], nil
}
