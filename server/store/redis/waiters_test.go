package redisstore

import (
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

func waitReq(name, waiter string, waiterTTL time.Duration) store.AcquireRequest {
	return store.AcquireRequest{Name: name, Holder: "holder-" + waiter, TTL: time.Second, Waiter: waiter, WaiterTTL: waiterTTL}
}

func TestWaiters(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, s *Store)
	}{
		{"waiters are served in arrival order", func(t *testing.T, s *Store) {
			a := mustGrant(t, s, req("job", "a", time.Minute, ""))
			for _, w := range []string{"w1", "w2", "w3", "w1", "w2"} { // attempts keep their place
				res := mustRefuse(t, s, waitReq("job", w, 10*time.Second))
				sameLease(t, res.Lease, a)
			}
			mustRelease(t, s, a)
			order := []string{"w1", "w2", "w3"}
			for i, want := range order {
				for j := len(order) - 1; j > i; j-- { // later waiters, latest first
					if res := mustRefuse(t, s, waitReq("job", order[j], 10*time.Second)); !isZeroLease(res.Lease) {
						t.Errorf("%s refused for %s with lease %+v, want zero", order[j], want, res.Lease)
					}
				}
				mustRelease(t, s, mustGrant(t, s, waitReq("job", want, 10*time.Second)))
			}
		}},
		{"a request that does not wait is refused while waiters are queued", func(t *testing.T, s *Store) {
			a := mustGrant(t, s, req("job", "a", time.Minute, ""))
			mustRefuse(t, s, waitReq("job", "w1", 10*time.Second))
			mustRelease(t, s, a)
			res := mustRefuse(t, s, req("job", "x", time.Second, ""))
			if !isZeroLease(res.Lease) {
				t.Errorf("refused for a waiter with lease %+v, want zero", res.Lease)
			}
			w1 := mustGrant(t, s, waitReq("job", "w1", 10*time.Second))
			mustRelease(t, s, w1)
			mustGrant(t, s, req("job", "x", time.Second, "")) // the queue is empty again
		}},
		{"a waiter whose deadline passed is pruned", func(t *testing.T, s *Store) {
			a := mustGrant(t, s, req("job", "a", time.Minute, ""))
			mustRefuse(t, s, waitReq("job", "gone", 50*time.Millisecond))
			mustRefuse(t, s, waitReq("job", "w2", 10*time.Second))
			time.Sleep(80 * time.Millisecond)
			mustRelease(t, s, a)
			mustGrant(t, s, waitReq("job", "w2", 10*time.Second))
		}},
		{"a waiter that keeps trying keeps its place", func(t *testing.T, s *Store) {
			a := mustGrant(t, s, req("job", "a", time.Minute, ""))
			mustRefuse(t, s, waitReq("job", "w1", 100*time.Millisecond))
			mustRefuse(t, s, waitReq("job", "w2", 10*time.Second))
			for range 4 { // 200ms in all: twice w1's waiter ttl
				time.Sleep(50 * time.Millisecond)
				mustRefuse(t, s, waitReq("job", "w1", 100*time.Millisecond))
			}
			mustRelease(t, s, a)
			mustRefuse(t, s, waitReq("job", "w2", 10*time.Second))
			mustGrant(t, s, waitReq("job", "w1", 100*time.Millisecond))
		}},
		{"a waiter granted the name leaves the queue", func(t *testing.T, s *Store) {
			w1 := mustGrant(t, s, waitReq("job", "w1", 10*time.Second))
			mustRelease(t, s, w1)
			mustGrant(t, s, req("job", "x", time.Second, ""))
			if n := s.client.Exists(testCtx(t), s.keys("job").queue, s.keys("job").waiters).Val(); n != 0 {
				t.Errorf("%d queue keys left", n)
			}
		}},
		{"the queue keys expire with the last waiter deadline", func(t *testing.T, s *Store) {
			mustGrant(t, s, req("job", "a", time.Minute, ""))
			mustRefuse(t, s, waitReq("job", "w1", 60*time.Millisecond))
			mustRefuse(t, s, waitReq("job", "w2", 30*time.Millisecond))
			k := s.keys("job")
			for _, key := range []string{k.queue, k.waiters} {
				if pttl := s.client.PTTL(testCtx(t), key).Val(); pttl <= 30*time.Millisecond || pttl > 60*time.Millisecond {
					t.Errorf("PTTL %s = %s, want the latest deadline (60ms)", key, pttl)
				}
			}
			time.Sleep(90 * time.Millisecond)
			if n := s.client.Exists(testCtx(t), k.queue, k.waiters).Val(); n != 0 {
				t.Errorf("%d queue keys left after the last deadline", n)
			}
		}},
		{"dequeue lets the next waiter in and wakes subscribers", func(t *testing.T, s *Store) {
			rec := newRecorder()
			defer s.Subscribe(rec.notify)()
			waitSubscribed(t, s, rec)
			a := mustGrant(t, s, req("job", "a", time.Minute, ""))
			mustRefuse(t, s, waitReq("job", "w1", 10*time.Second))
			mustRefuse(t, s, waitReq("job", "w2", 10*time.Second))
			mustRelease(t, s, a)
			rec.waitFor(t, "job")
			mustRefuse(t, s, waitReq("job", "w2", 10*time.Second))
			if err := s.Dequeue(testCtx(t), "job", "w1"); err != nil {
				t.Fatal(err)
			}
			rec.waitFor(t, "job")
			mustGrant(t, s, waitReq("job", "w2", 10*time.Second))
			if err := s.Dequeue(testCtx(t), "job", "unknown"); err != nil {
				t.Errorf("Dequeue of an unknown waiter: %v", err)
			}
		}},
		{"pruning the head wakes subscribers", func(t *testing.T, s *Store) {
			rec := newRecorder()
			defer s.Subscribe(rec.notify)()
			waitSubscribed(t, s, rec)
			a := mustGrant(t, s, req("job", "a", time.Minute, ""))
			mustRefuse(t, s, waitReq("job", "gone", 30*time.Millisecond))
			mustRefuse(t, s, waitReq("job", "w2", 10*time.Second))
			mustRelease(t, s, a)
			rec.waitFor(t, "job")
			time.Sleep(50 * time.Millisecond)
			mustRefuse(t, s, req("job", "x", time.Second, "")) // prunes "gone"; w2 is first now
			rec.waitFor(t, "job")
			mustGrant(t, s, waitReq("job", "w2", 10*time.Second))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newStore(t, nil, Options{}))
		})
	}
}

func isZeroLease(l store.Lease) bool {
	return l.Name == "" && l.Holder == "" && l.Token == 0 && l.Value == nil && l.TTL == 0 && l.ExpiresAt.IsZero()
}
