package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/server/store"
)

// locks is a group member of each name, an exclusive lock.
func locks(names ...string) []store.GroupMember {
	members := make([]store.GroupMember, len(names))
	for i, n := range names {
		members[i] = store.GroupMember{Name: n}
	}
	return members
}

func mustAcquireGroup(t testing.TB, s *Store, req store.GroupRequest) store.GroupResult {
	t.Helper()
	res, err := s.AcquireGroup(testCtx(t), req)
	if err != nil {
		t.Fatalf("AcquireGroup(%+v): %v", req.Members, err)
	}
	return res
}

func mustGroup(t testing.TB, s *Store, req store.GroupRequest) []store.Lease {
	t.Helper()
	res := mustAcquireGroup(t, s, req)
	if !res.Acquired {
		t.Fatalf("AcquireGroup(%+v) by %s: refused %+v", req.Members, req.Holder, res.Members)
	}
	return res.Leases
}

func mustReleaseGroup(t testing.TB, s *Store, holder string, leases []store.Lease) {
	t.Helper()
	mine := make([]store.GroupLease, len(leases))
	for i, l := range leases {
		mine[i] = store.GroupLease{Name: l.Name, Token: l.Token}
	}
	released, err := s.ReleaseGroup(testCtx(t), holder, mine)
	if err != nil || slices.Contains(released, false) {
		t.Fatalf("ReleaseGroup(%+v) = %v, %v; want each released", mine, released, err)
	}
}

// namesInSlots returns n names of n different Cluster slots, in ascending
// slot order.
func namesInSlots(n int) []string {
	var out []string
	seen := map[uint16]bool{}
	for i := 0; len(out) < n; i++ {
		name := fmt.Sprintf("slot-%d", i)
		if slot := slotOf(encodeName(name)); !seen[slot] {
			seen[slot] = true
			out = append(out, name)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return int(slotOf(encodeName(a))) - int(slotOf(encodeName(b))) })
	return out
}

// sharingASlot returns a name other than name in name's Cluster slot.
func sharingASlot(name string) string {
	slot := slotOf(encodeName(name))
	for i := 0; ; i++ {
		if other := fmt.Sprintf("%s/%d", name, i); slotOf(encodeName(other)) == slot {
			return other
		}
	}
}

