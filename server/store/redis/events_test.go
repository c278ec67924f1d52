package redisstore

import (
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// TestSubscribe runs alone: it checks that Close leaves no goroutine behind.
func TestSubscribe(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs after the store's and client's cleanups

	s := newStore(t, nil, Options{})
	r1, r2 := newRecorder(), newRecorder()
	s.Subscribe(r1.notify)
	unsub2 := s.Subscribe(r2.notify)
	waitSubscribed(t, s, r1)
	r2.drain()
	watch(t, s, "job", "fence1", "fence2")

	// fence is a later event: once r1 saw it, every earlier event was
	// delivered to every subscriber.
	fence := func(name string) {
		t.Helper()
		l := mustGrant(t, s, req(name, "f", time.Minute, ""))
		r1.waitFor(t, name)
		mustRelease(t, s, l)
		r1.waitFor(t, name)
	}
	expect := func(what string, r *recorder, want ...string) {
		t.Helper()
		var got []string
		for len(r.ch) > 0 {
			got = append(got, <-r.ch)
		}
		if len(got) != len(want) {
			t.Errorf("%s: notified %q, want %q", what, got, want)
			return
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: notified %q, want %q", what, got, want)
				return
			}
		}
	}

	l := mustGrant(t, s, req("job", "a", time.Minute, "v1"))
	r1.waitFor(t, "job")
	r2.waitFor(t, "job")
	mustGrant(t, s, req("job", "a", time.Minute, "v1")) // same value: nothing to tell
	mustGrant(t, s, req("job", "a", time.Minute, "v2")) // re-valued
	r1.waitFor(t, "job")
	r2.waitFor(t, "job")
	fence("fence1")
	expect("after re-acquire", r1)
	r2.drain()

	if _, err := s.Renew(testCtx(t), "job", "a", l.Token, time.Minute); err != nil { // nothing to tell
		t.Fatal(err)
	}
	unsub2()
	unsub2() // twice is harmless
	mustRelease(t, s, l)
	r1.waitFor(t, "job")
	fence("fence2")
	expect("unsubscribed", r2)
	expect("after release", r1)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Subscribe(r1.notify)() // after Close: a no-op
}

// TestSubscribeSurvivesBrokenConnection cuts the subscription's connection:
// the store subscribes again and reports that events may have been lost.
func TestSubscribeSurvivesBrokenConnection(t *testing.T) {
	t.Parallel()
	p := newProxy(t, testRedisOptions(t).Addr)
	c := newClient(t, func(o *redis.Options) { o.Addr = p.addr() })
	lost := make(chan struct{}, 10)
	s := newStore(t, c, Options{OnEventsLost: func() { lost <- struct{}{} }})
	rec := newRecorder()
	defer s.Subscribe(rec.notify)()
	waitSubscribed(t, s, rec)
	watch(t, s, "job")

	p.dropConns()
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("OnEventsLost not called within 5s of a broken subscription")
	}
	l := mustGrant(t, s, req("job", "a", time.Minute, ""))
	rec.waitFor(t, "job")
	mustRelease(t, s, l)
	rec.waitFor(t, "job")
}

// TestSubscribeSurvivesSilentConnection black-holes the subscription's
// connection without closing it: the health check's unanswered ping makes the
// store subscribe again on a new connection.
func TestSubscribeSurvivesSilentConnection(t *testing.T) {
	t.Parallel()
	p := newProxy(t, testRedisOptions(t).Addr)
	// Pooled connections are frozen too: a short read timeout lets their
	// commands fail over to new connections quickly.
	c := newClient(t, func(o *redis.Options) { o.Addr = p.addr(); o.ReadTimeout = 300 * time.Millisecond })
	lost := make(chan struct{}, 10)
	s := newStore(t, c, Options{OnEventsLost: func() { lost <- struct{}{} }})
	s.events.health = 50 * time.Millisecond
	rec := newRecorder()
	defer s.Subscribe(rec.notify)()
	waitSubscribed(t, s, rec)
	watch(t, s, "job")

	time.Sleep(200 * time.Millisecond) // a few answered pings change nothing
	if len(lost) != 0 {
		t.Fatal("OnEventsLost called while the subscription was healthy")
	}
	p.freezeConns()
	start := time.Now()
	select {
	case <-lost:
		t.Logf("subscribed again after %s", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("OnEventsLost not called within 5s of a silent subscription")
	}
	l := mustGrant(t, s, req("job", "a", time.Minute, ""))
	rec.waitFor(t, "job")
	mustRelease(t, s, l)
	rec.waitFor(t, "job")
}

// TestOnlyListenedNamesAreAnnounced: a change is published only while a
// waiter is queued for the name or it is watched, so uncontended locks cost
// no pub/sub traffic.
func TestOnlyListenedNamesAreAnnounced(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	rec := newRecorder()
	defer s.Subscribe(rec.notify)()
	waitSubscribed(t, s, rec)

	quiet := mustGrant(t, s, req("quiet", "a", time.Minute, ""))
	mustRelease(t, s, quiet)

	held := mustGrant(t, s, req("contended", "a", time.Minute, ""))
	mustRefuse(t, s, waitReq("contended", "w", 10*time.Second))
	mustRelease(t, s, held)
	watch(t, s, "watched")
	mustGrant(t, s, req("watched", "a", time.Minute, ""))

	// Pub/sub delivers in order: everything before "watched" is in by then.
	var got []string
	for timeout := time.After(5 * time.Second); len(got) == 0 || got[len(got)-1] != "watched"; {
		select {
		case name := <-rec.ch:
			got = append(got, name)
		case <-timeout:
			t.Fatalf("notified %q; want contended, then watched", got)
		}
	}
	if !slices.Equal(got, []string{"contended", "watched"}) {
		t.Fatalf("notified %q; want contended (it had a waiter), then watched, and never quiet", got)
	}
}
