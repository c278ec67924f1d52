package memstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/coordinator-dev/coordinator/internal/statefile"
	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
)

const (
	ttl       = 10 * time.Second
	lockDelay = 2 * time.Second
)

func open(t *testing.T, dir string, clock clockwork.Clock) *memstore.Store {
	t.Helper()
	s, err := memstore.Open(dir, memstore.WithClock(clock), memstore.WithLockDelay(lockDelay))
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

func closeStore(t *testing.T, s *memstore.Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func grant(t *testing.T, s *memstore.Store, name, holder string) store.Lease {
	t.Helper()
	res, err := s.Acquire(t.Context(), store.AcquireRequest{Name: name, Holder: holder, TTL: ttl})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire(%s, %s) = %+v, %v; want granted", name, holder, res, err)
	}
	return res.Lease
}

// quarantine returns how long s refuses grants, 0 when it grants.
func quarantine(t *testing.T, s *memstore.Store, name string) time.Duration {
	t.Helper()
	_, err := s.Acquire(t.Context(), store.AcquireRequest{Name: name, Holder: "probe", TTL: time.Millisecond})
	var q *store.QuarantineError
	if errors.As(err, &q) {
		return q.RetryAfter
	}
	if err != nil {
		t.Fatalf("Acquire(%s): %v", name, err)
	}
	return 0
}

// tokenFloor is Describe's last token of name.
func tokenFloor(t *testing.T, s *memstore.Store, name string) uint64 {
	t.Helper()
	d, err := s.Describe(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return d.LastToken
}

// After a kill -9, the store grants nothing until every lease it granted
// (and its lock delay) has ended, and its tokens and Describe floors stay
// above every token issued before, even when the wall clock stepped back.
func TestRestartAfterCrashWaitsForLeasesAndKeepsTokens(t *testing.T) {
	for _, tc := range []struct {
		name string
		// down is how far the wall clock moved while the store was down.
		down time.Duration
		// wantWait is the least the reopened store must refuse grants
		// for; it may refuse for up to EndLead more.
		wantWait time.Duration
	}{
		{"RestartedAtOnce", 0, ttl + lockDelay},
		{"RestartedAfterAWhile", 5 * time.Second, ttl + lockDelay - 5*time.Second},
		{"ClockSteppedBackAnHour", -time.Hour, time.Hour + ttl + lockDelay},
		{"DownLongerThanEveryLease", ttl + lockDelay + memstore.EndLead, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := clockwork.NewFakeClockAt(time.Now())
			before := open(t, dir, clock)
			var highest uint64
			for _, name := range []string{"a", "b", "c"} {
				highest = max(highest, grant(t, before, name, "old").Token)
			}
			memstore.Crash(before)

			clock = clockwork.NewFakeClockAt(clock.Now().Add(tc.down))
			after := open(t, dir, clock)
			defer closeStore(t, after)
			wait := quarantine(t, after, "probe")
			if wait < tc.wantWait || wait > tc.wantWait+memstore.EndLead+time.Millisecond {
				t.Fatalf("grants refused for %s; want %s to %s more", wait, tc.wantWait, memstore.EndLead)
			}
			for _, name := range []string{"a", "b", "c", "never-granted"} {
				if floor := tokenFloor(t, after, name); floor < highest {
					t.Errorf("Describe(%s).LastToken = %d after the restart; below the earlier token %d", name, floor, highest)
				}
			}
			if wait > 0 {
				clock.Advance(wait - time.Millisecond)
				if quarantine(t, after, "probe") == 0 {
					t.Fatal("granted before the quarantine ended")
				}
				clock.Advance(time.Millisecond)
			}
			if l := grant(t, after, "a", "new"); l.Token <= highest {
				t.Errorf("token after the restart = %d; want above the earlier %d", l.Token, highest)
			}
		})
	}
}

// A store that was closed waits after a restart only for the leases still
// held at Close, exactly; one that never ran waits for nothing.
func TestRestartAfterCloseWaitsOnlyForTheNamesHeld(t *testing.T) {
	for _, tc := range []struct {
		name     string
		run      func(t *testing.T, s *memstore.Store, clock *clockwork.FakeClock)
		wantWait time.Duration
	}{
		{"FirstStart", func(*testing.T, *memstore.Store, *clockwork.FakeClock) {}, 0},
		{"EveryLeaseReleased", func(t *testing.T, s *memstore.Store, _ *clockwork.FakeClock) {
			l := grant(t, s, "a", "old")
			if ok, err := s.Release(t.Context(), "a", "old", l.Token); !ok || err != nil {
				t.Fatalf("Release = %v, %v", ok, err)
			}
		}, 0},
		{"ALeaseHeld", func(t *testing.T, s *memstore.Store, clock *clockwork.FakeClock) {
			grant(t, s, "a", "old")
			clock.Advance(3 * time.Second)
		}, ttl + lockDelay - 3*time.Second},
		{"ALeaseInItsLockDelay", func(t *testing.T, s *memstore.Store, clock *clockwork.FakeClock) {
			grant(t, s, "a", "old")
			clock.Advance(ttl + time.Second)
		}, lockDelay - time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := clockwork.NewFakeClockAt(time.Now())
			before := open(t, dir, clock)
			tc.run(t, before, clock)
			highest := tokenFloor(t, before, "a")
			if err := before.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if _, err := before.Acquire(t.Context(), store.AcquireRequest{Name: "late", Holder: "h", TTL: time.Hour}); !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("a grant past the written bounds after Close: %v; want ErrUnavailable", err)
			}

			after := open(t, dir, clock)
			defer closeStore(t, after)
			// Every other name is granted at once ...
			if wait := quarantine(t, after, "b"); wait != 0 {
				t.Fatalf("after a clean stop, grants of other names refused for %s; want none", wait)
			}
			// ... and a name still held at Close waits until its lease would
			// have ended (written in whole milliseconds, rounded up).
			if tc.wantWait > 0 {
				res, err := after.Acquire(t.Context(), store.AcquireRequest{Name: "a", Holder: "new", TTL: ttl})
				if err != nil || res.Acquired {
					t.Fatalf("Acquire of the name held at Close = %+v, %v; want refused", res, err)
				}
				if wait := res.RetryAt.Sub(clock.Now()); wait < tc.wantWait || wait > tc.wantWait+2*time.Millisecond {
					t.Fatalf("the name held at Close waits %s; want %s", wait, tc.wantWait)
				}
			}
			clock.Advance(tc.wantWait + 2*time.Millisecond)
			if l := grant(t, after, "a", "new"); l.Token <= highest {
				t.Errorf("token after the restart = %d; want above the earlier %d", l.Token, highest)
			}
		})
	}
}