// TestAGroupAcrossClusterSlotsIsTakenInSlotOrder: a group whose names lie
// in three slots is taken slot by slot in ascending slot order, whatever
// the order it lists them in, the names of one slot together. Refused in
// one slot, it holds the earlier slots' members (real grants of its TTL,
// reported in Held), waits in the refusing slot's queues alone (on each of
// its names there), and is told nothing of the later slots but that they
// are not known to be in the way; asked again, it renews what it holds
// (same tokens) and goes on. A group refused in an earlier slot than
// before leaves the later slots' queues.
func TestAGroupAcrossClusterSlotsIsTakenInSlotOrder(t *testing.T) {
	t.Parallel()
	s := newStore(t, clusterClient(t), Options{})
	names := namesInSlots(3)
	low, mid, high := names[0], names[1], names[2]
	beside := sharingASlot(mid)
	if parts := s.slotParts([]string{high, low, mid, beside}); !slices.EqualFunc(parts, [][]int{{1}, {2, 3}, {0}}, slices.Equal) {
		t.Fatalf("slotParts = %v; want the slots in ascending order, %s and %s together", parts, mid, beside)
	}

	x := mustGrant(t, s, req(mid, "x", time.Minute, ""))
	g := store.GroupRequest{Members: locks(high, low, mid, beside), Holder: "g", TTL: time.Minute, Waiter: "g", WaiterTTL: time.Minute}
	sent := time.Now()
	res := mustAcquireGroup(t, s, g)
	if res.Acquired || len(res.Members) != 4 || !res.Members[0].Acquired || !res.Members[1].Acquired ||
		res.Members[2].Acquired || res.Members[2].Lease.Holder != "x" || !res.Members[3].Acquired {
		t.Fatalf("the group with its middle slot held: %+v; want refused for %s alone, held by x", res, mid)
	}
	if len(res.Held) != 1 || res.Held[0].Name != low || res.Held[0].Holder != "g" || res.Held[0].TTL != time.Minute {
		t.Fatalf("Held = %+v; want the lowest slot's %s, held by g for a minute", res.Held, low)
	}
	expiresWithin(t, res.Held[0], time.Minute, sent, time.Now())
	part := res.Held[0]
	for _, tc := range []struct {
		name    string
		holder  string
		waiters int
	}{{low, "g", 0}, {mid, "x", 1}, {beside, "", 1}, {high, "", 0}} {
		if d := mustDescribe(t, s, tc.name); d.Lease.Holder != tc.holder || d.Waiters != tc.waiters {
			t.Fatalf("Describe(%s) = %+v; want held by %q, %d waiting", tc.name, d, tc.holder, tc.waiters)
		}
	}

	res = mustAcquireGroup(t, s, g)
	if res.Acquired || len(res.Held) != 1 || res.Held[0].Token != part.Token || res.Held[0].ExpiresAt.Before(part.ExpiresAt) {
		t.Fatalf("asked again: %+v; want refused, the held part renewed under token %d", res, part.Token)
	}
	mustRelease(t, s, x)
	leases := mustGroup(t, s, g)
	if leases[1].Token != part.Token || leases[2].Token <= x.Token || leases[0].Holder != "g" || leases[3].Holder != "g" {
		t.Fatalf("granted %+v; want %s's token %d kept and %s's above x's %d", leases, low, part.Token, mid, x.Token)
	}
	for _, n := range []string{mid, beside} {
		if d := mustDescribe(t, s, n); d.Waiters != 0 {
			t.Fatalf("Describe(%s) after the grant = %+v; want the group's place gone", n, d)
		}
	}
	mustReleaseGroup(t, s, "g", leases)

	// Refused in the last slot, then in the first: the group leaves the
	// last slot's queue.
	y := mustGrant(t, s, req(high, "y", time.Minute, ""))
	h := store.GroupRequest{Members: locks(low, mid, high), Holder: "h", TTL: time.Minute, Waiter: "h", WaiterTTL: time.Minute}
	res = mustAcquireGroup(t, s, h)
	if res.Acquired || len(res.Held) != 2 || mustDescribe(t, s, high).Waiters != 1 {
		t.Fatalf("the group with its last slot held: %+v; want two parts held, queued for %s", res, high)
	}
	heldLow, heldMid := res.Held[0], res.Held[1]
	mustRelease(t, s, heldLow)
	z := mustGrant(t, s, req(low, "z", time.Minute, ""))
	res = mustAcquireGroup(t, s, h)
	if res.Acquired || len(res.Held) != 0 || res.Members[0].Acquired || res.Members[0].Lease.Holder != "z" {
		t.Fatalf("the group with its first slot held: %+v; want refused for %s, held by z, nothing held", res, low)
	}
	if d := mustDescribe(t, s, high); d.Waiters != 0 {
		t.Fatalf("Describe(%s) = %+v; want the group out of its queue, waiting in the first slot's", high, d)
	}
	if d := mustDescribe(t, s, low); d.Waiters != 1 {
		t.Fatalf("Describe(%s) = %+v; want the group queued", low, d)
	}
	for _, l := range []store.Lease{y, z, heldMid} {
		mustRelease(t, s, l)
	}
}

// TestAGroupThatFailsInALaterSlotGivesBackItsNewParts: an error in a later
// slot (another capacity) releases what the earlier slots granted in the
// same call, and leaves what the group held before (renewed) held, in
// Held.
func TestAGroupThatFailsInALaterSlotGivesBackItsNewParts(t *testing.T) {
	t.Parallel()
	s := newStore(t, clusterClient(t), Options{})
	names := namesInSlots(3)
	before := mustGrant(t, s, req(names[0], "g", time.Minute, ""))
	if _, err := s.Acquire(testCtx(t), store.AcquireRequest{Name: names[2], Holder: "x", TTL: time.Minute, Capacity: 5}); err != nil {
		t.Fatal(err)
	}
	res, err := s.AcquireGroup(testCtx(t), store.GroupRequest{Members: locks(names...), Holder: "g", TTL: time.Minute})
	var ce *store.CapacityError
	if !errors.As(err, &ce) || ce.Name != names[2] || ce.Have != 5 || ce.Asked != 1 {
		t.Fatalf("AcquireGroup = %+v, %v; want a CapacityError naming %s", res, err, names[2])
	}
	if len(res.Held) != 1 || res.Held[0].Name != names[0] || res.Held[0].Token != before.Token {
		t.Fatalf("Held = %+v; want the part held before, %s under %d", res.Held, names[0], before.Token)
	}
	if d := mustDescribe(t, s, names[1]); d.Held {
		t.Fatalf("Describe(%s) = %+v; want the part granted in the failed call given back", names[1], d)
	}
}

