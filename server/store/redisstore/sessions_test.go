package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

const sessionTTL = 500 * time.Millisecond

func mustSession(t testing.TB, s *Store, owner string) store.Session {
	t.Helper()
	sess, err := s.CreateSession(testCtx(t), owner, sessionTTL)
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return sess
}

func inSession(name, holder string, sess store.Session) store.AcquireRequest {
	return store.AcquireRequest{Name: name, Holder: holder, Session: sess.ID, SessionOwner: sess.Owner}
}

// namesOutside returns n names whose slots differ from the session's.
func namesOutside(sess store.Session, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		name := fmt.Sprintf("part/%d", i)
		if slotOf(encodeName(name)) != slotOf(sess.ID) {
			out = append(out, name)
		}
	}
	return out
}

// recordExpires is the expiry (unix ms) in the grant record of holder on
// name, read from Redis.
func recordExpires(t testing.TB, s *Store, name, holder string) int64 {
	t.Helper()
	rec, err := s.client.HGet(testCtx(t), s.keys(name).lease, HolderField(holder)).Result()
	if err != nil {
		t.Fatalf("the record of %s on %q: %v", holder, name, err)
	}
	parts := strings.SplitN(rec, ":", 5)
	ms, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		t.Fatalf("record %q: %v", rec, err)
	}
	return ms
}

// HolderField is a grant record's field (holders.lua).
func HolderField(holder string) string { return "h:" + holder }