// Within one run, a wall clock that steps back lowers no token, not even
// that of a name forgotten meanwhile.
func TestClockSteppedBackLowersNoToken(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Now())
	s, err := memstore.Open(t.TempDir(), memstore.WithClock(clock), memstore.WithIdleNameTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	first := grant(t, s, "a", "h")
	clock.Advance(-time.Hour) // a fake clock moves back as asked
	if floor := tokenFloor(t, s, "forgotten"); floor < first.Token {
		t.Errorf("Describe of an unknown name = %d; below the token %d issued before", floor, first.Token)
	}
	if l := grant(t, s, "b", "h"); l.Token <= first.Token {
		t.Errorf("token after the step back = %d; want above %d", l.Token, first.Token)
	}
}

func TestASecondOpenOfOneStateDirFails(t *testing.T) {
	dir := t.TempDir()
	first := open(t, dir, clockwork.NewRealClock())
	if second, err := memstore.Open(dir); !errors.Is(err, statefile.ErrLocked) {
		if second != nil {
			_ = second.Close()
		}
		t.Fatalf("second Open: %v; want statefile.ErrLocked", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	closeStore(t, open(t, dir, clockwork.NewRealClock()))
}

// However many grants and renewals run, the bounds are written about once
// an interval; an idle store writes nothing.
func TestSustainedGrantsWriteAboutOncePerSecond(t *testing.T) {
	ctx := t.Context()
	clock := clockwork.NewFakeClockAt(time.Now())
	s := open(t, t.TempDir(), clock)
	defer closeStore(t, s)
	const seconds, grantsPerSecond = 20, 500
	grants := 0
	for range seconds * grantsPerSecond {
		l := grant(t, s, "job", "h")
		if _, err := s.Renew(ctx, "job", "h", l.Token, ttl); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Release(ctx, "job", "h", l.Token); !ok || err != nil {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		grants++
		clock.Advance(time.Second / grantsPerSecond)
	}
	// A write the ticker started may lag the fake clock, which runs far
	// faster than real time, so a grant may ask for one more: still at most
	// two an interval, not one a grant.
	if syncs := s.Syncs(); syncs < seconds/2 || syncs > 2*seconds+1 {
		t.Errorf("%d grants over %d s wrote the state %d times; want about once a second", grants, seconds, syncs)
	}
	clock.Advance(time.Second) // the last grants' write
	memstore.WaitWritten(s)
	idle := s.Syncs()
	for range 60 {
		clock.Advance(time.Second)
	}
	time.Sleep(10 * time.Millisecond) // let a wrongly woken writer run
	if got := s.Syncs(); got != idle {
		t.Errorf("an idle minute wrote the state %d times", got-idle)
	}
}

// A session's renewals raise the lease bound as grants do: after a kill -9
// the reopened store refuses grants until the session, renewed past its
// first expiry, and its leases' lock delay have ended, and after a clean
// Close the names its leases held wait as long. The sessions themselves are
// gone: their ids are refused as unknown.
func TestSessionsOutliveNoRestartAndTheirLeasesAreWaitedFor(t *testing.T) {
	for _, crash := range []bool{true, false} {
		t.Run(map[bool]string{true: "Crash", false: "Close"}[crash], func(t *testing.T) {
			dir := t.TempDir()
			clock := clockwork.NewFakeClockAt(time.Now())
			s := open(t, dir, clock)
			sess, err := s.CreateSession(t.Context(), "alice", ttl)
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Acquire(t.Context(), store.AcquireRequest{Name: "job", Holder: "w", Session: sess.ID, SessionOwner: "alice"})
			if err != nil || !res.Acquired {
				t.Fatalf("attach = %+v, %v", res, err)
			}
			clock.Advance(ttl / 2)
			if sess, err = s.RenewSession(t.Context(), sess.ID, "alice"); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Second) // the renewal's write
			memstore.WaitWritten(s)
			if crash {
				memstore.Crash(s)
			} else {
				closeStore(t, s)
			}
			again := open(t, dir, clock)
			defer closeStore(t, again)
			// The session as renewed, less the second the write took.
			end := sess.ExpiresAt.Add(lockDelay)
			if crash {
				if got, left := quarantine(t, again, "job"), end.Sub(clock.Now()); got < left {
					t.Fatalf("grants resume after %s; want at least %s, the attached lease's end", got, left)
				}
			} else {
				res, err := again.Acquire(t.Context(), store.AcquireRequest{Name: "job", Holder: "x", TTL: ttl})
				if err != nil || res.Acquired || res.RetryAt.Before(end.Add(-time.Millisecond)) {
					t.Fatalf("Acquire after a clean restart = %+v, %v; want refused until %v", res, err, end)
				}
			}
			if _, err := again.RenewSession(t.Context(), sess.ID, "alice"); !errors.Is(err, store.ErrSessionNotFound) {
				t.Fatalf("RenewSession after the restart: %v; want ErrSessionNotFound", err)
			}
		})
	}
}
