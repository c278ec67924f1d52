package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// The group behaviours: one acquisition of several names (store.GroupRequest),
// granted whole or not at all, each member a lease of its own with its
// name's token.
//
// A store that takes a group in one state change (memory, one Redis) is held
// to all of it: a refused group changes nothing but the queues, where a
// waiting group stands on every member. A store that takes some groups in
// several (Subject.SplitsGroup: a Redis Cluster, members in several slots)
// is held to what a caller sees: never a grant of part of the group, the
// parts it holds while it waits reported in GroupResult.Held (and only
// those), the member in the way queued for, and every other rule.

// RunGroups runs the conformance tests of group acquisitions
// (store.Leases.AcquireGroup and ReleaseGroup) against stores made by
// newStore.
func RunGroups(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, Subject)
		opts Options
	}{
		{"AGroupIsGrantedWholeWithATokenAbovePerName", testGroupGrantedWhole, Options{}},
		{"AMemberInTheWayRefusesTheWholeGroup", testGroupRefusedWhole, Options{}},
		{"AskingAgainRenewsTheGroupKeepingItsTokens", testGroupRenewal, Options{}},
		{"AWaitingGroupIsQueuedOnItsMembersAndNotStarved", testGroupWaitsOnEveryMember, Options{}},
		{"OnlyRequestsThatDoNotFitBesideAWaitingGroupWaitForIt", testGroupDelaysOnlyWhatDoesNotFit, Options{}},
		{"AGroupTakesItsTurnInArrivalOrderWithSingleRequests", testGroupFIFO, Options{}},
		{"AGroupIsRefusedWithAnErrorNamingTheMember", testGroupErrorsNameTheMember, Options{}},
		{"AGroupWithoutMembersTooManyOrANameTwiceIsRefused", testGroupCheck, Options{}},
		{"AGroupTakesSharesReadLocksAndLocksTogether", testGroupMixedShares, Options{}},
		{"ReleaseGroupReportsEachLease", testReleaseGroup, Options{}},
		{"AGroupInASessionEndsWhenTheSessionExpires", testGroupSessionExpiry, Options{LockDelay: lockDelay}},
		{"AGroupInASessionEndsWhenTheSessionCloses", testGroupSessionClose, Options{}},
		{"AGroupWithItsOwnTTLExpiresWhole", testGroupExpiry, Options{LockDelay: lockDelay}},
		{"AGroupThatStopsWaitingLeavesTheQueues", testGroupStopsWaiting, Options{}},
		{"AGroupWhosePlaceLapsedOnSomeMembersQueuesAgainBehindAll", testGroupRequeuedBehindAll, Options{}},
		{"ContendedGroupsNeverOverlapNorDeadlock", testGroupContention, Options{RealTime: true}},
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

// splits reports whether s may take a group of names in several state
// changes.
func splits(s Subject, names ...string) bool {
	return s.SplitsGroup != nil && s.SplitsGroup(names)
}

// locks is a member of each name, an exclusive lock.
func locks(names ...string) []store.GroupMember {
	members := make([]store.GroupMember, len(names))
	for i, n := range names {
		members[i] = store.GroupMember{Name: n}
	}
	return members
}

func memberNames(members []store.GroupMember) []string {
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.Name
	}
	return names
}

// tryGroup asks for req, with a long TTL and WaiterTTL when it sets none,
// and checks the result's shape.
func tryGroup(t *testing.T, s Subject, req store.GroupRequest) store.GroupResult {
	t.Helper()
	if req.TTL == 0 && req.Session == "" {
		req.TTL = longTTL
	}
	if req.Waiter != "" && req.WaiterTTL == 0 {
		req.WaiterTTL = longTTL
	}
	res, err := s.AcquireGroup(context.Background(), req)
	if err != nil {
		t.Fatalf("AcquireGroup of %v by %s: %v", memberNames(req.Members), req.Holder, err)
	}
	if err := checkGroupResult(req, res); err != nil {
		t.Fatal(err)
	}
	return res
}

// mustGroup is tryGroup that must be granted; it returns the leases.
func mustGroup(t *testing.T, s Subject, req store.GroupRequest) []store.Lease {
	t.Helper()
	res := tryGroup(t, s, req)
	if !res.Acquired {
		t.Fatalf("%s was refused %v: %s", req.Holder, memberNames(req.Members), refusal(req, res))
	}
	return res.Leases
}

// mustRefuseGroup is tryGroup that must be refused.
func mustRefuseGroup(t *testing.T, s Subject, req store.GroupRequest) store.GroupResult {
	t.Helper()
	res := tryGroup(t, s, req)
	if res.Acquired {
		t.Fatalf("%s was granted %v: %+v", req.Holder, memberNames(req.Members), res.Leases)
	}
	return res
}

// checkGroupResult checks what every answer to req must be: when granted,
// one lease of the holder per member in the request's order; when refused,
// an answer per member, one at least in the way, and held parts only of
// members that were not in the way.
func checkGroupResult(req store.GroupRequest, res store.GroupResult) error {
	if res.Acquired {
		if len(res.Leases) != len(req.Members) || len(res.Members) != 0 || len(res.Held) != 0 {
			return fmt.Errorf("group %v granted with %d leases, %d member answers and %d held parts; want %d, 0 and 0",
				memberNames(req.Members), len(res.Leases), len(res.Members), len(res.Held), len(req.Members))
		}
		for i, l := range res.Leases {
			if l.Name != req.Members[i].Name || l.Holder != req.Holder || l.Token == 0 || l.Weight < 1 || l.Session != req.Session {
				return fmt.Errorf("group %v: lease %d is %+v; want %q of %s in session %q", memberNames(req.Members), i, l, req.Members[i].Name, req.Holder, req.Session)
			}
		}
		return nil
	}
	if len(res.Leases) != 0 || len(res.Members) != len(req.Members) {
		return fmt.Errorf("group %v refused with %d leases and %d member answers; want 0 and %d",
			memberNames(req.Members), len(res.Leases), len(res.Members), len(req.Members))
	}
	if !slices.ContainsFunc(res.Members, func(m store.AcquireResult) bool { return !m.Acquired }) {
		return fmt.Errorf("group %v refused with no member in the way: %+v", memberNames(req.Members), res.Members)
	}
	for _, l := range res.Held {
		i := slices.IndexFunc(req.Members, func(m store.GroupMember) bool { return m.Name == l.Name })
		if i < 0 || l.Holder != req.Holder || l.Token == 0 || !res.Members[i].Acquired {
			return fmt.Errorf("group %v refused holding %+v: want only members not in the way, held by %s", memberNames(req.Members), l, req.Holder)
		}
	}
	return nil
}

