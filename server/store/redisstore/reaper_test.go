package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/store"
)

// TestAnExpiredSessionsNamesGoAfterTheRetention: a session that expires
// without a close (its client vanished) has its names settled soon after
// by the store that renewed it: their keys go a retention after the
// session's end, as released names' do, instead of the session keep (an
// hour) that the attached grants gave them, and the session's own keys go
// too. Before the reaper every name a crashed client held stayed an hour.
func TestAnExpiredSessionsNamesGoAfterTheRetention(t *testing.T) {
	t.Parallel()
	const idle = 10 * time.Second
	s := newStore(t, nil, Options{IdleNameTTL: idle})
	ctx := testCtx(t)
	// A TTL that outlasts the three grants on a loaded machine.
	sess, err := s.CreateSession(ctx, "alice", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	names := append([]string{"vanished"}, namesOutside(sess, 2)...)
	for _, name := range names {
		mustGrant(t, s, inSession(name, "w", sess))
		if pttl := s.client.PTTL(ctx, s.keys(name).lease).Val(); pttl < minSessionKeep-time.Minute {
			t.Fatalf("%q: an attached grant's key lives %s; want the session keep %s (the test's premise)", name, pttl, minSessionKeep)
		}
	}
	sessionKey, namesKey := s.sessionKeys(sess.ID)[0], s.sessionKeys(sess.ID)[1]

	// The session expires 2 s after its creation.
	testwait.UntilNil(t, 15*time.Second, "the expired session's names reaped", func() error {
		var long []string
		for _, name := range names {
			if pttl := s.client.PTTL(ctx, s.keys(name).lease).Val(); pttl > idle {
				long = append(long, name+" "+pttl.String())
			}
		}
		if left := s.client.Exists(ctx, namesKey).Val(); len(long) > 0 || left > 0 {
			return fmt.Errorf("names whose keys outlive the retention %s: %v; the session's names key left: %d", idle, long, left)
		}
		return nil
	})
	if pttl := s.client.PTTL(ctx, sessionKey).Val(); pttl <= 0 || pttl > idle {
		t.Errorf("the expired session's key lives %s more; want at most the retention %s", pttl, idle)
	}
	if _, err := s.RenewSession(ctx, sess.ID, "alice"); err == nil {
		t.Error("the reaped session was renewed; want it refused")
	}
	for _, name := range names {
		d := mustDescribe(t, s, name)
		if d.Held {
			t.Errorf("%q is still held by its expired session: %+v", name, d.Lease)
		}
		mustRelease(t, s, mustGrant(t, s, store.AcquireRequest{Name: name, Holder: "w2", TTL: time.Second}))
	}
}

// TestASessionRenewedThroughAnotherStoreIsNotReaped: the store that
// created a session looks at it once it would have expired, and finds it
// renewed through another coordinator: its names stay held, their keys
// the session keep.
func TestASessionRenewedThroughAnotherStoreIsNotReaped(t *testing.T) {
	t.Parallel()
	// Renewed every ttl/8: a renewal may come seconds late on a loaded
	// machine without the session expiring.
	const ttl = 4 * time.Second
	a := newStore(t, nil, Options{})
	b := newStore(t, nil, Options{KeyPrefix: a.prefix})
	ctx := testCtx(t)
	sess, err := a.CreateSession(ctx, "alice", ttl)
	if err != nil {
		t.Fatal(err)
	}
	mustGrant(t, a, inSession("kept", "w", sess))
	// a looks after ttl + reapGrace, within a sweepInterval more.
	for end := time.Now().Add(ttl + reapGrace + 2*sweepInterval); time.Now().Before(end); {
		if _, err := b.RenewSession(ctx, sess.ID, "alice"); err != nil {
			t.Fatalf("RenewSession through the other store: %v", err)
		}
		time.Sleep(ttl / 8)
	}
	if d := mustDescribe(t, a, "kept"); !d.Held || d.Lease.Holder != "w" {
		t.Errorf("the live session's name: %+v; want it held by w", d)
	}
	if pttl := a.client.PTTL(ctx, a.keys("kept").lease).Val(); pttl < minSessionKeep-time.Minute {
		t.Errorf("the live session's name's key lives %s more; want the session keep %s", pttl, minSessionKeep)
	}
	if a.client.Exists(ctx, a.sessionKeys(sess.ID)[1]).Val() != 1 {
		t.Error("the live session's names were forgotten")
	}
}
