package redisstore

import (
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// TestEveryKeyExpires checks what the conformance suite sees only as
// "forgotten": every key a name leaves behind has an expiry, the lease key's
// (which keeps the fencing counter) following the name's last use by the
// idle retention and up to a quarter of it more (a script that moves it
// sets it an eighth of a retention past its need, and the next ones leave
// it while it covers theirs by no more than a quarter), or its observation
// mark when that lasts longer; only the data-loss marker is kept for ever.
func TestEveryKeyExpires(t *testing.T) {
	t.Parallel()
	const idle, lockDelay = 10 * time.Second, time.Second
	s := newStore(t, nil, Options{IdleNameTTL: idle, LockDelay: lockDelay})
	ctx := testCtx(t)
	k := s.keys("job")
	// pttl checks that key expires between least and most from now.
	pttl := func(s *Store, key string, least, most time.Duration) {
		t.Helper()
		// The call that set it was made a moment ago.
		if got := s.client.PTTL(ctx, key).Val(); got > most || got < least-time.Second {
			t.Errorf("PTTL %s = %s, want %s to %s", key, got, least, most)
		}
	}

	l := mustGrant(t, s, req("job", "a", 5*time.Second, "v"))
	pttl(s, k.lease, 5*time.Second+lockDelay+idle, 5*time.Second+lockDelay+idle+idle/4)
	l, err := s.Renew(ctx, "job", "a", l.Token, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pttl(s, k.lease, 20*time.Second+lockDelay+idle, 20*time.Second+(lockDelay+idle)*5/4)
	mustGrant(t, s, store.AcquireRequest{Name: "job", Holder: "a", TTL: 30 * time.Second, KeepValue: true})
	pttl(s, k.lease, 30*time.Second+lockDelay+idle, 30*time.Second+lockDelay+idle+idle/4)
	mustRefuse(t, s, store.AcquireRequest{Name: "job", Holder: "w", TTL: time.Second, Waiter: "w", WaiterTTL: 40 * time.Second})
	pttl(s, k.lease, 41*time.Second, 30*time.Second+lockDelay+idle+idle/4) // it outlives the waiter's deadline, 40s
	if err := s.RefreshWaiters(ctx, "job", []string{"w"}, 50*time.Second); err != nil {
		t.Fatal(err)
	}
	pttl(s, k.queue, 50*time.Second, 50*time.Second)
	pttl(s, k.waiters, 50*time.Second, 50*time.Second)
	if _, err := s.Watch(ctx, []string{"job"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	pttl(s, k.lease, time.Minute, time.Minute) // the observation mark lasts longer
	mustRelease(t, s, l)
	pttl(s, k.lease, time.Minute, time.Minute)

	// A release brings the expiry its grant set down to one retention when
	// that is further out than a quarter more (here: a TTL and lock delay
	// of 6s, past an eighth of the retention), and leaves it otherwise.
	other := s.keys("other")
	mustRelease(t, s, mustGrant(t, s, req("other", "a", 5*time.Second, "v")))
	pttl(s, other.lease, idle, idle)
	undelayed := newStore(t, nil, Options{IdleNameTTL: idle})
	short := undelayed.keys("short")
	mustRelease(t, undelayed, mustGrant(t, undelayed, req("short", "a", time.Second, "v")))
	pttl(undelayed, short.lease, time.Second+idle+idle/8, time.Second+idle+idle/8)

	var keys int
	iter := s.client.Scan(ctx, 0, globEscape(s.prefix)+":*", 100).Iterator()
	for iter.Next(ctx) {
		keys++
		key := iter.Val()
		if key == k.marker {
			continue
		}
		if d := s.client.PTTL(ctx, key).Val(); d <= 0 {
			t.Errorf("key %s has no expiry (PTTL %s)", key, d)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if keys != 5 { // job's lease, queue and waiters, other's lease, the marker
		t.Errorf("%d keys, want 5", keys)
	}
}

// TestWatchMarksOnlyWhenDue: a Watch marks a name again only when the mark
// it set is past half its life, and never shortens a longer mark. A mark is
// the lease key's 'watched' field: the time it lasts until.
func TestWatchMarksOnlyWhenDue(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	ctx := testCtx(t)
	k := s.keys("job")
	watch := func(ttl time.Duration) {
		t.Helper()
		if _, err := s.Watch(ctx, []string{"job"}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	left := func() time.Duration {
		t.Helper()
		until, err := s.client.HGet(ctx, k.lease, "watched").Int64()
		if err != nil {
			return 0
		}
		now, err := s.client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if pttl := s.client.PTTL(ctx, k.lease).Val(); time.Duration(until-now.UnixMilli())*time.Millisecond > pttl+time.Second {
			t.Errorf("the mark lasts until %d, past the key's expiry (PTTL %s)", until, pttl)
		}
		return time.Duration(until-now.UnixMilli()) * time.Millisecond
	}
	setLeft := func(d time.Duration) {
		t.Helper()
		now, err := s.client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.client.HSet(ctx, k.lease, "watched", now.Add(d).UnixMilli()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	watch(time.Minute)
	setLeft(10 * time.Second)
	watch(time.Minute) // not due: this store marked it a moment ago
	if d := left(); d > 10*time.Second {
		t.Errorf("mark left after a Watch that was not due = %s, want the 10s left", d)
	}
	s.marks.forget() // as after a broken subscription
	watch(time.Minute)
	if d := left(); d < 50*time.Second {
		t.Errorf("mark left after a forgotten mark = %s, want about a minute", d)
	}
	s.marks.forget()
	watch(5 * time.Second) // another coordinator's longer mark stays
	if d := left(); d < 50*time.Second {
		t.Errorf("mark left after a shorter mark = %s, want the minute kept", d)
	}
	// A mark lost without this store knowing (say, deleted by hand) comes
	// back once the one it remembers is past half its life.
	s.marks.forget()
	watch(100 * time.Millisecond)
	if err := s.client.HDel(ctx, k.lease, "watched").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
	watch(100 * time.Millisecond)
	if d := left(); d <= 0 {
		t.Errorf("the mark was not set again once due")
	}
}
