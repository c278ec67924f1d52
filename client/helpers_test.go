package client

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// stores are the coordinator stores every behaviour is proven against.
var stores = []string{"memory", "redis"}

// forEachStore runs test as a subtest against a fresh coordinator on each
// store.
func forEachStore(t *testing.T, test func(t *testing.T, coord *coordtest.Coordinator)) {
	t.Helper()
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			test(t, coordtest.Start(t, coordtest.Config(t, kind)))
		})
	}
}

// dial connects a Client to coord, closed at the end of t.
func dial(t testing.TB, coord *coordtest.Coordinator, opts ...Option) *Client {
	t.Helper()
	c, err := New(coord.Addr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitDone waits (generously) for ch to close and returns when it saw it.
func waitDone(t testing.TB, ch <-chan struct{}, within time.Duration, what string) time.Time {
	t.Helper()
	select {
	case <-ch:
		return time.Now()
	case <-time.After(within):
		t.Fatalf("%s: not done after %s", what, within)
		return time.Time{}
	}
}

// eventually polls cond until it holds or 20s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 20*time.Second, what, cond)
}

// confirmedAt is when the last successful renewal of s was sent: the
// coordinator's expiry is at least that plus the TTL.
func confirmedAt(s *session) time.Time {
	s.c.renewals.mu.Lock()
	defer s.c.renewals.mu.Unlock()
	return s.confirmed
}

// waitRenewed waits until s was renewed n times after now, in real time.
func waitRenewed(t testing.TB, s *session, n int) {
	t.Helper()
	for range n {
		before := confirmedAt(s)
		eventually(t, "session renewed", func() bool { return confirmedAt(s).After(before) })
	}
}

// startedStreams reads how many calls of method the coordinator started,
// from its Prometheus metrics.
func startedStreams(t testing.TB, coord *coordtest.Coordinator, method string) int {
	t.Helper()
	return counted(t, coord, "grpc_server_started_total", `grpc_method="`+method+`"`)
}

// renew moves clock, the fake clock of s's Client, to the session's next
// renewal and waits until the renewal was answered. The coordinator's clock
// is real: sessions renewed this way should have a TTL longer than the
// test.
func renew(t testing.TB, clock *clockwork.FakeClock, s *session) {
	t.Helper()
	r := &s.c.renewals
	r.mu.Lock()
	before, next := s.confirmed, s.nextRenew
	r.mu.Unlock()
	clock.Advance(max(clock.Until(next), 0))
	// The scheduler may have read the clock before it moved and be about
	// to set its timer from that reading: wake it to read it again.
	r.mu.Lock()
	r.poke()
	r.mu.Unlock()
	eventually(t, "session renewed", func() bool { return confirmedAt(s).After(before) })
	if err := s.err(); err != nil {
		t.Fatalf("%s ended while renewed: %v", s.describe(), err)
	}
}
