package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

func TestDecodeAcquire(t *testing.T) {
	t.Parallel()
	const at = 1_800_000_000_000
	const sid = "0123456789abcdef0123456789abcdef"
	tests := []struct {
		name    string
		reply   any
		want    acquireReply
		wantErr bool
	}{
		{"quarantined after a loss", []any{int64(-1), int64(1), int64(250)},
			acquireReply{lost: true, quarantined: true, retryAfter: 250 * time.Millisecond}, false},
		{"another capacity", []any{int64(-2), int64(0), int64(5)}, acquireReply{capacity: 5}, false},
		{"the holder cap", []any{int64(-3), int64(0), int64(1024)}, acquireReply{holderLimit: 1024}, false},
		{"granted", []any{int64(1), int64(0), "h", "42", "v", int64(1500), int64(at), int64(0), int64(3), ""},
			acquireReply{result: store.AcquireResult{Acquired: true, Lease: store.Lease{
				Name: "job", Holder: "h", Token: 42, Value: []byte("v"), TTL: 1500 * time.Millisecond, ExpiresAt: time.UnixMilli(at), Weight: 3,
			}}}, false},
		{"refused for a holder", []any{int64(0), int64(0), "h", "42", "", int64(1500), int64(at), int64(at), int64(1), ""},
			acquireReply{result: store.AcquireResult{RetryAt: time.UnixMilli(at), Lease: store.Lease{
				Name: "job", Holder: "h", Token: 42, TTL: 1500 * time.Millisecond, ExpiresAt: time.UnixMilli(at), Weight: 1,
			}}}, false},
		{"refused for older waiters", []any{int64(0), int64(0), "", "", "", int64(0), int64(0), int64(0), int64(0), ""},
			acquireReply{}, false},
		{"not an array", "OK", acquireReply{}, true},
		{"too short", []any{int64(1), int64(0), "h"}, acquireReply{}, true},
		{"a grant without a weight", []any{int64(1), int64(0), "h", "42", "v", int64(1500), int64(at), int64(0), int64(0), ""}, acquireReply{}, true},
		{"a capacity of 0", []any{int64(-2), int64(0), int64(0)}, acquireReply{}, true},
		{"a token that is not a number", []any{int64(1), int64(0), "h", "x", "", int64(1), int64(at), int64(0), int64(1), ""}, acquireReply{}, true},
		{"granted as asked", []any{int64(2), int64(0), "42", int64(at)},
			acquireReply{result: store.AcquireResult{Acquired: true, Lease: store.Lease{
				Name: "job", Holder: "h", Token: 42, Value: []byte("v"), TTL: 1500 * time.Millisecond, ExpiresAt: time.UnixMilli(at), Weight: 3, Session: sid,
			}}}, false},
		{"granted as asked, after a loss", []any{int64(2), int64(1), "42", int64(at)},
			acquireReply{lost: true, result: store.AcquireResult{Acquired: true, Lease: store.Lease{
				Name: "job", Holder: "h", Token: 42, Value: []byte("v"), TTL: 1500 * time.Millisecond, ExpiresAt: time.UnixMilli(at), Weight: 3, Session: sid,
			}}}, false},
		{"granted as asked without an expiry", []any{int64(2), int64(0), "42"}, acquireReply{}, true},
		{"granted as asked under token 0", []any{int64(2), int64(0), "0", int64(at)}, acquireReply{}, true},
		{"an unknown status", []any{int64(3), int64(0), "", "", "", int64(0), int64(0), int64(0), int64(0), ""}, acquireReply{}, true},
		{"granted in a session", []any{int64(1), int64(0), "h", "42", "v", int64(1500), int64(at), int64(0), int64(3), sid},
			acquireReply{result: store.AcquireResult{Acquired: true, Lease: store.Lease{
				Name: "job", Holder: "h", Token: 42, Value: []byte("v"), TTL: 1500 * time.Millisecond, ExpiresAt: time.UnixMilli(at), Weight: 3, Session: sid,
			}}}, false},
		{"proofs needed", []any{int64(-4), int64(0), sid}, acquireReply{need: []string{sid}}, false},
		{"proofs needed of no session", []any{int64(-4), int64(0)}, acquireReply{}, true},
		{"a grant without its session", []any{int64(1), int64(0), "h", "42", "v", int64(1500), int64(at), int64(0), int64(3)}, acquireReply{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			asked := store.Lease{Name: "job", Holder: "h", Value: []byte("v"), TTL: 1500 * time.Millisecond, Weight: 3, Session: sid}
			got, err := decodeAcquire(asked, tc.reply)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got.lost != tc.want.lost || got.quarantined != tc.want.quarantined || got.retryAfter != tc.want.retryAfter ||
				got.capacity != tc.want.capacity || got.holderLimit != tc.want.holderLimit || !slices.Equal(got.need, tc.want.need) ||
				got.result.Acquired != tc.want.result.Acquired || !got.result.RetryAt.Equal(tc.want.result.RetryAt) {
				t.Errorf("decoded %+v, want %+v", got, tc.want)
			}
			sameLease(t, got.result.Lease, tc.want.result.Lease)
		})
	}
}