// TestSessionsAcrossClusterSlots: the session's key and its leases' names
// lie in other slots; the liveness of the session still decides every
// grant on the names (a renewal reaches them through the proofs a contender
// fetches), and the loss of the session's slot quarantines the names whose
// attached grants need its word, not others.
func TestSessionsAcrossClusterSlots(t *testing.T) {
	t.Parallel()
	client := clusterClient(t)
	const quarantine = 2 * time.Second
	s := newStore(t, client, Options{Quarantine: quarantine, LockDelay: time.Second})
	ctx := testCtx(t)

	sess := mustSession(t, s, "alice")
	names := namesOutside(sess, 3)
	for _, name := range names {
		mustGrant(t, s, inSession(name, "w", sess))
	}
	// Renewed past its first expiry: the names hold their old bounds, and a
	// contender's call brings the session's word from its slot.
	var renewed time.Time
	for range 3 {
		time.Sleep(sessionTTL / 2)
		renewed = time.Now()
		if _, err := s.RenewSession(ctx, sess.ID, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		res := mustRefuse(t, s, waitReq(name, "next", 10*time.Second))
		if res.Lease.Holder != "w" || res.Lease.Session != sess.ID {
			t.Errorf("%s: refused naming %+v; want w of the session", name, res.Lease)
		}
	}
	// The session expires: the lock delay runs from its end, then the
	// waiter is granted, with a larger token.
	expired := time.Now().Add(sessionTTL)
	time.Sleep(time.Until(expired.Add(clockSkew)))
	for _, name := range names {
		mustRefuse(t, s, waitReq(name, "next", 10*time.Second))
	}
	for _, name := range names {
		grantedNotBefore(t, s, waitReq(name, "next", 10*time.Second), renewed.Add(sessionTTL+time.Second-clockSkew))
	}

	// Close: one call releases every name in other slots at once.
	closing := mustSession(t, s, "alice")
	closed := namesOutside(closing, 6)[3:]
	for _, name := range closed {
		mustGrant(t, s, inSession(name, "w", closing))
	}
	if err := s.CloseSession(ctx, closing.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	for _, name := range closed {
		mustGrant(t, s, req(name, "other", time.Minute, ""))
	}

	// The session's slot loses its data: its holder may still believe
	// its session alive, so a grant that needs the session's word is
	// refused until the quarantine ends, while other names go on.
	lostSess := mustSession(t, s, "alice")
	held := namesOutside(lostSess, 8)[7]
	mustGrant(t, s, inSession(held, "w", lostSess))
	if err := client.Del(ctx, s.sessionKeys(lostSess.ID)[2]).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(sessionTTL + clockSkew)
	lostAt := time.Now()
	_, err := s.Acquire(ctx, req(held, "other", time.Minute, ""))
	q := asQuarantine(err)
	if q == nil {
		t.Fatalf("Acquire of a name whose session's slot lost its data: %v; want a QuarantineError", err)
	}
	mustGrant(t, s, req("elsewhere", "other", time.Minute, ""))
	// Quarantine over: the session is unknown to its slot, which the name
	// takes for dead since at least the retention.
	grantedNotBefore(t, s, req(held, "other", time.Minute, ""), lostAt.Add(q.RetryAfter-clockSkew))
}

// TestAnInterruptedCloseEndsTheLeasesAnyway: a coordinator that marked a
// session closed and stopped before releasing its names leaves grants whose
// bounds pass; the next call on a name then finds the session closed and
// lets the name go at once, without a lock delay. The proof of death is
// never stale: the session stays dead.
func TestAnInterruptedCloseEndsTheLeasesAnyway(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{LockDelay: 10 * time.Second})
	ctx := testCtx(t)
	sess := mustSession(t, s, "alice")
	l := mustGrant(t, s, inSession("job", "w", sess))
	reply, err := s.session(ctx, "close", sess.ID, "alice", 0, "")
	if err != nil || reply.err != nil {
		t.Fatalf("close op: %+v, %v", reply, err)
	}
	// Until the bound, the name still trusts its grant.
	mustRefuse(t, s, req("job", "other", time.Minute, ""))
	if got := grantedNotBefore(t, s, req("job", "other", time.Minute, ""), l.ExpiresAt.Add(-clockSkew)); got.Token <= l.Token {
		t.Errorf("token %d after %d", got.Token, l.Token)
	}
	if _, err := s.RenewSession(ctx, sess.ID, "alice"); !errors.Is(err, store.ErrSessionClosed) {
		t.Errorf("RenewSession of the closed session: %v; want ErrSessionClosed", err)
	}
	// A second close carries the releases out (finding nothing left here).
	if err := s.CloseSession(ctx, sess.ID, "alice"); err != nil {
		t.Errorf("a second CloseSession: %v", err)
	}
}

// TestARenewalDueARefreshCarriesTheSessionToItsNames: the names nobody
// contends for keep their bounds until a renewal is due a refresh (every
// half of the key retention); then the session's expiry reaches each, and
// their keys outlive it by the retention.
func TestARenewalDueARefreshCarriesTheSessionToItsNames(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	ctx := testCtx(t)
	sess := mustSession(t, s, "alice")
	names := []string{"a", "b"}
	for _, name := range names {
		mustGrant(t, s, inSession(name, "w", sess))
	}
	before := recordExpires(t, s, "a", "w")
	time.Sleep(100 * time.Millisecond)
	renewed, err := s.RenewSession(ctx, sess.ID, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got := recordExpires(t, s, "a", "w"); got != before {
		t.Fatalf("a renewal not due a refresh rewrote a name's bound: %d -> %d", before, got)
	}
	// Make the refresh due, as half the retention later.
	if err := s.client.HSet(ctx, s.sessionKeys(sess.ID)[0], "refreshed", "0").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if renewed, err = s.RenewSession(ctx, sess.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		got := recordExpires(t, s, name, "w")
		if d := time.UnixMilli(got).Sub(renewed.ExpiresAt); d < -clockSkew || d > clockSkew {
			t.Errorf("%s: bound %v after the refresh; want the session's expiry %v", name, time.UnixMilli(got), renewed.ExpiresAt)
		}
		pttl, err := s.client.PTTL(ctx, s.keys(name).lease).Result()
		if err != nil || pttl < minSessionKeep-time.Minute {
			t.Errorf("%s: the key lives %s more (%v); want at least the session keep %s", name, pttl, err, minSessionKeep)
		}
	}
}

// TestASessionsCloseAndRefreshKeepNoReleasedNameLonger: a name released in
// a session expires one retention after its release, though the session
// keeps it among its names until a refresh prunes it: the session's
// refresh and close settle every one of its names, and a name that holds
// no grant keeps the expiry its release gave it (before, both pushed it
// out by the session keep, an hour: every name a session had locked stayed
// in Redis an hour past its close). A name the session still held at its
// close goes back to one retention too, as its release would take it.
func TestASessionsCloseAndRefreshKeepNoReleasedNameLonger(t *testing.T) {
	t.Parallel()
	const idle = 10 * time.Second
	for _, end := range []struct {
		name string
		run  func(ctx context.Context, s *Store, sess store.Session) error
		// heldEnds: the end releases the held name's grant, so its key
		// goes after the retention as a release's would; else the name
		// still holds it, and its key outlives the bound by the session
		// keep.
		heldEnds bool
	}{
		{"close", func(ctx context.Context, s *Store, sess store.Session) error {
			return s.CloseSession(ctx, sess.ID, sess.Owner)
		}, true},
		{"refresh", func(ctx context.Context, s *Store, sess store.Session) error {
			// Make the refresh due, as half the retention later.
			if err := s.client.HSet(ctx, s.sessionKeys(sess.ID)[0], "refreshed", "0").Err(); err != nil {
				return err
			}
			_, err := s.RenewSession(ctx, sess.ID, sess.Owner)
			return err
		}, false},
	} {
		t.Run(end.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, nil, Options{IdleNameTTL: idle})
			ctx := testCtx(t)
			sess := mustSession(t, s, "alice")
			mustRelease(t, s, mustGrant(t, s, inSession("released", "w", sess)))
			mustGrant(t, s, inSession("held", "w", sess))
			if err := end.run(ctx, s, sess); err != nil {
				t.Fatal(err)
			}
			if pttl := s.client.PTTL(ctx, s.keys("released").lease).Val(); pttl <= 0 || pttl > idle {
				t.Errorf("the released name's key lives %s more; want at most the retention %s", pttl, idle)
			}
			held := s.keys("held").lease
			pttl := s.client.PTTL(ctx, held).Val()
			switch {
			case end.heldEnds && (pttl <= 0 || pttl > idle):
				t.Errorf("the name held at the close lives %s more; want at most the retention %s", pttl, idle)
			case !end.heldEnds && pttl < minSessionKeep-time.Minute:
				t.Errorf("the held name's key lives %s more; want at least the session keep %s", pttl, minSessionKeep)
			}
			if end.heldEnds && s.client.HExists(ctx, held, "ex").Val() {
				t.Error("the name held at the close keeps its recorded expiry 'ex', which its key no longer reaches")
			}
			if left := s.client.Exists(ctx, s.sessionKeys(sess.ID)[1]).Val(); end.heldEnds && left != 0 {
				t.Error("the closed session's names outlive its close, all settled")
			}
			if end.heldEnds {
				// The name is granted again as before.
				mustRelease(t, s, mustGrant(t, s, inSession("held", "w2", mustSession(t, s, "bob"))))
			}
		})
	}
}