// refusal says which members of a refused group were in the way.
func refusal(req store.GroupRequest, res store.GroupResult) string {
	var parts []string
	for i, m := range res.Members {
		if !m.Acquired {
			parts = append(parts, fmt.Sprintf("%s held by %q until %v", req.Members[i].Name, m.Lease.Holder, m.RetryAt))
		}
	}
	return strings.Join(parts, "; ")
}

// heldPart is the lease a refused group holds on name, if any.
func heldPart(res store.GroupResult, name string) (store.Lease, bool) {
	i := slices.IndexFunc(res.Held, func(l store.Lease) bool { return l.Name == name })
	if i < 0 {
		return store.Lease{}, false
	}
	return res.Held[i], true
}

// releaseHeld gives up the parts a refused group holds, as a caller that
// stops waiting does.
func releaseHeld(t *testing.T, s Subject, holder string, res store.GroupResult) {
	t.Helper()
	if len(res.Held) == 0 {
		return
	}
	released, err := s.ReleaseGroup(context.Background(), holder, groupLeases(res.Held))
	if err != nil || len(released) != len(res.Held) || slices.Contains(released, false) {
		t.Fatalf("ReleaseGroup of the held parts %+v = %v, %v; want each released", res.Held, released, err)
	}
}

func groupLeases(leases []store.Lease) []store.GroupLease {
	out := make([]store.GroupLease, len(leases))
	for i, l := range leases {
		out[i] = store.GroupLease{Name: l.Name, Token: l.Token}
	}
	return out
}

func describe(t *testing.T, s Subject, name string) store.Description {
	t.Helper()
	d, err := s.Describe(context.Background(), name)
	if err != nil {
		t.Fatalf("Describe(%s): %v", name, err)
	}
	return d
}

// checkHeldOnlyAsReported checks, after a refusal of req, that its holder
// holds exactly the parts res.Held reports: a member is held by it when,
// and only when, res.Held names it.
func checkHeldOnlyAsReported(t *testing.T, s Subject, req store.GroupRequest, res store.GroupResult) {
	t.Helper()
	for _, m := range req.Members {
		part, reported := heldPart(res, m.Name)
		d := describe(t, s, m.Name)
		i := slices.IndexFunc(d.Holders, func(l store.Lease) bool { return l.Holder == req.Holder })
		switch {
		case reported && (i < 0 || d.Holders[i].Token != part.Token):
			t.Fatalf("%s: the refused group reports holding %+v, but Describe shows %v", m.Name, part, holders(d))
		case !reported && i >= 0:
			t.Fatalf("%s: a refused group holds part of itself unreported: %v", m.Name, holders(d))
		}
	}
}

// pretouch gives each name a token counter (a grant, released), so that a
// name's LastToken is the last token issued, and returns them.
func pretouch(t *testing.T, s Subject, names ...string) map[string]uint64 {
	t.Helper()
	last := map[string]uint64{}
	for _, n := range names {
		l := mustAcquire(t, s, n, "before")
		mustRelease(t, s, l)
		last[n] = l.Token
	}
	return last
}

func testGroupGrantedWhole(t *testing.T, s Subject) {
	ctx := context.Background()
	before := pretouch(t, s, "a", "c")
	before["b"] = describe(t, s, "b").LastToken // never used: the floor
	sent := time.Now()
	req := store.GroupRequest{Members: locks("c", "a", "b"), Holder: "g", TTL: longTTL}
	leases := mustGroup(t, s, req)
	for _, l := range leases {
		if l.Token <= before[l.Name] {
			t.Fatalf("%s: group token %d, not above the name's last token %d", l.Name, l.Token, before[l.Name])
		}
		if l.TTL != longTTL || l.Weight != 1 {
			t.Fatalf("%s: lease %+v; want ttl %s, weight 1", l.Name, l, longTTL)
		}
		if d := l.ExpiresAt.Sub(sent.Add(longTTL)); d < -2*time.Second || d > 2*time.Second {
			t.Fatalf("%s: expires_at %v is %v away from now+ttl", l.Name, l.ExpiresAt, d)
		}
		d := describe(t, s, l.Name)
		if !d.Held || len(d.Holders) != 1 || d.Lease.Holder != "g" || d.Lease.Token != l.Token || d.LastToken != l.Token {
			t.Fatalf("Describe(%s) after the group's grant = %+v; want g alone with token %d, the last", l.Name, d, l.Token)
		}
		if res := acquire(t, s, store.AcquireRequest{Name: l.Name, Holder: "other"}); res.Acquired || res.Lease.Holder != "g" || res.Lease.Token != l.Token {
			t.Fatalf("%s: another holder's request = %+v; want refused naming g and token %d", l.Name, res, l.Token)
		}
	}
	page, err := s.List(ctx, "", "", 0)
	if err != nil || len(page.Leases) != 3 {
		t.Fatalf("List = %+v, %v; want the group's 3 leases", page, err)
	}
	// Each name's counter goes on from the group's token.
	released, err := s.ReleaseGroup(ctx, "g", groupLeases(leases))
	if err != nil || !slices.Equal(released, []bool{true, true, true}) {
		t.Fatalf("ReleaseGroup = %v, %v; want each released", released, err)
	}
	for _, l := range leases {
		if next := mustAcquire(t, s, l.Name, "next"); next.Token <= l.Token {
			t.Fatalf("%s: token %d after the group's %d", l.Name, next.Token, l.Token)
		}
	}
}

