package redisstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/coordinator-dev/coordinator/internal/testkit/testproxy"
	"github.com/coordinator-dev/coordinator/server/store"
)

// TestChanges runs alone: it checks that Close leaves no goroutine behind.
func TestChanges(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs after the store's and client's cleanups

	s := newStore(t, nil, Options{})
	c1, c2, fenced := s.Changes("job"), s.Changes("job"), s.Changes("fence")
	defer c1.Cancel()
	waitSubscribed(t, s, c1, c2, fenced)
	watch(t, s, "job", "fence")

	// A fence is a later announcement: pub/sub keeps order, so once it is
	// in, every earlier announcement has reached its subscribers.
	fence := func() {
		t.Helper()
		l := mustGrant(t, s, req("fence", "f", time.Minute, ""))
		waitChange(t, fenced, "fence grant")
		mustRelease(t, s, l)
		waitChange(t, fenced, "fence release")
	}
	quiet := func(what string, cs ...*store.Changes) {
		t.Helper()
		fence()
		for i, c := range cs {
			if pending(c) {
				t.Errorf("%s: subscriber %d was told of a change", what, i)
			}
		}
	}

	l := mustGrant(t, s, req("job", "a", time.Minute, "v1"))
	waitChange(t, c1, "grant")
	waitChange(t, c2, "grant")
	mustGrant(t, s, req("job", "a", time.Minute, "v1"))
	quiet("re-acquire with the same value", c1, c2)
	mustGrant(t, s, req("job", "a", time.Minute, "v2"))
	waitChange(t, c1, "new value")
	waitChange(t, c2, "new value")
	if _, err := s.Renew(testCtx(t), "job", "a", l.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	quiet("renewal", c1, c2)

	c2.Cancel()
	c2.Cancel() // twice is harmless
	mustRelease(t, s, l)
	waitChange(t, c1, "release")
	quiet("cancelled", c2)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, c1, "a subscription from before Close")
	waitClosed(t, s.Changes("job"), "a subscription after Close")
}

// waitClosed waits for c's channel to close, skipping pending values.
func waitClosed(t *testing.T, c *store.Changes, what string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-c.C:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("%s: the channel is open after Close", what)
		}
	}
}

// TestChangesTellEarlySubscribersToLookAgain: Changes does not wait for Redis
// to confirm the subscription, so whoever subscribed before that hears of it.
func TestChangesTellEarlySubscribersToLookAgain(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	c := s.Changes("job")
	defer c.Cancel()
	waitChange(t, c, "subscription confirmed, with nothing changed")
}

// TestChangesSurviveABrokenConnection cuts the subscription's connection:
// the store subscribes again and tells every subscriber to look again.
func TestChangesSurviveABrokenConnection(t *testing.T) {
	t.Parallel()
	p := testproxy.New(t, testRedisOptions(t).Addr)
	c := newClient(t, func(o *redis.Options) { o.Addr = p.Addr() })
	s := newStore(t, c, Options{})
	job, other := s.Changes("job"), s.Changes("other")
	defer job.Cancel()
	defer other.Cancel()
	waitSubscribed(t, s, job, other)
	watch(t, s, "job")

	p.Drop()
	waitChange(t, job, "subscribed again")
	waitChange(t, other, "subscribed again")
	l := mustGrant(t, s, req("job", "a", time.Minute, ""))
	waitChange(t, job, "grant")
	mustRelease(t, s, l)
	waitChange(t, job, "release")
}

// TestChangesSurviveASilentConnection black-holes the subscription's
// connection without closing it: the health check's unanswered ping makes the
// store subscribe again on a new connection.
func TestChangesSurviveASilentConnection(t *testing.T) {
	t.Parallel()
	const health = 300 * time.Millisecond
	p := testproxy.New(t, testRedisOptions(t).Addr)
	// Pooled connections are frozen too: a short read timeout lets their
	// commands fail over to new connections quickly.
	c := newClient(t, func(o *redis.Options) { o.Addr = p.Addr(); o.ReadTimeout = 2 * health })
	s := newStore(t, c, Options{})
	s.events.health = health
	job := s.Changes("job")
	defer job.Cancel()
	waitSubscribed(t, s, job)
	watch(t, s, "job")

	time.Sleep(3 * health) // answered pings change nothing
	if pending(job) {
		t.Fatal("a healthy subscription told its subscribers to look again")
	}
	p.Freeze()
	start := time.Now()
	waitChange(t, job, "subscribed again")
	t.Logf("subscribed again after %s", time.Since(start))
	l := mustGrant(t, s, req("job", "a", time.Minute, ""))
	waitChange(t, job, "grant")
	mustRelease(t, s, l)
	waitChange(t, job, "release")
}

// TestOnlyListenedNamesAreAnnounced: a change is published only while a
// waiter is queued for the name or it is watched, so uncontended locks cost
// no pub/sub traffic.
func TestOnlyListenedNamesAreAnnounced(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil, Options{})
	quiet, contended, watched := s.Changes("quiet"), s.Changes("contended"), s.Changes("watched")
	for _, c := range []*store.Changes{quiet, contended, watched} {
		defer c.Cancel()
	}
	waitSubscribed(t, s, quiet, contended, watched)

	l := mustGrant(t, s, req("quiet", "a", time.Minute, ""))
	mustRelease(t, s, l)

	held := mustGrant(t, s, req("contended", "a", time.Minute, ""))
	mustRefuse(t, s, waitReq("contended", "w", 10*time.Second))
	mustRelease(t, s, held)
	watch(t, s, "watched")
	mustGrant(t, s, req("watched", "a", time.Minute, ""))

	// Pub/sub keeps order: everything before "watched" is in by then.
	waitChange(t, watched, "watched name granted")
	if !pending(contended) {
		t.Error("the release of a name with a waiter was not announced")
	}
	if pending(quiet) {
		t.Error("a name nobody listened for was announced")
	}
}

func TestParseAnnouncement(t *testing.T) {
	tests := []struct {
		payload string
		name    string
		change  store.Change
	}{
		{"job\n", "job", store.Change{}},
		{"job\n1764700000000001", "job", store.Change{Granted: 1764700000000001}},
		{"job\n-1764700000000001", "job", store.Change{Released: 1764700000000001}},
		{"a\nname\nwith newlines\n7", "a\nname\nwith newlines", store.Change{Granted: 7}},
		{"a\nname\n-with newlines\n-7", "a\nname\n-with newlines", store.Change{Released: 7}},
		{"ends with a newline\n\n", "ends with a newline\n", store.Change{}},
		{"\n5", "", store.Change{Granted: 5}},
		{"\n-", "", store.Change{}},
		{"job\n-x", "job", store.Change{}},
		{"no newline", "no newline", store.Change{}},
	}
	for _, tt := range tests {
		name, change := parseAnnouncement(tt.payload)
		if name != tt.name || change != tt.change {
			t.Errorf("parseAnnouncement(%q) = %q, %+v; want %q, %+v", tt.payload, name, change, tt.name, tt.change)
		}
	}
}