// TestASessionRenewalCostsTheSameForAnyNumberOfLeases: renewing a session
// costs Redis the same few commands with 1, 100 or 1,000 leases attached,
// where renewing each lease costs a script a lease.
func TestASessionRenewalCostsTheSameForAnyNumberOfLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, stats := storeOnOwnRedis(t, Options{})

	var costs []int
	for _, n := range []int{1, 100, 1000} {
		sess, err := s.CreateSession(ctx, "alice", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			mustGrant(t, s, inSession(fmt.Sprintf("%d/%d", n, i), "w", sess))
		}
		stats.reset(t)
		if _, err := s.RenewSession(ctx, sess.ID, "alice"); err != nil {
			t.Fatal(err)
		}
		byName, total := stats.since(t)
		t.Logf("a renewal of a session of %d leases: %d commands %v", n, total, byName)
		costs = append(costs, total)
	}
	for i, c := range costs {
		if c != costs[0] || c > 8 {
			t.Fatalf("renewal costs %v commands for 1, 100, 1000 leases; want one small constant (%d differs)", costs, i)
		}
	}
}

// TestSessionConformanceOnACluster runs the sessions' conformance suite on
// a Redis Cluster, where a session's slot is never known to hold its names.
func TestSessionConformanceOnACluster(t *testing.T) {
	t.Parallel()
	client := clusterClient(t)
	storetest.RunSessions(t, func(t *testing.T, opts storetest.Options) storetest.Subject {
		s := newStore(t, client, Options{LockDelay: opts.LockDelay, IdleNameTTL: opts.IdleNameTTL})
		return storetest.Subject{Store: s, Remembers: func(name string) bool { return remembers(t, s, name) }}
	})
}