// testGroupRefusedWhole: whichever member is in the way, and however, the
// group gets none of the others, and a try that does not wait changes
// nothing: no grant, no token, no place in a queue.
func testGroupRefusedWhole(t *testing.T, s Subject) {
	type blocker struct {
		kind string
		// block stands in the way of name, a member of capacity, and
		// returns the holder the refusal must name ("" when none).
		block    func(t *testing.T, name string) string
		capacity int64
	}
	blockers := []blocker{
		{"held", func(t *testing.T, name string) string { mustAcquire(t, s, name, "x"); return "x" }, 1},
		{"a full semaphore", func(t *testing.T, name string) string { mustShare(t, s, name, "x", 2, 2); return "x" }, 2},
		{"a waiter queued", func(t *testing.T, name string) string {
			l := mustAcquire(t, s, name, "x")
			acquire(t, s, store.AcquireRequest{Name: name, Holder: "w", Waiter: "w"})
			mustRelease(t, s, l)
			return ""
		}, 1},
	}
	for _, b := range blockers {
		for in := range 3 {
			t.Run(fmt.Sprintf("%s/member%d", strings.ReplaceAll(b.kind, " ", "-"), in), func(t *testing.T) {
				names := make([]string, 3)
				for i := range names {
					names[i] = fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(b.kind, " ", "-"), in, i)
				}
				last := pretouch(t, s, names...)
				wantHolder := b.block(t, names[in])
				blocked := describe(t, s, names[in])
				req := store.GroupRequest{Members: locks(names...), Holder: "g"}
				req.Members[in].Capacity = b.capacity
				res := mustRefuseGroup(t, s, req)
				for i, m := range res.Members {
					if i != in && !m.Acquired {
						t.Fatalf("member %d (%s), free, was reported in the way: %+v", i, names[i], m)
					}
				}
				if m := res.Members[in]; m.Acquired || m.Lease.Holder != wantHolder || (wantHolder != "") == m.RetryAt.IsZero() {
					t.Fatalf("member %d (%s), in the way, reported as %+v; want holder %q and a retry time only with a holder", in, names[in], m, wantHolder)
				}
				checkHeldOnlyAsReported(t, s, req, res)
				releaseHeld(t, s, "g", res)
				// A store that takes members in steps may have taken one
				// and given it back: a token spent, never a grant seen.
				oneStep := !splits(s, names...)
				for i, n := range names {
					d := describe(t, s, n)
					if i == in {
						if fmt.Sprint(holders(d)) != fmt.Sprint(holders(blocked)) || d.Waiters != blocked.Waiters {
							t.Fatalf("%s, in the way: Describe = %+v; want it as before the group, %+v", n, d, blocked)
						}
						continue
					}
					if oneStep && d.LastToken != last[n] {
						t.Fatalf("%s: last token %d after the refusal, was %d: a refused group issued a token", n, d.LastToken, last[n])
					}
					if d.Held || d.Waiters != 0 {
						t.Fatalf("%s: Describe after a refused try = %+v; want free, no waiter", n, d)
					}
					mustAcquire(t, s, n, "y")
				}
			})
		}
	}
}

func testGroupRenewal(t *testing.T, s Subject) {
	req := store.GroupRequest{Members: locks("a", "b"), Holder: "g", TTL: shortTTL}
	first := mustGroup(t, s, req)
	pass(s, shortTTL/2)
	req.TTL = longTTL
	again := mustGroup(t, s, req)
	for i, l := range again {
		if l.Token != first[i].Token || l.TTL != longTTL || !l.ExpiresAt.After(first[i].ExpiresAt) {
			t.Fatalf("%s: asked again = %+v, was %+v; want the same token with the new ttl", l.Name, l, first[i])
		}
	}
	pass(s, shortTTL/2+margin) // past the first TTL
	for _, l := range again {
		if d := describe(t, s, l.Name); !d.Held || d.Lease.Token != l.Token || d.LastToken != l.Token {
			t.Fatalf("%s: Describe past the first ttl = %+v; want still held under %d", l.Name, d, l.Token)
		}
	}

	// A member held alone before is renewed with its token; the others are
	// granted anew.
	single := mustAcquire(t, s, "c", "g")
	last := describe(t, s, "d").LastToken
	mixed := mustGroup(t, s, store.GroupRequest{Members: locks("d", "c"), Holder: "g", TTL: longTTL})
	if mixed[1].Token != single.Token || mixed[0].Token <= last {
		t.Fatalf("group of a fresh d and a held c = %+v; want c's token %d kept, d's above %d", mixed, single.Token, last)
	}
	if d := describe(t, s, "c"); len(d.Holders) != 1 {
		t.Fatalf("c holds %v; want one grant of g", holders(d))
	}
}

// testGroupWaitsOnEveryMember: a group that waits for a held member is
// queued for it (and, taken in one state change, for every member), so
// that requests for its names that do not fit beside it come after it: a
// stream of tries of a name cannot starve it.
func testGroupWaitsOnEveryMember(t *testing.T, s Subject) {
	x := mustAcquire(t, s, "b", "x")
	req := store.GroupRequest{Members: locks("a", "b"), Holder: "g", Waiter: "g"}
	oneStep := !splits(s, "a", "b")
	res := mustRefuseGroup(t, s, req)
	if m := res.Members[1]; m.Acquired || m.Lease.Holder != "x" || !closeTo(m.RetryAt, x.ExpiresAt) {
		t.Fatalf("b's answer %+v; want held by x until %v", m, x.ExpiresAt)
	}
	if !res.Members[0].Acquired {
		t.Fatalf("a, free, reported in the way: %+v", res.Members[0])
	}
	checkHeldOnlyAsReported(t, s, req, res)
	if d := describe(t, s, "b"); d.Waiters != 1 || d.WaitingWeight != 1 {
		t.Fatalf("Describe(b) = %+v; want the group as its one waiter", d)
	}
	_, aHeld := heldPart(res, "a")
	if d := describe(t, s, "a"); oneStep && (d.Held || d.Waiters != 1 || d.WaitingWeight != 1) {
		t.Fatalf("Describe(a) = %+v; want free with the group as its one waiter", d)
	}
	mustRelease(t, s, x)
	// Tries of b, and of a where the group waits for it there, come after
	// the group.
	tried := []string{"b"}
	if oneStep || aHeld {
		tried = append(tried, "a")
	}
	for _, n := range tried {
		for i := range 3 {
			holder := fmt.Sprintf("try-%s-%d", n, i)
			if r := acquire(t, s, store.AcquireRequest{Name: n, Holder: holder}); r.Acquired {
				t.Fatalf("%s: a try by %s passed the waiting group", n, holder)
			}
			if r := acquire(t, s, store.AcquireRequest{Name: n, Holder: "late-" + n, Waiter: "late-" + n}); r.Acquired {
				t.Fatalf("%s: a waiter that came after the group was granted first", n)
			}
		}
	}
	leases := mustGroup(t, s, req)
	if leases[1].Token <= x.Token {
		t.Fatalf("b: the group's token %d after x's %d", leases[1].Token, x.Token)
	}
	for _, n := range []string{"a", "b"} {
		if d := describe(t, s, n); d.Lease.Holder != "g" || (slices.Contains(tried, n) && d.Waiters != 1) {
			t.Fatalf("Describe(%s) after the group's grant = %+v; want held by g, the later waiter still queued", n, d)
		}
	}
	if _, err := s.ReleaseGroup(context.Background(), "g", groupLeases(leases)); err != nil {
		t.Fatal(err)
	}
	for _, n := range tried {
		if r := acquire(t, s, store.AcquireRequest{Name: n, Holder: "late-" + n, Waiter: "late-" + n}); !r.Acquired {
			t.Fatalf("%s: the waiter behind the group was not granted after its release: %+v", n, r)
		}
	}
}