func TestDecodeRenew(t *testing.T) {
	t.Parallel()
	l, err := decodeRenew("job", []any{int64(1), "h", "7", "v", int64(2000), int64(1_800_000_000_000), int64(2)})
	want := store.Lease{Name: "job", Holder: "h", Token: 7, Value: []byte("v"), TTL: 2 * time.Second, ExpiresAt: time.UnixMilli(1_800_000_000_000), Weight: 2}
	if err != nil {
		t.Fatal(err)
	}
	sameLease(t, l, want)
	if _, err := decodeRenew("job", []any{int64(0)}); !errors.Is(err, store.ErrLeaseNotHeld) {
		t.Errorf("not held: err = %v, want ErrLeaseNotHeld", err)
	}
	if _, err := decodeRenew("job", []any{int64(2)}); !errors.Is(err, store.ErrLeaseInSession) {
		t.Errorf("attached: err = %v, want ErrLeaseInSession", err)
	}
	if _, err := decodeRenew("job", []any{int64(1), "h"}); err == nil || errors.Is(err, store.ErrLeaseNotHeld) {
		t.Errorf("too short: err = %v, want a reply error", err)
	}
}

func TestDecodeDescribe(t *testing.T) {
	t.Parallel()
	d, _, err := decodeDescribe("job", []any{int64(1), "9", int64(2), int64(2), int64(0)})
	if err != nil || d.Held || d.LastToken != 9 || d.Waiters != 2 || d.WaitingWeight != 2 || d.Lease.Holder != "" || d.Capacity != 1 {
		t.Errorf("free name: %+v, %v", d, err)
	}
	const sid = "0123456789abcdef0123456789abcdef"
	d, _, err = decodeDescribe("job", []any{int64(5), "10", int64(0), int64(0), int64(2),
		"a", "9", "", int64(1000), int64(1_800_000_000_000), int64(2), "",
		"b", "10", "", int64(1000), int64(1_800_000_000_000), int64(3), sid})
	if err != nil || !d.Held || d.Lease.Token != 9 || d.Lease.Name != "job" || d.Lease.Value != nil || len(d.Holders) != 2 ||
		d.Holders[1].Holder != "b" || d.Holders[1].Weight != 3 || d.Capacity != 5 || d.Lease.Session != "" || d.Holders[1].Session != sid {
		t.Errorf("held name: %+v, %v", d, err)
	}
	if _, _, err := decodeDescribe("job", []any{int64(1), int64(9), int64(0), int64(0), int64(0)}); err == nil {
		t.Error("a last token that is not a decimal string: no error")
	}
	if _, _, err := decodeDescribe("job", []any{int64(1), "9", int64(0), int64(0), int64(2), "a", "9", "", int64(1000), int64(1), int64(1), ""}); err == nil {
		t.Error("fewer grants than counted: no error")
	}
	if _, need, err := decodeDescribe("job", []any{int64(-4), sid}); err != nil || len(need) != 1 || need[0] != sid {
		t.Errorf("proofs needed: %q, %v", need, err)
	}
}

func TestDecodeCounts(t *testing.T) {
	t.Parallel()
	release := func(v any) (bool, error) {
		ok, session, err := decodeRelease(v)
		if session != "" {
			return false, fmt.Errorf("session %q from %v", session, v)
		}
		return ok, err
	}
	for _, decode := range []func(any) (bool, error){release, decodeDequeue} {
		if ok, err := decode(int64(1)); !ok || err != nil {
			t.Errorf("1: %v, %v", ok, err)
		}
		if ok, err := decode(int64(0)); ok || err != nil {
			t.Errorf("0: %v, %v", ok, err)
		}
		if _, err := decode("1"); err == nil {
			t.Error(`"1": no error`)
		}
	}
}

