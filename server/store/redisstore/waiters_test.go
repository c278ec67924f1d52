package redisstore

import (
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/store"
)

func waitReq(name, waiter string, waiterTTL time.Duration) store.AcquireRequest {
	return store.AcquireRequest{Name: name, Holder: "holder-" + waiter, TTL: time.Second, Waiter: waiter, WaiterTTL: waiterTTL}
}

// TestQueueKeys checks what the conformance suite cannot see: that the queue
// leaves no key behind. The queue's rules are conformance tests.
func TestQueueKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, s *Store)
	}{
		{"a waiter granted the name leaves the queue", func(t *testing.T, s *Store) {
			w1 := mustGrant(t, s, waitReq("job", "w1", 10*time.Second))
			mustRelease(t, s, w1)
			mustGrant(t, s, req("job", "x", time.Second, ""))
			if n := s.client.Exists(testCtx(t), s.keys("job").queue, s.keys("job").waiters).Val(); n != 0 {
				t.Errorf("%d queue keys left", n)
			}
		}},
		{"the queue keys expire with the last waiter deadline", func(t *testing.T, s *Store) {
			const first, second = 600 * time.Millisecond, 200 * time.Millisecond
			mustGrant(t, s, req("job", "a", time.Minute, ""))
			queued := time.Now()
			mustRefuse(t, s, waitReq("job", "w1", first))
			mustRefuse(t, s, waitReq("job", "w2", second))
			k := s.keys("job")
			for _, key := range []string{k.queue, k.waiters} {
				pttl := s.client.PTTL(testCtx(t), key).Val()
				// Between w1's deadline as it was set and as it is now.
				lo, hi := first-time.Since(queued)-clockSkew, first
				if pttl < lo || pttl > hi {
					t.Errorf("PTTL %s = %s, want w1's deadline, within [%s, %s]", key, pttl, lo, hi)
				}
			}
			testwait.Until(t, first+5*time.Second, "the queue keys to expire", func() bool {
				return s.client.Exists(testCtx(t), k.queue, k.waiters).Val() == 0
			})
			if gone := time.Since(queued); gone < first-clockSkew {
				t.Errorf("the queue keys expired %s after the waiters queued, before w1's deadline %s", gone, first)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newStore(t, nil, Options{}))
		})
	}
}
