package redisstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
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
// still held, stays, and so does one released to waiters; a forgotten
// name taken again is attached again, and a close still ends its grant.
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
	// A name others wait for is granted again at once: not detached.
	awaited := mustGrant(t, s, inSession("awaited", "w", sess))
	mustRefuse(t, s, store.AcquireRequest{Name: "awaited", Holder: "next", TTL: time.Minute, Waiter: "next", WaiterTTL: time.Minute})
	if ok, err := s.Release(ctx, "awaited", "w", awaited.Token); err != nil || !ok {
		t.Fatalf("Release(awaited) = %v, %v", ok, err)
	}

	want := []string{"awaited", "held", "pool"}
	var kept []string
	testwait.Until(t, 20*time.Second, "the session's names to keep only what it holds", func() bool {
		kept = s.client.HKeys(ctx, namesKey).Val()
		slices.Sort(kept)
		return slices.Equal(kept, want)
	})
	for _, name := range jobs {
		k := s.keys(name).lease
		if at, until := detachMark(t, s, name, sess.ID); at <= 0 || until <= time.Now().UnixMilli() {
			t.Errorf("%q: detach mark %d:%d; want the time of the detach and a time to come", name, at, until)
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

// detachMark reads name's mark of session id (settle.lua): its T and until,
// or zeros.
func detachMark(t *testing.T, s *Store, name, id string) (at, until int64) {
	t.Helper()
	v, err := s.client.HGet(testCtx(t), s.keys(name).lease, "d:"+id).Result()
	if err != nil {
		return 0, 0
	}
	a, u, ok := strings.Cut(v, ":")
	at, err1 := strconv.ParseInt(a, 10, 64)
	until, err2 := strconv.ParseInt(u, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("%q: detach mark %q; want T:until", name, v)
	}
	return at, until
}

// TestADetachMarkLastsItsHold: a mark refuses the grants attached before it
// only for as long as one of them can take to land and be believed (the
// session's TTL and two call timeouts, and a second); then it refuses none,
// and the next mark set on the name drops it, so that a name many sessions
// come and go on keeps the marks of the recent ones only.
func TestADetachMarkLastsItsHold(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{CallTimeout: time.Second})
	s.detacher.delay = time.Hour // detached by hand below
	ctx := testCtx(t)
	sess, err := s.CreateSession(ctx, "alice", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	renewing, stop := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		for renewing.Err() == nil {
			_, _ = s.RenewSession(ctx, sess.ID, sess.Owner)
			sleepCtx(renewing, 200*time.Millisecond)
		}
	}()
	defer func() { stop(); <-renewed }()

	const name = "stale"
	req := inSession(name, "w", sess)
	// Used before, so that its key outlives the marks (the retention).
	first := mustGrant(t, s, store.AcquireRequest{Name: name, Holder: "first", TTL: time.Second})
	if ok, err := s.Release(ctx, name, "first", first.Token); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	proofs := proofSet{}
	if err := s.proveOwn(ctx, proofs, req); err != nil {
		t.Fatal(err)
	}
	early := proofs[sess.ID]
	detach := func(id string) {
		t.Helper()
		check, err := s.session(ctx, "check", id, "", 0, "")
		if err != nil || check.err != nil {
			t.Fatalf("check: %v, %v", err, check.err)
		}
		if err := s.detachNames(ctx, id, check, time.Now(), []string{name}); err != nil {
			t.Fatal(err)
		}
	}
	detach(sess.ID)
	grantEarly := func() acquireReply {
		t.Helper()
		args := s.acquireArgs(req, 1, 1)
		args.session, args.sessionTTL, args.attachedAt, args.ttlMS = sess.ID, early.ttl.Milliseconds(), early.attachedAt, 500
		k := s.keys(name)
		v, err := s.scripts.acquire.Run(ctx, s.client, []string{k.lease, k.queue, k.waiters, k.marker}, args.argv()...).Result()
		if err != nil {
			t.Fatal(err)
		}
		reply, err := decodeAcquire(args.asked(req), v)
		if err != nil {
			t.Fatal(err)
		}
		return reply
	}
	if reply := grantEarly(); !reply.detached {
		t.Fatalf("the early attach's grant under the mark: %+v; want refused", reply)
	}
	_, until := detachMark(t, s, name, sess.ID)
	if hold := until - time.Now().UnixMilli(); hold < 3000 || hold > 4100 {
		t.Fatalf("the mark lasts %d ms; want the TTL, two call timeouts and a second (4 s)", hold)
	}
	for time.Now().UnixMilli() <= until+100 {
		time.Sleep(100 * time.Millisecond)
	}
	reply := grantEarly()
	if reply.detached || !reply.result.Acquired {
		t.Fatalf("the early attach's grant once the mark ran out: %+v; want granted", reply)
	}
	if ok, err := s.Release(ctx, name, "w", reply.result.Lease.Token); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}

	// Another session's detach drops the mark that ran out.
	other, err := s.CreateSession(ctx, "bob", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l := mustGrant(t, s, inSession(name, "w2", other))
	if ok, err := s.Release(ctx, name, "w2", l.Token); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	detach(other.ID)
	if at, _ := detachMark(t, s, name, sess.ID); at != 0 {
		t.Errorf("the mark that ran out is still there (T %d)", at)
	}
	if at, _ := detachMark(t, s, name, other.ID); at == 0 {
		t.Errorf("no mark of the second session's detach")
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
