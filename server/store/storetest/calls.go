package storetest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// testKeepValue: a lock call (KeepValue) by the holder of an election's name
// renews the lease without erasing the value the leader proclaimed; a fresh
// grant with KeepValue stores the request's value.
func testKeepValue(t *testing.T, s Subject) {
	ctx := context.Background()
	elected := acquire(t, s, store.AcquireRequest{Name: "election", Holder: "a", Value: []byte("leader-a")}).Lease
	c := s.Changes("election")
	defer c.Cancel()
	drain(c)

	res := acquire(t, s, store.AcquireRequest{Name: "election", Holder: "a", KeepValue: true})
	if !res.Acquired || res.Lease.Token != elected.Token || !bytes.Equal(res.Lease.Value, []byte("leader-a")) {
		t.Fatalf("lock call by the leader = %+v; want granted with token %d and value %q", res, elected.Token, "leader-a")
	}
	if d, err := s.Describe(ctx, "election"); err != nil || !bytes.Equal(d.Lease.Value, []byte("leader-a")) {
		t.Fatalf("Describe after the lock call = %+v, %v; want value %q", d, err, "leader-a")
	}
	if ds, err := s.Watch(ctx, []string{"election"}, longTTL); err != nil || !bytes.Equal(ds[0].Lease.Value, []byte("leader-a")) {
		t.Fatalf("Watch after the lock call = %+v, %v; want value %q", ds, err, "leader-a")
	}

	fresh := acquire(t, s, store.AcquireRequest{Name: "lock", Holder: "a", Value: []byte("v"), KeepValue: true})
	if !fresh.Acquired || !bytes.Equal(fresh.Lease.Value, []byte("v")) {
		t.Fatalf("fresh grant with KeepValue = %+v; want value %q", fresh, "v")
	}
}

// testAcquireWithToken: an acquire that names a token (a leader proclaiming
// in its term) renews that grant and replaces its value; once the grant is
// gone it is refused, neither granting a new term nor queuing, even with a
// waiter id.
func testAcquireWithToken(t *testing.T, s Subject) {
	ctx := context.Background()
	term := acquire(t, s, store.AcquireRequest{Name: "e", Holder: "a", Value: []byte("v1"), TTL: shortTTL}).Lease
	res := acquire(t, s, store.AcquireRequest{Name: "e", Holder: "a", Value: []byte("v2"), TTL: shortTTL, Token: term.Token})
	if !res.Acquired || res.Lease.Token != term.Token || !bytes.Equal(res.Lease.Value, []byte("v2")) {
		t.Fatalf("proclaim in the term = %+v; want term %d with value v2", res, term.Token)
	}
	for _, tc := range []struct {
		what string
		req  store.AcquireRequest
	}{
		{"another term's token", store.AcquireRequest{Name: "e", Holder: "a", Token: term.Token + 1}},
		{"another holder", store.AcquireRequest{Name: "e", Holder: "b", Token: term.Token}},
		{"a free name", store.AcquireRequest{Name: "free", Holder: "a", Token: term.Token, Waiter: "w"}},
	} {
		tc.req.TTL = longTTL
		if res := acquire(t, s, tc.req); res.Acquired || res.Lease.Holder != "" {
			t.Fatalf("acquire with %s = %+v; want refused without a holder", tc.what, res)
		}
	}
	if d, err := s.Describe(ctx, "free"); err != nil || d.Held || d.Waiters != 0 {
		t.Fatalf("Describe(free) after a refused acquire with a token = %+v, %v; want free with no waiters", d, err)
	}
	pass(s, shortTTL+margin)
	if res := acquire(t, s, store.AcquireRequest{Name: "e", Holder: "a", TTL: longTTL, Token: term.Token}); res.Acquired {
		t.Fatalf("acquire with the token of a term that expired = %+v; want refused", res)
	}
	if d, err := s.Describe(ctx, "e"); err != nil || d.Held {
		t.Fatalf("Describe(e) after a refused renewal of an ended term = %+v, %v; want no new term", d, err)
	}
}