func TestDecodeWatch(t *testing.T) {
	t.Parallel()
	const at = 1_800_000_000_000
	names := []string{"held", "free"}
	out := make([]store.Description, 2)
	_, err := decodeWatch(names, []any{int64(1), int64(1), "h", "7", "v", int64(1000), int64(at), int64(1), "", int64(1), int64(0)}, out)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Lease{Name: "held", Holder: "h", Token: 7, Value: []byte("v"), TTL: time.Second, ExpiresAt: time.UnixMilli(at), Weight: 1}
	if !out[0].Held || out[1].Held || out[1].Lease.Holder != "" || len(out[0].Holders) != 1 {
		t.Errorf("decoded %+v", out)
	}
	sameLease(t, out[0].Lease, want)
	if _, err := decodeWatch(names, []any{int64(1), int64(1), "h", "7", "v", int64(1000), int64(at), int64(1), ""}, out); err == nil {
		t.Error("a reply for one name of two: no error")
	}
	if _, err := decodeWatch(names, "OK", out); err == nil {
		t.Error("not an array: no error")
	}
	if n, err := decodeRefresh(int64(3)); n != 3 || err != nil {
		t.Errorf("decodeRefresh(3) = %d, %v", n, err)
	}
}

// TestAcquireArgsFollowTheScript: acquireArgs names acquire.lua's ARGV, and
// argv lays them out in the order the script's header lists them, so that
// an argument added on one side and not the other fails here, not in a
// grant.
func TestAcquireArgsFollowTheScript(t *testing.T) {
	t.Parallel()
	// One header line per argument: "-- ARGV[i] <what>", in this order.
	want := []string{"holder", "ttl (ms", "value", "capacity", "weight", "max holders", "name", "session id", "the session's ttl",
		"the attach's time", "proofs", "waiter id", "waiter ttl", "token (decimal)", `"1" to keep`}
	var got []string
	for _, line := range strings.Split(acquireSrc, "\n") {
		if rest, ok := strings.CutPrefix(line, "-- ARGV["); ok {
			i, desc, _ := strings.Cut(rest, "] ")
			if n, err := strconv.Atoi(i); err != nil || n != len(got)+1 {
				t.Fatalf("header line %q: ARGV[%d] expected", line, len(got)+1)
			}
			got = append(got, desc)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("the header lists %d ARGV, acquireArgs %d", len(got), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("ARGV[%d] is %q in the header, %q in acquireArgs", i+1, got[i], want[i])
		}
	}
	a := acquireArgs{holder: "h", ttlMS: 2, value: []byte("v"), capacity: 4, weight: 5, maxHolders: 6, name: "n",
		session: "s", sessionTTL: 9, attachedAt: 10, proofs: "p", waiter: "w", waiterTTL: int64(13), expected: "14", keepValue: "1"}
	vals := a.argv()
	if len(vals) != len(want) {
		t.Fatalf("argv has %d values, the header %d", len(vals), len(want))
	}
	for i, v := range []any{"h", int64(2), []byte("v"), int64(4), int64(5), 6, "n", "s", int64(9), int64(10), "p", "w", int64(13), "14", "1"} {
		if fmt.Sprint(vals[i]) != fmt.Sprint(v) {
			t.Errorf("argv[%d] = %v, want %v", i, vals[i], v)
		}
	}

	// The trailing arguments that are "" are left out: the script reads
	// them as "".
	own := acquireArgs{holder: "h", ttlMS: 2, capacity: 1, weight: 1, maxHolders: 6, name: "n", waiterTTL: int64(13)}
	for _, tc := range []struct {
		what string
		args func(acquireArgs) acquireArgs
		n    int
	}{
		{"a grant of its own", func(a acquireArgs) acquireArgs { return a }, 7},
		{"attached", func(a acquireArgs) acquireArgs { a.session, a.sessionTTL, a.attachedAt = "s", 9, 10; return a }, 10},
		{"attached, with proofs of others' sessions", func(a acquireArgs) acquireArgs {
			a.session, a.sessionTTL, a.attachedAt, a.proofs = "s", 9, 10, "p"
			return a
		}, 11},
		{"of its own, with proofs of others' sessions", func(a acquireArgs) acquireArgs { a.proofs = "p"; return a }, 11},
		{"a waiter", func(a acquireArgs) acquireArgs { a.waiter = "w"; return a }, 13},
		{"a renewal by token", func(a acquireArgs) acquireArgs { a.expected = "14"; return a }, 14},
		{"keeping the value", func(a acquireArgs) acquireArgs { a.keepValue = "1"; return a }, 15},
	} {
		if got := len(tc.args(own).argv()); got != tc.n {
			t.Errorf("%s: %d arguments, want %d", tc.what, got, tc.n)
		}
	}
}

// TestLuaStringReadsBack: the store's channel, a constant of its scripts,
// reads back in Lua as it is, whatever bytes its key prefix holds.
func TestLuaStringReadsBack(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	for _, s := range []string{"", "coordinator:events", `a"b'c\d`, "new\nline", "\x00\x01\xff", "é ü 中", "]]--[[", "9 1"} {
		got, err := c.Eval(testCtx(t), "local s = "+luaString(s)+"\nreturn s", nil).Text()
		if err != nil || got != s {
			t.Errorf("%q as %s reads back as %q, %v", s, luaString(s), got, err)
		}
	}
}

func TestDecodeAcquireGroup(t *testing.T) {
	t.Parallel()
	const at = 1_800_000_000_000
	const sid = "0123456789abcdef0123456789abcdef"
	asked := []store.Lease{{Name: "a", Holder: "h", TTL: time.Second, Session: sid}, {Name: "b", Holder: "h", TTL: time.Second, Session: sid}}
	free := []any{int64(1), "", "", "", int64(0), int64(0), int64(0), int64(0), ""}
	refused := func(members ...[]any) []any {
		return slices.Concat(append([][]any{{int64(0), int64(0)}}, members...)...)
	}
	tests := []struct {
		name    string
		reply   any
		check   func(groupReply) bool
		wantErr bool
	}{
		{"quarantined", []any{int64(-1), int64(1), int64(250)}, func(g groupReply) bool {
			return g.lost && g.quarantined && g.retryAfter == 250*time.Millisecond
		}, false},
		{"another capacity, naming the second member", []any{int64(-2), int64(0), int64(2), int64(5)}, func(g groupReply) bool {
			return g.member == 1 && g.capacity == 5
		}, false},
		{"the holder cap", []any{int64(-3), int64(0), int64(1), int64(1024)}, func(g groupReply) bool {
			return g.member == 0 && g.holderLimit == 1024
		}, false},
		{"proofs needed", []any{int64(-4), int64(0), sid}, func(g groupReply) bool { return slices.Equal(g.need, []string{sid}) }, false},
		{"detached", []any{int64(-5), int64(0), int64(2)}, func(g groupReply) bool { return g.detached && g.member == 1 }, false},
		{"granted and renewed", []any{int64(1), int64(0), int64(at), int64(2), "42", "1", int64(1), "7", int64(3)}, func(g groupReply) bool {
			want := []store.Lease{
				{Name: "a", Holder: "h", Token: 42, TTL: time.Second, ExpiresAt: time.UnixMilli(at), Weight: 1, Session: sid},
				{Name: "b", Holder: "h", Token: 7, TTL: time.Second, ExpiresAt: time.UnixMilli(at), Weight: 3, Session: sid},
			}
			return g.acquired && equalLeases(g.leases, want) && slices.Equal(g.fresh, []bool{true, false})
		}, false},
		{"refused for the second member", refused(free, []any{int64(0), "x", "9", "", int64(1500), int64(at), int64(at), int64(1), ""}), func(g groupReply) bool {
			return !g.acquired && g.members[0].Acquired && g.members[0].Lease.Holder == "" && !g.members[1].Acquired &&
				g.members[1].Lease.Holder == "x" && g.members[1].Lease.Token == 9 && g.members[1].RetryAt.Equal(time.UnixMilli(at))
		}, false},
		{"refused for older waiters", refused(free, []any{int64(0), "", "", "", int64(0), int64(0), int64(0), int64(0), ""}), func(g groupReply) bool {
			return !g.members[1].Acquired && g.members[1].Lease.Holder == "" && g.members[1].RetryAt.IsZero()
		}, false},
		{"refused with no member in the way", refused(free, free), nil, true},
		{"a member not in the way naming a holder", refused([]any{int64(1), "x", "9", "", int64(1), int64(1), int64(0), int64(1), ""},
			[]any{int64(0), "", "", "", int64(0), int64(0), int64(0), int64(0), ""}), nil, true},
		{"a refusal of one member of two", refused(free), nil, true},
		{"a grant of one member of two", []any{int64(1), int64(0), int64(at), int64(2), "42", int64(1)}, nil, true},
		{"a grant under token 0", []any{int64(1), int64(0), int64(at), int64(2), "0", int64(1), int64(2), "7", int64(1)}, nil, true},
		{"a grant of status 3", []any{int64(1), int64(0), int64(at), int64(3), "42", int64(1), int64(2), "7", int64(1)}, nil, true},
		{"a member index of 0", []any{int64(-5), int64(0), int64(0)}, nil, true},
		{"a member index past the members", []any{int64(-2), int64(0), int64(3), int64(5)}, nil, true},
		{"an unknown status", []any{int64(2), int64(0)}, nil, true},
		{"not an array", "OK", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeAcquireGroup(asked, tc.reply)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tc.wantErr)
			}
			if err == nil && !tc.check(got) {
				t.Errorf("decoded %+v", got)
			}
		})
	}
}