// testGroupDelaysOnlyWhatDoesNotFit: requests for other names never wait
// for a waiting group, nor do waiters whose share fits beside it.
func testGroupDelaysOnlyWhatDoesNotFit(t *testing.T, s Subject) {
	x := mustAcquire(t, s, "b", "x")
	req := store.GroupRequest{Members: []store.GroupMember{{Name: "a", Capacity: 3, Weight: 1}, {Name: "b"}}, Holder: "g", Waiter: "g"}
	mustRefuseGroup(t, s, req)
	for _, r := range []store.AcquireRequest{
		{Name: "c", Holder: "z"},
		{Name: "d", Holder: "z", Waiter: "z"},
		{Name: "a", Holder: "z", Capacity: 3, Weight: 1, Waiter: "z"}, // 1 of 3 fits beside the group's 1
	} {
		if res := acquire(t, s, r); !res.Acquired {
			t.Fatalf("%+v waited for a group it is not in the way of: %+v", r, res)
		}
	}
	if d := describe(t, s, "c"); d.Waiters != 0 {
		t.Fatalf("Describe(c) = %+v; want no waiter", d)
	}
	mustRelease(t, s, x)
	leases := mustGroup(t, s, req)
	// In token order: the group's share comes first when a store taking
	// it in steps held it while it waited.
	if got := holders(describe(t, s, "a")); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"g:1", "z:1"}) {
		t.Fatalf("a's holders %v; want z and the group, 1 each", got)
	}
	if leases[0].Weight != 1 || leases[1].Weight != 1 {
		t.Fatalf("group leases %+v; want weight 1 each", leases)
	}
}

// testGroupFIFO: a group and single requests queued for the same names are
// granted in arrival order, each name's tokens rising.
func testGroupFIFO(t *testing.T, s Subject) {
	x := mustAcquire(t, s, "a", "x")
	w1 := store.AcquireRequest{Name: "a", Holder: "w1", Waiter: "w1"}
	w2 := store.AcquireRequest{Name: "b", Holder: "w2", Waiter: "w2"}
	g := store.GroupRequest{Members: locks("a", "b"), Holder: "g", Waiter: "g"}
	// Taken in several steps, the group stands in b's queue only once it
	// has a: w2, after it in b's queue or not, shows nothing of FIFO order.
	oneStep := !splits(s, "a", "b")
	if r := acquire(t, s, w1); r.Acquired {
		t.Fatal("w1 was granted a held name")
	}
	mustRefuseGroup(t, s, g)
	if oneStep {
		if r := acquire(t, s, w2); r.Acquired {
			t.Fatal("w2 was granted b before the group queued for it")
		}
	}
	mustRelease(t, s, x)
	// Everyone tries, the youngest first: only the oldest may win.
	if oneStep {
		if r := acquire(t, s, w2); r.Acquired {
			t.Fatal("w2 passed the group")
		}
	}
	if r := tryGroup(t, s, g); r.Acquired {
		t.Fatal("the group passed w1")
	} else {
		releaseHeldAfterTheTest(t, s, g.Holder, r)
	}
	first := acquire(t, s, w1)
	if !first.Acquired || first.Lease.Token <= x.Token {
		t.Fatalf("w1 = %+v; want granted after x (token %d)", first, x.Token)
	}
	mustRelease(t, s, first.Lease)
	if oneStep {
		if r := acquire(t, s, w2); r.Acquired {
			t.Fatal("w2 passed the group")
		}
	}
	leases := mustGroup(t, s, g)
	if leases[0].Token <= first.Lease.Token {
		t.Fatalf("a: the group's token %d after w1's %d", leases[0].Token, first.Lease.Token)
	}
	if _, err := s.ReleaseGroup(context.Background(), "g", groupLeases(leases)); err != nil {
		t.Fatal(err)
	}
	if r := acquire(t, s, w2); !r.Acquired || r.Lease.Token <= leases[1].Token {
		t.Fatalf("w2 = %+v; want granted after the group (token %d)", r, leases[1].Token)
	}
}

// releaseHeldAfterTheTest leaves parts a refused group holds while it waits
// held, as a waiting caller keeps them, and gives them up when t ends.
func releaseHeldAfterTheTest(t *testing.T, s Subject, holder string, res store.GroupResult) {
	t.Helper()
	if len(res.Held) == 0 {
		return
	}
	t.Cleanup(func() { _, _ = s.ReleaseGroup(context.Background(), holder, groupLeases(res.Held)) })
}