// testRefreshWaiters: one call keeps the listed waiters queued, in their
// places; it ignores waiters that are not queued, and never revives one whose
// deadline passed.
func testRefreshWaiters(t *testing.T, s Subject) {
	ctx := context.Background()
	owner := mustAcquire(t, s, "job", "owner")
	const waiterTTL = time.Second
	for _, w := range []string{"w1", "w2", "w3"} {
		acquire(t, s, store.AcquireRequest{Name: "job", Holder: w, Waiter: w, WaiterTTL: waiterTTL})
	}
	if err := s.RefreshWaiters(ctx, "job", []string{"w1", "w3", "never-queued"}, longTTL); err != nil {
		t.Fatal(err)
	}
	pass(s, waiterTTL+margin)
	if d, err := s.Describe(ctx, "job"); err != nil || d.Waiters != 2 {
		t.Fatalf("Describe after w2's deadline = %+v, %v; want the 2 refreshed waiters", d, err)
	}
	if err := s.RefreshWaiters(ctx, "job", []string{"w2"}, longTTL); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Describe(ctx, "job"); err != nil || d.Waiters != 2 {
		t.Fatalf("Describe after refreshing a dead waiter = %+v, %v; want 2 waiters", d, err)
	}
	mustRelease(t, s, owner)
	if res := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w3", Waiter: "w3"}); res.Acquired {
		t.Fatal("w3 overtook w1: a refresh moved a waiter's place")
	}
	w1 := acquire(t, s, store.AcquireRequest{Name: "job", Holder: "w1", Waiter: "w1"})
	if !w1.Acquired {
		t.Fatal("the first refreshed waiter was not granted")
	}
	if d, err := s.Describe(ctx, "job"); err != nil || d.Waiters != 1 {
		t.Fatalf("Describe = %+v, %v; want only w3 waiting (a listed waiter that was not queued stays out)", d, err)
	}
	if err := s.RefreshWaiters(ctx, "job", []string{"w3"}, 0); err == nil {
		t.Error("RefreshWaiters with a zero ttl: no error")
	}
	if err := s.RefreshWaiters(ctx, "nobody-waits", []string{"w"}, longTTL); err != nil {
		t.Errorf("RefreshWaiters of a name without a queue: %v", err)
	}
}

// testWatchMany: one Watch describes every name, in the order given, and
// marks them all, so that a change of any is announced.
func testWatchMany(t *testing.T, s Subject) {
	ctx := context.Background()
	const n = 500 // more than one batch of a store that batches
	names := make([]string, n)
	held := map[string]store.Lease{}
	for i := range names {
		names[i] = fmt.Sprintf("election-%03d", i)
		if i%3 == 0 {
			held[names[i]] = acquire(t, s, store.AcquireRequest{Name: names[i], Holder: "h", Value: []byte(names[i])}).Lease
		}
	}
	ds, err := s.Watch(ctx, names, longTTL)
	if err != nil || len(ds) != n {
		t.Fatalf("Watch of %d names = %d descriptions, %v", n, len(ds), err)
	}
	for i, d := range ds {
		l, ok := held[names[i]]
		if d.Held != ok || (ok && (d.Lease.Name != l.Name || d.Lease.Token != l.Token || !bytes.Equal(d.Lease.Value, l.Value) ||
			!closeTo(d.Lease.ExpiresAt, l.ExpiresAt))) {
			t.Fatalf("description %d = %+v; want %+v (held %v)", i, d, l, ok)
		}
	}
	last := names[n-1]
	c := s.Changes(last)
	defer c.Cancel()
	// Again: names marked a moment ago stay marked.
	if _, err := s.Watch(ctx, names, longTTL); err != nil {
		t.Fatal(err)
	}
	drain(c)
	mustAcquire(t, s, last, "a")
	waitChange(t, c, "grant of a watched name")
	if ds, err := s.Watch(ctx, nil, longTTL); err != nil || len(ds) != 0 {
		t.Errorf("Watch of no names = %+v, %v", ds, err)
	}
}

func testPing(t *testing.T, s Subject) {
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}
