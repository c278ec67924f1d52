package redisstore

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/store"
)

// TestReleasedNamesLeaveTheSessionsNamesInSeconds: a session that locks a
// new name for each job (the SDK's default session) keeps in its names
// only what it holds, seconds after each release, where each name used to
// stay until a refresh at least half an hour later, about 90 bytes each
// (the soak's growth). A name still held, or one of a semaphore's shares
// still held, stays; a forgotten name taken again is attached again, and a
// close still ends its grant.
func TestReleasedNamesLeaveTheSessionsNamesInSeconds(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	s.detacher.delay = 100 * time.Millisecond
	ctx := testCtx(t)
	sess, err := s.CreateSession(ctx, "alice", 30*time.Second) // alive through the test on a loaded machine
	if err != nil {
		t.Fatal(err)
	}
	namesKey := s.sessionKeys(sess.ID)[1]
	jobs := append([]string{"job/0", "job/1"}, namesOutside(sess, 8)...)
	for _, name := range jobs {
		l := mustGrant(t, s, inSession(name, "w", sess))
		if ok, err := s.Release(ctx, name, "w", l.Token); err != nil || !ok {
			t.Fatalf("Release(%s) = %v, %v", name, ok, err)
		}
	}
	mustGrant(t, s, inSession("held", "w", sess))
	share := inSession("pool", "w1", sess)
	share.Capacity = 2
	mustGrant(t, s, share)
	share.Holder = "w2"
	second := mustGrant(t, s, share)
	if ok, err := s.Release(ctx, "pool", "w2", second.Token); err != nil || !ok {
		t.Fatalf("Release of one share = %v, %v", ok, err)
	}

	want := []string{"held", "pool"}
	var kept []string
	testwait.Until(t, 20*time.Second, "the session's names to keep only what it holds", func() bool {
		kept = s.client.HKeys(ctx, namesKey).Val()
		slices.Sort(kept)
		return slices.Equal(kept, want)
	})
	mark := "d:" + sess.ID
	for _, name := range jobs {
		k := s.keys(name).lease
		if at, err := s.client.HGet(ctx, k, mark).Int64(); err != nil || at <= 0 {
			t.Errorf("%q: detach mark %d, %v; want the time of the detach", name, at, err)
		}
		if pttl := s.client.PTTL(ctx, k).Val(); pttl > time.Duration(s.idleMS)*time.Millisecond*5/4 {
			t.Errorf("%q: its key lives %s; want the retention at most (and a quarter)", name, pttl)
		}
	}

	// Taken again: this store's cached attach is refused, it attaches
	// again, and the close finds the grant.
	again := mustGrant(t, s, inSession(jobs[0], "w", sess))
	if _, err := s.client.HGet(ctx, namesKey, jobs[0]).Result(); err != nil {
		t.Fatalf("%q granted again is not among the session's names: %v", jobs[0], err)
	}
	if err := s.CloseSession(ctx, sess.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	for _, next := range []store.AcquireRequest{
		{Name: jobs[0], Holder: "next", TTL: time.Minute},
		{Name: "held", Holder: "next", TTL: time.Minute},
		{Name: "pool", Holder: "next", TTL: time.Minute, Capacity: 2, Weight: 2},
	} {
		res, err := s.Acquire(ctx, next)
		if err != nil || !res.Acquired || (next.Name == jobs[0] && res.Lease.Token <= again.Token) {
			t.Errorf("after the close, %q = %+v, %v; want all of it granted", next.Name, res, err)
		}
	}
}

// TestAGrantAttachedBeforeADetachIsRefused: a grant whose attach came
// before its name was detached from the session (one delayed on its way,
// or one made with a cached attach) would be missing from the session's
// names, where its close and refresh find it: the name refuses it, and the
// store attaches again, which puts the name back. An attach after a
// detach is always later than it, even when the slot's clock stepped back.
func TestAGrantAttachedBeforeADetachIsRefused(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	s.detacher.delay = time.Hour // detached by hand below
	ctx := testCtx(t)
	sess, err := s.CreateSession(ctx, "alice", 30*time.Second) // alive through the test on a loaded machine
	if err != nil {
		t.Fatal(err)
	}
	const name = "delayed"
	req := inSession(name, "w", sess)
	namesKey := s.sessionKeys(sess.ID)[1]

	// The attach of a grant still on its way.
	proofs := proofSet{}
	if err := s.proveOwn(ctx, proofs, req); err != nil {
		t.Fatal(err)
	}
	early := proofs[sess.ID]

	// Meanwhile the name is detached, and forgotten.
	check, err := s.session(ctx, "check", sess.ID, "", 0, "")
	if err != nil || check.err != nil {
		t.Fatalf("check: %v, %v", err, check.err)
	}
	if err := s.detachNames(ctx, sess.ID, check, time.Now(), []string{name}); err != nil {
		t.Fatal(err)
	}
	if n := s.client.HLen(ctx, namesKey).Val(); n != 0 {
		t.Fatalf("the session's names hold %d after the detach; want none", n)
	}

	// The delayed grant lands: refused, nothing changed.
	args := s.acquireArgs(req, 1, 1)
	args.session, args.sessionTTL, args.attachedAt = sess.ID, early.ttl.Milliseconds(), early.attachedAt
	args.ttlMS, _ = proofs.left(sess.ID, time.Now())
	k := s.keys(name)
	v, err := s.scripts.acquire.Run(ctx, s.client, []string{k.lease, k.queue, k.waiters, k.marker}, args.argv()...).Result()
	if err != nil {
		t.Fatal(err)
	}
	if reply, err := decodeAcquire(args.asked(req), v); err != nil || !reply.detached {
		t.Fatalf("the delayed grant: %+v, %v; want refused as detached", reply, err)
	}
	if fields := s.client.HGetAll(ctx, k.lease).Val(); fields["h:w"] != "" {
		t.Fatalf("the refused grant left a record: %v", fields)
	}

	// Through the store (its cached attach is the early one): attached
	// again, granted, known.
	l := mustGrant(t, s, req)
	at, err := s.client.HGet(ctx, namesKey, name).Int64()
	if err != nil || at <= early.attachedAt {
		t.Fatalf("the session's names have %q at %d (%v); want it back, after %d", name, at, err, early.attachedAt)
	}
	if ok, err := s.Release(ctx, name, "w", l.Token); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}

	// A detach at a time ahead of the slot's clock (a clock that steps
	// back after it): the next attach is still later than it.
	ahead := check.at + time.Hour.Milliseconds()
	if _, err := s.session(ctx, "prune", sess.ID, "", ahead, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.proveOwn(ctx, proofs, inSession("other", "w", sess)); err != nil {
		t.Fatal(err)
	}
	if got := proofs[sess.ID].attachedAt; got != ahead+1 {
		t.Fatalf("an attach after a prune at %d recorded %d; want %d", ahead, got, ahead+1)
	}
	if got, err := s.client.HGet(ctx, namesKey, "other").Result(); err != nil || got != strconv.FormatInt(ahead+1, 10) {
		t.Fatalf("the session's names have other at %q (%v); want %d", got, err, ahead+1)
	}
}