// TestAGroupCostsTwoCommandsANameAndTwo: an uncontended group of n names
// runs 2 + 2n commands (TIME and the marker once; an HMGET and an HSET a
// name: the grant takes the fields its check read), where n acquires run
// 4n, and its release 3 a name, as n releases do.
func TestAGroupCostsTwoCommandsANameAndTwo(t *testing.T) {
	t.Parallel()
	s, stats := storeOnOwnRedis(t, Options{})
	mustRelease(t, s, mustGrant(t, s, req("warm-up", "a", time.Minute, ""))) // connects
	for _, n := range []int{1, 2, 8} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("group%d/%d", n, i)
		}
		g := store.GroupRequest{Members: locks(names...), Holder: "g", TTL: time.Minute}
		mustReleaseGroup(t, s, "g", mustGroup(t, s, g)) // the keys' expiries set
		stats.reset(t)
		leases := mustGroup(t, s, g)
		acquired, acquire := stats.since(t)
		mustReleaseGroup(t, s, "g", leases)
		released, release := stats.since(t)
		t.Logf("a group of %d: acquire %d commands %v, release %d %v", n, acquire, acquired, release, released)
		if acquired["evalsha"] != 1 || acquire-1 != 2+2*n {
			t.Errorf("a group of %d: acquire ran %v; want one script of %d commands", n, acquired, 2+2*n)
		}
		if released["evalsha"] != 1 || release-1 != 3*n {
			t.Errorf("a group of %d: release ran %v; want one script of %d commands", n, released, 3*n)
		}
	}
}

// TestAGroupGrantRefusedAfterItsCheckIsUndone: were a member refused in
// the grant pass after its check said it would be granted (the one clock
// of the script rules it out; a member is made to here), the grants this
// call made go back and the group is answered as refused for it.
func TestAGroupGrantRefusedAfterItsCheckIsUndone(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	ctx := testCtx(t)
	before := mustGrant(t, s, req("first", "other", time.Minute, ""))
	mustRelease(t, s, before)
	// acquire_one refuses "second" when asked to grant it.
	const groupLogic = "local holder, max_holders = ARGV[1], ARGV[3]\n"
	wrapped := "local checked_one = acquire_one\n" +
		"acquire_one = function(K, A, M, C)\n" +
		"  if not M and A[7] == 'second' then return {0, lost, 'x', '7', '', 1000, 99, 99, 1, ''} end\n" +
		"  return checked_one(K, A, M, C)\n" +
		"end\n" + groupLogic
	if !strings.Contains(acquireGroupCode, groupLogic) {
		t.Fatalf("acquire_group.lua has no line %q", groupLogic)
	}
	settings := fmt.Sprintf(settingsLine, s.quarantineMS, s.lockDelayMS, s.idleMS, s.sessionKeepMS(), luaString(s.channel))
	script := redis.NewScript(settings + holdersHead + strings.Replace(acquireGroupCode, groupLogic, wrapped, 1))
	args := groupArgs{holder: "g", ttlMS: time.Minute.Milliseconds(), maxHolders: store.DefaultMaxHolders, members: []groupMemberArgs{
		{capacity: 1, weight: 1, name: "first"}, {capacity: 1, weight: 1, name: "second"},
	}}
	v, err := script.Run(ctx, s.client, s.groupKeys([]string{"first", "second"}), args.argv()...).Result()
	if err != nil {
		t.Fatal(err)
	}
	reply, err := decodeAcquireGroup([]store.Lease{{Name: "first", Holder: "g"}, {Name: "second", Holder: "g"}}, v)
	if err != nil || reply.acquired || !reply.members[0].Acquired || reply.members[1].Acquired || reply.members[1].Lease.Holder != "x" {
		t.Fatalf("reply %+v, %v; want refused for second, held by x", reply, err)
	}
	d := mustDescribe(t, s, "first")
	if d.Held || d.LastToken <= before.Token {
		t.Fatalf("Describe(first) = %+v; want its grant released, its counter past %d", d, before.Token)
	}
	if next := mustGrant(t, s, req("first", "other", time.Minute, "")); next.Token <= d.LastToken {
		t.Fatalf("the next token %d after the undone grant's %d", next.Token, d.LastToken)
	}
}

// TestAGroupScriptRefusesANameTwice: the script refuses a name listed
// twice (AcquireGroup does first), since a member's grant takes the fields
// its check read.
func TestAGroupScriptRefusesANameTwice(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	args := groupArgs{holder: "g", ttlMS: 1000, maxHolders: store.DefaultMaxHolders, members: []groupMemberArgs{
		{capacity: 2, weight: 1, name: "twice"}, {capacity: 3, weight: 1, name: "twice"},
	}}
	err := s.scripts.acquireGroup.Run(testCtx(t), s.client, s.groupKeys([]string{"twice", "twice"}), args.argv()...).Err()
	if err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Fatalf("a name listed twice: %v; want the script's error", err)
	}
	if d := mustDescribe(t, s, "twice"); d.Held {
		t.Fatalf("Describe = %+v; want untouched", d)
	}
}