func TestDecodeReleaseGroup(t *testing.T) {
	t.Parallel()
	const sid = "0123456789abcdef0123456789abcdef"
	released, sessions, err := decodeReleaseGroup(3, []any{int64(1), int64(0), sid})
	if err != nil || !slices.Equal(released, []bool{true, false, true}) || !slices.Equal(sessions, []string{"", "", sid}) {
		t.Fatalf("decoded %v, %q, %v", released, sessions, err)
	}
	for _, bad := range []any{[]any{int64(1)}, []any{int64(1), int64(2), int64(0)}, []any{int64(1), "x", int64(0)}, int64(1)} {
		if _, _, err := decodeReleaseGroup(3, bad); err == nil {
			t.Errorf("decodeReleaseGroup(3, %v): no error", bad)
		}
	}
}

// TestGroupArgsFollowTheScript: groupArgs lays acquire_group.lua's ARGV out
// in the order its header lists them: the common ones, then each member's
// 3 (4 with a session).
func TestGroupArgsFollowTheScript(t *testing.T) {
	t.Parallel()
	want := []string{"holder", "ttl (ms", "max holders", "session id", "the session's ttl", "proofs", "waiter id", "waiter ttl", "the acquisition's claim"}
	var got []string
	for _, line := range strings.Split(acquireGroupSrc, "\n") {
		if rest, ok := strings.CutPrefix(line, "-- ARGV["); ok {
			i, desc, _ := strings.Cut(rest, "] ")
			if n, err := strconv.Atoi(i); err == nil && n == len(got)+1 {
				got = append(got, desc)
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("the header lists %d common ARGV, groupArgs %d", len(got), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("ARGV[%d] is %q in the header, %q in groupArgs", i+1, got[i], want[i])
		}
	}
	if !strings.Contains(acquireGroupSrc, "-- ARGV[10..] per member: capacity, weight, name and, with a session, the") {
		t.Error("the header does not list a member's arguments as capacity, weight, name and attach time")
	}
	members := []groupMemberArgs{{capacity: 2, weight: 1, name: "a", attachedAt: 11}, {capacity: 3, weight: 2, name: "b", attachedAt: 12}}
	own := groupArgs{holder: "h", ttlMS: 2, maxHolders: 3, proofs: "p", waiter: "w", waiterTTL: 8, claim: "c", members: members}
	if got, want := fmt.Sprint(own.argv()), fmt.Sprint([]any{"h", 2, 3, "", "", "p", "w", 8, "c", 2, 1, "a", 3, 2, "b"}); got != want {
		t.Errorf("argv of a group of its own = %s, want %s", got, want)
	}
	attached := own
	attached.session, attached.sessionTTL, attached.waiter = "s", 5, ""
	if got, want := fmt.Sprint(attached.argv()), fmt.Sprint([]any{"h", 2, 3, "s", 5, "p", "", "", "c", 2, 1, "a", 11, 3, 2, "b", 12}); got != want {
		t.Errorf("argv of an attached group = %s, want %s", got, want)
	}
}