// TestARefreshForgetsOnlyNamesThatCannotHoldTheSessionsGrants: a release
// leaves its name among the session's names (removing it could race
// another attach of the name and forget a held one); a refresh forgets a
// name only when it holds none of the session's grants, and detaches it
// first, so that a grant attached before cannot land there.
func TestARefreshForgetsOnlyNamesThatCannotHoldTheSessionsGrants(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	s.detacher.delay = time.Hour // the refresh alone
	ctx := testCtx(t)
	sess, err := s.CreateSession(ctx, "alice", time.Minute) // outlives the test on a loaded machine
	if err != nil {
		t.Fatal(err)
	}
	namesKey := s.sessionKeys(sess.ID)[1]
	leases := map[string]store.Lease{}
	for _, name := range []string{"held", "released-long-ago", "released-just-now", "shared"} {
		leases[name] = mustGrant(t, s, inSession(name, "w", sess))
	}
	// Two shares of "shared" in the session: releasing one must not make
	// the name forgettable while the other holds it.
	share := inSession("shared-pool", "w1", sess)
	share.Capacity = 2
	mustGrant(t, s, share)
	other := share
	other.Holder = "w2"
	second := mustGrant(t, s, other)
	for _, name := range []string{"released-long-ago", "released-just-now", "shared"} {
		if ok, err := s.Release(ctx, name, "w", leases[name].Token); err != nil || !ok {
			t.Fatalf("Release(%s) = %v, %v", name, ok, err)
		}
	}
	if ok, err := s.Release(ctx, "shared-pool", "w2", second.Token); err != nil || !ok {
		t.Fatalf("Release of one share = %v, %v", ok, err)
	}
	d, err := s.DescribeSession(ctx, sess.ID, "alice")
	if err != nil || !slices.Equal(d.Names, []string{"held", "shared-pool"}) {
		t.Fatalf("DescribeSession = %v, %v; want the names still held: held, shared-pool", d.Names, err)
	}
	if n, err := s.client.HLen(ctx, namesKey).Result(); err != nil || n != 5 {
		t.Fatalf("the session's names hold %d (%v); want all 5 kept by the releases", n, err)
	}

	// "held" and "shared-pool" hold grants; the others may go, even one
	// released just now, which the refresh detaches first.
	if err := s.client.HSet(ctx, s.sessionKeys(sess.ID)[0], "refreshed", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RenewSession(ctx, sess.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	kept, err := s.client.HKeys(ctx, namesKey).Result()
	slices.Sort(kept)
	if want := []string{"held", "shared-pool"}; err != nil || !slices.Equal(kept, want) {
		t.Fatalf("after the refresh the session's names are %v (%v); want %v", kept, err, want)
	}

	// A pruned name attached again (this store's cached attach is refused:
	// it attaches again) is known again, and a close ends it.
	again := mustGrant(t, s, inSession("shared", "w", sess))
	if at, err := s.client.HGet(ctx, namesKey, "shared").Result(); err != nil || at == "" {
		t.Fatalf("the session's names after shared was granted again: %q, %v; want it back", at, err)
	}
	if err := s.CloseSession(ctx, sess.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Acquire(ctx, store.AcquireRequest{Name: "shared", Holder: "next", TTL: time.Minute}); err != nil || !res.Acquired || res.Lease.Token <= again.Token {
		t.Fatalf("after the close, shared = %+v, %v; want granted with a larger token than %d", res, err, again.Token)
	}
}

// TestAGrantsRecordCarriesItsAttachment: a grant record names the session
// it is attached to ("" for a grant of its own TTL), and the summary's
// fifth part (slow) is present while a grant may be attached, at most its
// bound; a renewal as a lease of its own detaches the grant, and the last
// release takes the summary, slow with it.
func TestAGrantsRecordCarriesItsAttachment(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	sess := mustSession(t, s, "alice")
	own := store.AcquireRequest{Holder: "w", TTL: time.Minute}
	for _, tc := range []struct {
		name        string
		steps       []store.AcquireRequest // by holder w, in order
		release     bool
		wantSession string // "-" for no record
		wantSlow    bool
	}{
		{name: "a grant of its own names no session", steps: []store.AcquireRequest{own}, wantSession: ""},
		{name: "an attached grant names its session, the summary its bound", steps: []store.AcquireRequest{inSession("", "w", sess)},
			wantSession: sess.ID, wantSlow: true},
		{name: "renewed as a lease of its own, a grant names no session", steps: []store.AcquireRequest{inSession("", "w", sess), own},
			wantSession: "", wantSlow: true},
		{name: "renewed attached, a grant of its own names the session", steps: []store.AcquireRequest{own, inSession("", "w", sess)},
			wantSession: sess.ID, wantSlow: true},
		{name: "released, an attached grant leaves no record and no summary", steps: []store.AcquireRequest{inSession("", "w", sess)},
			release: true, wantSession: "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "record/" + tc.name
			var l store.Lease
			for _, req := range tc.steps {
				req.Name = name
				l = mustGrant(t, s, req)
			}
			if tc.release {
				mustRelease(t, s, l)
			}
			lease := s.keys(name).lease
			v, err := s.client.HMGet(testCtx(t), lease, HolderField("w"), "sum").Result()
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantSession == "-" {
				if v[0] != nil || v[1] != nil {
					t.Fatalf("record %v, summary %v; want neither", v[0], v[1])
				}
				return
			}
			rec, _ := v[0].(string)
			if got := recordSession(rec); got != tc.wantSession {
				t.Errorf("record %q names session %q, want %q", rec, got, tc.wantSession)
			}
			d, err := s.Describe(testCtx(t), name)
			if err != nil || len(d.Holders) != 1 || d.Holders[0].Session != tc.wantSession {
				t.Errorf("Describe: %+v, %v; want w's grant in session %q", d.Holders, err, tc.wantSession)
			}
			sum, _ := v[1].(string)
			parts := strings.Split(sum, ":")
			if hasSlow := len(parts) == 5; hasSlow != tc.wantSlow {
				t.Fatalf("summary %q: slow %v, want %v", sum, hasSlow, tc.wantSlow)
			}
			if tc.wantSlow {
				if slow, _ := strconv.ParseInt(parts[4], 10, 64); slow > recordExpires(t, s, name, "w") && tc.wantSession != "" {
					t.Errorf("summary %q: slow after the bound %d", sum, recordExpires(t, s, name, "w"))
				}
			}
		})
	}
}

// TestAnAttachedAcquireProvesItsOwnSession: an attached acquire sends no
// proof of its own session (acquire.lua makes it from what the proof
// left), yet settles the session's grants whose bounds passed with it,
// without asking for a proof.
func TestAnAttachedAcquireProvesItsOwnSession(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	ctx := testCtx(t)
	sess, err := s.CreateSession(ctx, "alice", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	const name = "semaphore"
	first := inSession(name, "a", sess)
	first.Capacity = 2
	mustGrant(t, s, first)
	bound := recordExpires(t, s, name, "a")
	// The session lives on; a's bound, its expiry as the name learned it,
	// passes.
	for time.Now().Before(time.UnixMilli(bound).Add(100 * time.Millisecond)) {
		if _, err := s.RenewSession(ctx, sess.ID, sess.Owner); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	second := inSession(name, "b", sess)
	second.Capacity = 2
	proofs := proofSet{}
	if err := s.proveOwn(ctx, proofs, second); err != nil {
		t.Fatal(err)
	}
	args := s.acquireArgs(second, 2, 1)
	args.session, args.sessionTTL, args.attachedAt = sess.ID, proofs[sess.ID].ttl.Milliseconds(), proofs[sess.ID].attachedAt
	args.ttlMS, _ = proofs.left(sess.ID, time.Now())
	args.proofs, _ = proofs.text(time.Now(), sess.ID)
	if args.proofs != "" || len(args.argv()) != 10 {
		t.Fatalf("argv %v: want 10 arguments, no proofs", args.argv())
	}
	k := s.keys(name)
	v, err := s.scripts.acquire.Run(ctx, s.client, []string{k.lease, k.queue, k.waiters, k.marker}, args.argv()...).Result()
	if err != nil {
		t.Fatal(err)
	}
	reply, err := decodeAcquire(args.asked(second), v)
	if err != nil || len(reply.need) > 0 || !reply.result.Acquired {
		t.Fatalf("acquire: %+v, %v; want a grant, no proofs asked", reply, err)
	}
	if got := recordExpires(t, s, name, "a"); got <= bound {
		t.Errorf("a's bound %d, was %d: not pushed out by the session's own proof", got, bound)
	}
}