func testGroupErrorsNameTheMember(t *testing.T, s Subject) {
	tests := []struct {
		what   string
		setup  func(t *testing.T, name string)
		member func(name string) store.GroupMember
		max    int
		check  func(t *testing.T, name string, err error)
	}{
		{
			"capacity mismatch",
			func(t *testing.T, name string) { mustShare(t, s, name, "x", 5, 1) },
			func(name string) store.GroupMember { return store.GroupMember{Name: name, Capacity: 3} },
			0,
			func(t *testing.T, name string, err error) {
				var ce *store.CapacityError
				if !errors.As(err, &ce) || ce.Name != name || ce.Have != 5 || ce.Asked != 3 {
					t.Fatalf("err = %v; want a CapacityError naming %s, 5 and 3", err, name)
				}
			},
		},
		{
			"holder limit",
			func(t *testing.T, name string) {
				for _, h := range []string{"x1", "x2"} {
					if res := acquire(t, s, store.AcquireRequest{Name: name, Holder: h, Capacity: 10, MaxHolders: 2}); !res.Acquired {
						t.Fatalf("%s: %+v", h, res)
					}
				}
			},
			func(name string) store.GroupMember { return store.GroupMember{Name: name, Capacity: 10, Weight: 1} },
			2,
			func(t *testing.T, name string, err error) {
				var he *store.HolderLimitError
				if !errors.As(err, &he) || he.Name != name || he.Limit != 2 {
					t.Fatalf("err = %v; want a HolderLimitError naming %s and 2", err, name)
				}
			},
		},
		{
			"weight above capacity",
			func(*testing.T, string) {},
			func(name string) store.GroupMember { return store.GroupMember{Name: name, Capacity: 2, Weight: 3} },
			0,
			func(t *testing.T, name string, err error) {
				if err == nil || !strings.Contains(err.Error(), name) {
					t.Fatalf("err = %v; want an error naming %s", err, name)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(strings.ReplaceAll(tc.what, " ", "-"), func(t *testing.T) {
			free, bad := tc.what+"/free", tc.what+"/bad"
			tc.setup(t, bad)
			before := describe(t, s, bad)
			for _, waiter := range []string{"", "g"} {
				// The member in error comes last, after one a store taking
				// the group in steps may have taken first.
				req := store.GroupRequest{Members: []store.GroupMember{{Name: free}, tc.member(bad)},
					Holder: "g", TTL: longTTL, Waiter: waiter, WaiterTTL: longTTL, MaxHolders: tc.max}
				res, err := s.AcquireGroup(context.Background(), req)
				if res.Acquired {
					t.Fatalf("granted %+v with %v", res.Leases, err)
				}
				tc.check(t, bad, err)
				if d := describe(t, s, free); d.Held || d.Waiters != 0 {
					t.Fatalf("Describe(%s) after the error = %+v; want free with no waiter", free, d)
				}
				if d := describe(t, s, bad); fmt.Sprint(holders(d)) != fmt.Sprint(holders(before)) || d.Waiters != 0 {
					t.Fatalf("Describe(%s) after the error = %+v; want it as before, %+v", bad, d, before)
				}
			}
		})
	}
}

func testGroupCheck(t *testing.T, s Subject) {
	ctx := context.Background()
	many := func(n int) []store.GroupMember {
		members := make([]store.GroupMember, n)
		for i := range members {
			members[i] = store.GroupMember{Name: fmt.Sprintf("m%02d", i)}
		}
		return members
	}
	for _, tc := range []struct {
		what string
		req  store.GroupRequest
	}{
		{"no member", store.GroupRequest{Holder: "g", TTL: longTTL}},
		{"too many members", store.GroupRequest{Members: many(store.MaxGroupMembers + 1), Holder: "g", TTL: longTTL}},
		{"a name twice", store.GroupRequest{Members: locks("a", "b", "a"), Holder: "g", TTL: longTTL}},
		{"a name twice with other shares", store.GroupRequest{Members: []store.GroupMember{{Name: "a", Capacity: 2, Weight: 1}, {Name: "a", Capacity: 2, Weight: 1}}, Holder: "g", TTL: longTTL}},
		{"no ttl", store.GroupRequest{Members: locks("a"), Holder: "g"}},
		{"a negative ttl", store.GroupRequest{Members: locks("a"), Holder: "g", TTL: -time.Second}},
		{"a waiter and a name twice", store.GroupRequest{Members: locks("b", "b"), Holder: "g", TTL: longTTL, Waiter: "g", WaiterTTL: longTTL}},
	} {
		if err := store.CheckGroup(tc.req); err == nil {
			t.Errorf("%s: CheckGroup passed it", tc.what)
		}
		if res, err := s.AcquireGroup(ctx, tc.req); err == nil || res.Acquired {
			t.Errorf("%s: AcquireGroup = %+v, %v; want an error", tc.what, res, err)
		}
	}
	for _, n := range append([]string{"a", "b"}, memberNames(many(store.MaxGroupMembers+1))...) {
		if d := describe(t, s, n); d.Held || d.Waiters != 0 {
			t.Fatalf("Describe(%s) after refused groups = %+v; want untouched", n, d)
		}
	}
	largest := store.GroupRequest{Members: many(store.MaxGroupMembers), Holder: "g", TTL: longTTL}
	if err := store.CheckGroup(largest); err != nil {
		t.Fatalf("CheckGroup of %d members: %v", store.MaxGroupMembers, err)
	}
	if leases := mustGroup(t, s, largest); len(leases) != store.MaxGroupMembers {
		t.Fatalf("%d leases for %d members", len(leases), store.MaxGroupMembers)
	}
	inSession := store.GroupRequest{Members: locks("s"), Holder: "g", Session: "any"}
	if err := store.CheckGroup(inSession); err != nil {
		t.Fatalf("CheckGroup of a group in a session without a ttl: %v", err)
	}
}

// testGroupMixedShares: one group holds a semaphore's share, a read lock
// and an exclusive lock, each beside the grants that fit, and is refused by
// the one that does not.
func testGroupMixedShares(t *testing.T, s Subject) {
	const rw = store.RWCapacity
	mustShare(t, s, "sem", "other", 3, 2)
	reader := mustShare(t, s, "rw", "reader", rw, 1)
	g := store.GroupRequest{Members: []store.GroupMember{{Name: "lock"}, {Name: "sem", Capacity: 3, Weight: 1}, {Name: "rw", Capacity: rw, Weight: 1}}, Holder: "g"}
	leases := mustGroup(t, s, g)
	for i, want := range []string{"[g:1]", "[other:2 g:1]", "[reader:1 g:1]"} {
		if leases[i].Weight != 1 {
			t.Fatalf("%s: lease %+v; want weight 1", leases[i].Name, leases[i])
		}
		if d := describe(t, s, leases[i].Name); fmt.Sprint(holders(d)) != want || d.Capacity != max(g.Members[i].Capacity, 1) {
			t.Fatalf("Describe(%s) = %+v (holders %v); want %s of capacity %d", leases[i].Name, d, holders(d), want, max(g.Members[i].Capacity, 1))
		}
	}
	// The semaphore is full: a second group's read lock, which fits, is
	// not taken without its share.
	g2 := store.GroupRequest{Members: []store.GroupMember{{Name: "sem", Capacity: 3, Weight: 1}, {Name: "rw", Capacity: rw, Weight: 1}}, Holder: "g2"}
	res := mustRefuseGroup(t, s, g2)
	if res.Members[0].Acquired || res.Members[0].Lease.Holder == "" || !res.Members[1].Acquired {
		t.Fatalf("g2's answers %+v; want sem in the way, naming a holder, and rw not", res.Members)
	}
	checkHeldOnlyAsReported(t, s, g2, res)
	releaseHeld(t, s, "g2", res)
	// A writer's group waits behind the readers; readers that do not wait
	// do not pass it.
	writer := store.GroupRequest{Members: []store.GroupMember{{Name: "rw", Capacity: rw, Weight: rw}}, Holder: "w", Waiter: "w"}
	if res := mustRefuseGroup(t, s, writer); res.Members[0].Lease.Holder == "" {
		t.Fatalf("the writer's answer %+v; want a reader named", res.Members[0])
	}
	if released, err := s.ReleaseGroup(context.Background(), "g", groupLeases(leases)); err != nil || slices.Contains(released, false) {
		t.Fatalf("ReleaseGroup = %v, %v", released, err)
	}
	if res := tryGroup(t, s, g2); res.Acquired {
		t.Fatal("g2's read lock passed the waiting writer")
	} else {
		checkHeldOnlyAsReported(t, s, g2, res)
		releaseHeld(t, s, "g2", res)
	}
	mustRelease(t, s, reader)
	w := mustGroup(t, s, writer)
	if w[0].Weight != rw || w[0].Token <= leases[2].Token {
		t.Fatalf("the writer's lease %+v; want all of rw with a token above the group's %d", w[0], leases[2].Token)
	}
}

func testReleaseGroup(t *testing.T, s Subject) {
	ctx := context.Background()
	leases := mustGroup(t, s, store.GroupRequest{Members: locks("a", "b", "c"), Holder: "g"})
	if r := acquire(t, s, store.AcquireRequest{Name: "c", Holder: "y", Waiter: "y"}); r.Acquired {
		t.Fatal("y was granted a held name")
	}
	c := s.Changes("c")
	defer c.Cancel()
	drain(c)
	mustRelease(t, s, leases[0])
	tests := []struct {
		what   string
		holder string
		leases []store.GroupLease
		want   []bool
	}{
		{"another holder", "other", groupLeases(leases), []bool{false, false, false}},
		{"one released already, one under a wrong token, one never granted", "g", []store.GroupLease{
			{Name: "a", Token: leases[0].Token},
			{Name: "b", Token: leases[1].Token + 1},
			{Name: "c", Token: leases[2].Token},
			{Name: "never", Token: 1},
		}, []bool{false, false, true, false}},
		{"again", "g", groupLeases(leases[1:]), []bool{true, false}},
		{"once more", "g", groupLeases(leases), []bool{false, false, false}},
	}
	for _, tc := range tests {
		released, err := s.ReleaseGroup(ctx, tc.holder, tc.leases)
		if err != nil || !slices.Equal(released, tc.want) {
			t.Fatalf("%s: ReleaseGroup = %v, %v; want %v", tc.what, released, err, tc.want)
		}
		if tc.what == "another holder" {
			for _, l := range leases[1:] {
				if d := describe(t, s, l.Name); d.Lease.Holder != "g" {
					t.Fatalf("%s: Describe(%s) = %+v; want still held by g", tc.what, l.Name, d)
				}
			}
		}
	}
	waitChange(t, c, "the group's release of c")
	for _, l := range leases {
		if d := describe(t, s, l.Name); d.Held {
			t.Fatalf("Describe(%s) after the releases = %+v; want free", l.Name, d)
		}
	}
	if r := acquire(t, s, store.AcquireRequest{Name: "c", Holder: "y", Waiter: "y"}); !r.Acquired || r.Lease.Token <= leases[2].Token {
		t.Fatalf("y after the group's release = %+v; want granted above %d", r, leases[2].Token)
	}
}

// attachGroup takes names in sess for holder, with a waiter queued behind
// on each, and checks the leases are the session's.
func attachGroup(t *testing.T, s Subject, ss store.Sessions, sess store.Session, holder string, names ...string) []store.Lease {
	t.Helper()
	leases := mustGroup(t, s, store.GroupRequest{Members: locks(names...), Holder: holder, Session: sess.ID, SessionOwner: sess.Owner})
	for _, l := range leases {
		if l.Session != sess.ID || l.TTL != sess.TTL {
			t.Fatalf("attached group lease %+v; want session %s, ttl %s", l, sess.ID, sess.TTL)
		}
		if r := acquire(t, s, store.AcquireRequest{Name: l.Name, Holder: "next", Waiter: "next"}); r.Acquired {
			t.Fatalf("%s: the waiter was granted a held name", l.Name)
		}
	}
	d, err := ss.DescribeSession(context.Background(), sess.ID, sess.Owner)
	if err != nil || !slices.Equal(d.Names, names) {
		t.Fatalf("DescribeSession = %+v, %v; want names %v", d, err, names)
	}
	return leases
}

func testGroupSessionExpiry(t *testing.T, s Subject) {
	ss := s.Store
	sess := newSession(t, ss)
	leases := attachGroup(t, s, ss, sess, "g", "p0", "p1", "p2")
	for range 2 {
		pass(s, shortTTL/2)
		sess = renewSession(t, ss, sess)
	}
	pass(s, shortTTL/2)
	for _, l := range leases {
		if !heldBy(t, s, l.Name, "g") {
			t.Fatalf("%s: the group's lease ended although its session was renewed", l.Name)
		}
	}
	pass(s, shortTTL+margin)
	for _, l := range leases {
		if heldBy(t, s, l.Name, "g") {
			t.Fatalf("%s: held past its session's expiry", l.Name)
		}
		if r := acquire(t, s, store.AcquireRequest{Name: l.Name, Holder: "next", Waiter: "next"}); r.Acquired {
			t.Fatalf("%s: granted in the lock delay of the session's expiry", l.Name)
		}
	}
	_, err := s.AcquireGroup(context.Background(), store.GroupRequest{Members: locks("p0", "q"), Holder: "g", Session: sess.ID, SessionOwner: owner})
	if !errors.Is(err, store.ErrSessionExpired) {
		t.Fatalf("a group in the expired session: %v; want ErrSessionExpired", err)
	}
	if heldBy(t, s, "q", "g") {
		t.Fatal("a group in an expired session holds a member")
	}
	pass(s, lockDelay)
	for _, l := range leases {
		r := acquire(t, s, store.AcquireRequest{Name: l.Name, Holder: "next", Waiter: "next"})
		if !r.Acquired || r.Lease.Token <= l.Token {
			t.Fatalf("%s: the waiter after the session's end = %+v; want granted above %d", l.Name, r, l.Token)
		}
	}
}

func testGroupSessionClose(t *testing.T, s Subject) {
	ctx := context.Background()
	ss := s.Store
	sess := newSession(t, ss)
	leases := attachGroup(t, s, ss, sess, "g", "p0", "p1")
	c := s.Changes("p1")
	defer c.Cancel()
	drain(c)
	if err := ss.CloseSession(ctx, sess.ID, owner); err != nil {
		t.Fatal(err)
	}
	waitChange(t, c, "close")
	for _, l := range leases {
		r := acquire(t, s, store.AcquireRequest{Name: l.Name, Holder: "next", Waiter: "next"})
		if !r.Acquired || r.Lease.Token <= l.Token {
			t.Fatalf("%s: the waiter after the close = %+v; want granted at once above %d", l.Name, r, l.Token)
		}
	}
	_, err := s.AcquireGroup(ctx, store.GroupRequest{Members: locks("q", "r"), Holder: "g", Session: sess.ID, SessionOwner: owner})
	if !errors.Is(err, store.ErrSessionClosed) {
		t.Fatalf("a group in the closed session: %v; want ErrSessionClosed", err)
	}
	for _, n := range []string{"q", "r"} {
		if d := describe(t, s, n); d.Held || d.Waiters != 0 {
			t.Fatalf("Describe(%s) after a group in a closed session = %+v; want untouched", n, d)
		}
	}
}

func testGroupExpiry(t *testing.T, s Subject) {
	leases := mustGroup(t, s, store.GroupRequest{Members: locks("a", "b"), Holder: "g", TTL: shortTTL})
	pass(s, shortTTL+margin)
	for _, l := range leases {
		if d := describe(t, s, l.Name); d.Held {
			t.Fatalf("Describe(%s) past the group's ttl = %+v; want not held", l.Name, d)
		}
		r := acquire(t, s, store.AcquireRequest{Name: l.Name, Holder: "y"})
		if want := l.ExpiresAt.Add(lockDelay); r.Acquired || !closeTo(r.RetryAt, want) {
			t.Fatalf("%s in the lock delay = %+v; want refused until %v", l.Name, r, want)
		}
	}
	if r := tryGroup(t, s, store.GroupRequest{Members: locks("a", "b"), Holder: "g"}); r.Acquired {
		t.Fatal("the group got its names back in the lock delay")
	}
	pass(s, lockDelay)
	for _, l := range leases {
		if next := mustAcquire(t, s, l.Name, "y"); next.Token <= l.Token {
			t.Fatalf("%s: token %d after the group's %d", l.Name, next.Token, l.Token)
		}
	}
}

// testGroupStopsWaiting: a waiting group that gives up (each queue
// dequeued, and its held parts released) or whose caller vanished (its
// waiter's TTL runs out) stops holding up the requests queued after it.
func testGroupStopsWaiting(t *testing.T, s Subject) {
	for _, tc := range []struct {
		how  string
		stop func(t *testing.T, members []string, res store.GroupResult)
	}{
		{"dequeued", func(t *testing.T, members []string, res store.GroupResult) {
			for _, n := range members {
				if err := s.Dequeue(context.Background(), n, "g"); err != nil {
					t.Fatal(err)
				}
			}
			releaseHeld(t, s, "g", res)
		}},
		{"vanished", func(t *testing.T, _ []string, res store.GroupResult) {
			pass(s, shortTTL+margin)
			// Held parts live until their TTL; the caller that vanished
			// with them cannot be told apart from a slow one.
			releaseHeld(t, s, "g", res)
		}},
	} {
		t.Run(tc.how, func(t *testing.T) {
			a, b := tc.how+"/a", tc.how+"/b"
			x := mustAcquire(t, s, b, "x")
			req := store.GroupRequest{Members: locks(a, b), Holder: "g", Waiter: "g", WaiterTTL: shortTTL}
			res := mustRefuseGroup(t, s, req)
			behind := []string{b}
			if !splits(s, a, b) {
				behind = append(behind, a)
			}
			for _, n := range behind {
				if r := acquire(t, s, store.AcquireRequest{Name: n, Holder: "y", Waiter: "y"}); r.Acquired {
					t.Fatalf("%s: y passed the waiting group", n)
				}
			}
			mustRelease(t, s, x)
			tc.stop(t, []string{a, b}, res)
			for _, n := range behind {
				if r := acquire(t, s, store.AcquireRequest{Name: n, Holder: "y", Waiter: "y"}); !r.Acquired {
					t.Fatalf("%s: y still waits for a group that stopped waiting: %+v", n, r)
				}
			}
		})
	}
}

// testGroupRequeuedBehindAll: two groups wait for {a, b}; the first one's
// place on a lapses (its refreshes of a failed) while its place on b
// lives. Queued again at the back of a alone, it would be first on b and
// second on a, the other group the reverse, each waiting for the other for
// ever: it must queue again behind every waiter of both names.
func testGroupRequeuedBehindAll(t *testing.T, s Subject) {
	if splits(s, "a", "b") {
		t.Skip("a group taken in steps waits in one slot's queues at a time")
	}
	ctx := context.Background()
	const waiterTTL = time.Second
	x := []store.Lease{mustAcquire(t, s, "a", "x"), mustAcquire(t, s, "b", "x")}
	group := func(holder string) store.GroupRequest {
		return store.GroupRequest{Members: locks("a", "b"), Holder: holder, Waiter: holder, WaiterTTL: waiterTTL}
	}
	mustRefuseGroup(t, s, group("g1"))
	mustRefuseGroup(t, s, group("g2"))
	pass(s, waiterTTL/2)
	if err := s.RefreshWaiters(ctx, "b", []string{"g1", "g2"}, waiterTTL); err != nil {
		t.Fatal(err)
	}
	if err := s.RefreshWaiters(ctx, "a", []string{"g2"}, waiterTTL); err != nil {
		t.Fatal(err)
	}
	pass(s, waiterTTL/2+margin)
	if d := describe(t, s, "a"); d.Waiters != 1 {
		t.Fatalf("Describe(a) = %+v; want g2 alone waiting, g1's place lapsed", d)
	}
	if released, err := s.ReleaseGroup(ctx, "x", groupLeases(x)); err != nil || slices.Contains(released, false) {
		t.Fatalf("ReleaseGroup = %v, %v", released, err)
	}
	if res := tryGroup(t, s, group("g1")); res.Acquired {
		t.Fatal("g1 was granted although g2 is ahead of it on a")
	}
	g2 := mustGroup(t, s, group("g2"))
	if _, err := s.ReleaseGroup(ctx, "g2", groupLeases(g2)); err != nil {
		t.Fatal(err)
	}
	mustGroup(t, s, group("g1"))
}

// testGroupContention has workers take random subsets of a few names,
// listed in random order, as waiting groups (with single requests mixed
// in), with short leases and random pauses; some vanish without
// releasing. Each one that is granted acts on a fenced Resource per member:
// an overlap of valid leases on a name, or a token going back, fails the
// test, and so does a worker that is not granted within a deadline: a
// deadlock.
func testGroupContention(t *testing.T, s Subject) {
	const (
		workers  = 12
		rounds   = 12
		ttl      = 150 * time.Millisecond
		deadline = 10 * time.Second
	)
	names := []string{"n0", "n1", "n2", "n3", "n4"}
	resources := map[string]*Resource{}
	for _, n := range names {
		resources[n] = &Resource{}
	}
	var grants, groups atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 13)) //nolint:gosec // G404: reproducible choices for a test, not a secret
			for round := range rounds {
				holder := fmt.Sprintf("worker-%d-%d", w, round)
				members := slices.Clone(names)
				rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
				members = members[:1+rng.IntN(3)]
				leases, sent, err := contendForGroup(s, rng, holder, members, ttl, deadline)
				if err != nil {
					t.Errorf("%s: %v\n%s", holder, err, describeAll(s, names))
					return
				}
				grants.Add(1)
				if len(members) > 1 {
					groups.Add(1)
				}
				validUntil := sent.Add(ttl - 50*time.Millisecond)
				for _, l := range leases {
					if err := resources[l.Name].Enter(holder, l.Token, validUntil); err != nil {
						t.Error(err)
					}
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				for _, l := range leases {
					resources[l.Name].Leave(holder)
				}
				if rng.IntN(5) == 0 {
					continue // vanish without releasing: the leases must expire
				}
				if _, err := s.ReleaseGroup(context.Background(), holder, groupLeases(leases)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if groups.Load() < workers {
		t.Fatalf("%d grants, %d of them groups: the test did not contend with groups", grants.Load(), groups.Load())
	}
	t.Logf("%d grants, %d of them groups", grants.Load(), groups.Load())
}

// contendForGroup asks for members as holder until granted, waiting in
// their queues, within deadline; a group of one member is, one time in
// two, a single Acquire. It returns the leases and when the grant was
// asked for: their validity starts then.
func contendForGroup(s Subject, rng *rand.Rand, holder string, members []string, ttl, deadline time.Duration) ([]store.Lease, time.Time, error) {
	ctx := context.Background()
	single := len(members) == 1 && rng.IntN(2) == 0
	req := store.GroupRequest{Members: locks(members...), Holder: holder, TTL: ttl, Waiter: holder, WaiterTTL: time.Second}
	var lastRefusal string
	for start := time.Now(); time.Since(start) < deadline; time.Sleep(time.Duration(1+rng.IntN(3)) * time.Millisecond) {
		sent := time.Now()
		if single {
			res, err := s.Acquire(ctx, req.Request(0))
			if err != nil {
				return nil, sent, err
			}
			if res.Acquired {
				return []store.Lease{res.Lease}, sent, nil
			}
			lastRefusal = fmt.Sprintf("%s held by %q", members[0], res.Lease.Holder)
			continue
		}
		res, err := s.AcquireGroup(ctx, req)
		if err != nil {
			return nil, sent, err
		}
		if err := checkGroupResult(req, res); err != nil {
			return nil, sent, err
		}
		if res.Acquired {
			return res.Leases, sent, nil
		}
		lastRefusal = refusal(req, res)
	}
	return nil, time.Time{}, fmt.Errorf("not granted %v within %s, last refused for %s: a deadlock", members, deadline, lastRefusal)
}

// describeAll is each name's Describe, for a failure's message.
func describeAll(s Subject, names []string) string {
	var b strings.Builder
	for _, n := range names {
		d, err := s.Describe(context.Background(), n)
		fmt.Fprintf(&b, "  %s: holders %v, %d waiters, last token %d, err %v\n", n, holders(d), d.Waiters, d.LastToken, err)
	}
	return b.String()
}