// TestAGroupProvesTheSessionsOfItsMembersGrants: a member holding a grant
// attached to another session whose bound passed makes the group prove
// that session first, as a single acquire does: the grant's bound moves
// out, and the group is refused for it.
func TestAGroupProvesTheSessionsOfItsMembersGrants(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	ctx := testCtx(t)
	sess, err := s.CreateSession(ctx, "alice", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	mustGrant(t, s, inSession("held", "w", sess))
	bound := recordExpires(t, s, "held", "w")
	for time.Now().Before(time.UnixMilli(bound).Add(100 * time.Millisecond)) {
		if _, err := s.RenewSession(ctx, sess.ID, sess.Owner); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res := mustAcquireGroup(t, s, store.GroupRequest{Members: locks("free", "held"), Holder: "g", TTL: time.Minute})
	if res.Acquired || !res.Members[0].Acquired || res.Members[1].Lease.Holder != "w" || res.Members[1].Lease.Session != sess.ID {
		t.Fatalf("the group = %+v; want refused for held, naming w of the session", res)
	}
	if got := recordExpires(t, s, "held", "w"); got <= bound {
		t.Fatalf("w's bound %d, was %d: the session's proof did not reach the name", got, bound)
	}
}

// TestAGroupAttachesAMemberDetachedFromItsSessionAgain: a member's name
// detached from the session since this store attached it (its cached
// attach then refused by the name) is attached again, and the group
// granted; the session's names hold it again.
func TestAGroupAttachesAMemberDetachedFromItsSessionAgain(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	s.detacher.delay = time.Hour // detached by hand below
	ctx := testCtx(t)
	sess, err := s.CreateSession(ctx, "alice", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g := store.GroupRequest{Members: locks("kept", "detached"), Holder: "g", Session: sess.ID, SessionOwner: sess.Owner}
	mustReleaseGroup(t, s, "g", mustGroup(t, s, g))
	check, err := s.session(ctx, "check", sess.ID, "", 0, "")
	if err != nil || check.err != nil {
		t.Fatalf("check: %v, %v", err, check.err)
	}
	if err := s.detachNames(ctx, sess.ID, check, time.Now(), []string{"detached"}); err != nil {
		t.Fatal(err)
	}
	namesKey := s.sessionKeys(sess.ID)[1]
	if s.client.HExists(ctx, namesKey, "detached").Val() {
		t.Fatal("the session's names still hold the detached name")
	}
	if _, ok := s.attachments.proof(sess.ID, sess.Owner, "detached", time.Now()); !ok {
		t.Fatal("no attach of the name cached: the group would attach it anew, never meeting the detach")
	}
	leases := mustGroup(t, s, g)
	for _, l := range leases {
		if l.Session != sess.ID {
			t.Fatalf("lease %+v; want attached to the session", l)
		}
	}
	if !s.client.HExists(ctx, namesKey, "detached").Val() {
		t.Fatal("the group was granted a name its session's names do not hold")
	}
	mustReleaseGroup(t, s, "g", leases)
}

// TestAGroupFindsDataLoss: a group that finds its slot's marker gone
// reports the loss once and is refused for the quarantine.
func TestAGroupFindsDataLoss(t *testing.T) {
	t.Parallel()
	var losses atomic.Int32
	s := newStore(t, nil, Options{Quarantine: time.Minute, OnDataLoss: func(time.Duration) { losses.Add(1) }})
	if err := s.client.Del(testCtx(t), s.marker).Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := s.AcquireGroup(testCtx(t), store.GroupRequest{Members: locks("a", "b"), Holder: "g", TTL: time.Minute})
		if q := asQuarantine(err); q == nil || q.RetryAfter <= 0 || q.RetryAfter > time.Minute {
			t.Fatalf("AcquireGroup after the loss: %v; want a QuarantineError within a minute", err)
		}
	}
	if n := losses.Load(); n != 1 {
		t.Fatalf("OnDataLoss called %d times; want once", n)
	}
	for _, n := range []string{"a", "b"} {
		if d := mustDescribe(t, s, n); d.Held || d.Waiters != 0 {
			t.Fatalf("Describe(%s) = %+v; want untouched", n, d)
		}
	}
}
