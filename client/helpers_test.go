package client

import (
	"bufio"
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
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

// confirmedAt is when the last successful grant or renewal of l was sent:
// the coordinator's expiry is at least that plus the TTL.
func confirmedAt(l *lease) (time.Time, time.Duration) {
	l.c.renewals.mu.Lock()
	defer l.c.renewals.mu.Unlock()
	return l.confirmed, l.ttl
}

// waitRenewed waits until l was renewed n times after now, in real time.
func waitRenewed(t testing.TB, l *lease, n int) {
	t.Helper()
	for range n {
		before, _ := confirmedAt(l)
		eventually(t, "lease renewed", func() bool {
			at, _ := confirmedAt(l)
			return at.After(before)
		})
	}
}

// startedStreams reads how many calls of method the coordinator started,
// from its Prometheus metrics.
func startedStreams(t testing.TB, coord *coordtest.Coordinator, method string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	coord.Server().MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	total := 0
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "grpc_server_started_total{") || !strings.Contains(line, `grpc_method="`+method+`"`) {
			continue
		}
		n, err := strconv.Atoi(line[strings.LastIndexByte(line, ' ')+1:])
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		total += n
	}
	return total
}

// renew moves clock, the fake clock of l's Client, to l's next renewal (its
// session's, for a lease in a session) and waits until the renewal was
// answered. The coordinator's clock is real:
// leases renewed this way should have a TTL longer than the test.
func renew(t testing.TB, clock *clockwork.FakeClock, l *lease) {
	t.Helper()
	renewAll(t, clock, l)
}

// renewAll is renew for leases of one Client: it moves the clock to the
// latest of their next renewals.
func renewAll(t testing.TB, clock *clockwork.FakeClock, leases ...*lease) {
	t.Helper()
	s := &leases[0].c.renewals
	before := make([]time.Time, len(leases))
	var latest time.Time
	s.mu.Lock()
	for i, l := range leases {
		before[i] = l.confirmed
		next := l.nextRenew
		if l.session != nil { // renewed with its session
			next = l.session.nextRenew
		}
		if next.After(latest) {
			latest = next
		}
	}
	s.mu.Unlock()
	clock.Advance(max(clock.Until(latest), 0))
	// The scheduler may have read the clock before it moved and be about
	// to set its timer from that reading: wake it to read it again.
	s.mu.Lock()
	s.poke()
	s.mu.Unlock()
	eventually(t, "leases renewed", func() bool {
		for i, l := range leases {
			if at, _ := confirmedAt(l); !at.After(before[i]) {
				return false
			}
		}
		return true
	})
	for _, l := range leases {
		if err := l.err(); err != nil {
			t.Fatalf("%s ended while renewed: %v", l.describe(), err)
		}
	}
}

// modes are the two ways a Client makes its lease calls: over the operation
// stream (the default) and unary (WithUnaryCalls).
var modes = []struct {
	name string
	opt  Option
}{
	{"stream", optionFunc(func(*config) {})},
	{"unary", WithUnaryCalls()},
}

// forEachMode runs test as a subtest with each mode's Option, to be given
// to dial.
func forEachMode(t *testing.T, test func(t *testing.T, mode Option)) {
	t.Helper()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { test(t, m.opt) })
	}
}

// forEachModeAndStore is forEachMode of forEachStore.
func forEachModeAndStore(t *testing.T, test func(t *testing.T, mode Option, coord *coordtest.Coordinator)) {
	t.Helper()
	forEachMode(t, func(t *testing.T, mode Option) {
		forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) { test(t, mode, coord) })
	})
}

// holding is how a test holds its lease of a TTL: on its own (WithTTL on
// the lock), or in the Client's default session of that TTL.
type holding struct {
	name      string
	client    Option
	lock      []LockOption
	inSession bool
}

// forEachModeAndHolding is forEachMode of both holdings of a lease of ttl.
func forEachModeAndHolding(t *testing.T, ttl time.Duration, test func(t *testing.T, mode Option, h holding)) {
	t.Helper()
	holdings := []holding{
		{name: "own", client: optionFunc(func(*config) {}), lock: []LockOption{WithTTL(ttl)}},
		{name: "in-session", client: WithTTL(ttl), inSession: true},
	}
	forEachMode(t, func(t *testing.T, mode Option) {
		for _, h := range holdings {
			t.Run(h.name, func(t *testing.T) { test(t, mode, h) })
		}
	})
}
