package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// counted sums the coordinator's Prometheus counter metric over the series
// whose labels include every one of labels (`name="value"`).
func counted(t testing.TB, coord *coordtest.Coordinator, metric string, labels ...string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	coord.Server().MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	total := 0
	sc := bufio.NewScanner(rec.Body)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		n, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		total += int(n)
	}
	return total
}

// unaryCalls is how many calls of the unary method the coordinator answered.
func unaryCalls(t testing.TB, coord *coordtest.Coordinator, method string) int {
	t.Helper()
	return counted(t, coord, "grpc_server_handled_total", `grpc_method="`+method+`"`)
}

// streamOps is how many operations of kind op the coordinator's operation
// streams carried.
func streamOps(t testing.TB, coord *coordtest.Coordinator, op string) int {
	t.Helper()
	return counted(t, coord, "coordinator_stream_operations_total", `op="`+op+`"`)
}

// TestTheDefaultSessionIsMadeOnFirstNeed: a Client that only observes
// makes no session; its first acquisition makes one, which every later
// lock, share and leadership without WithSession joins.
func TestTheDefaultSessionIsMadeOnFirstNeed(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c := dial(t, coord)
		if _, err := c.Leader(ctx, "nobody"); !errors.Is(err, ErrNoLeader) {
			t.Fatal(err)
		}
		if _, err := c.Describe(ctx, "free"); err != nil {
			t.Fatal(err)
		}
		for _, err := range c.List(ctx, "") {
			if err != nil {
				t.Fatal(err)
			}
		}
		events := c.Observe(ctx, "watched")
		<-events
		if n := unaryCalls(t, coord, "CreateSession"); n != 0 {
			t.Fatalf("an observing Client made %d sessions; want none", n)
		}

		l, err := c.TryLock(ctx, "default/a")
		if err != nil {
			t.Fatal(err)
		}
		share, err := c.Semaphore("default/pool", 3).Acquire(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		read, err := c.RWMutex("default/rw").RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.Campaign(ctx, "default/election", []byte("me"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := unaryCalls(t, coord, "CreateSession"); n != 1 {
			t.Fatalf("%d sessions made; want 1", n)
		}
		if s.TTL() != DefaultTTL {
			t.Errorf("the default session's TTL is %s; want the Client's, %s", s.TTL(), DefaultTTL)
		}
		want := map[string]bool{"default/a": true, "default/pool": true, "default/rw": true, "default/election": true}
		for got, err := range c.List(ctx, "default/") {
			if err != nil {
				t.Fatal(err)
			}
			if !want[got.Name] || got.SessionID != s.ID() {
				t.Errorf("%s is in session %q; want %q", got.Name, got.SessionID, s.ID())
			}
			delete(want, got.Name)
		}
		if len(want) != 0 {
			t.Errorf("not listed: %v", want)
		}
		if l.TTL() != s.TTL() || !l.Deadline().Equal(s.Deadline()) {
			t.Errorf("TTL %s and deadline %s; want the session's, %s and %s", l.TTL(), l.Deadline(), s.TTL(), s.Deadline())
		}
		for _, release := range []func(context.Context) (bool, error){l.Release, share.Release, read.Release, e.Resign} {
			if released, err := release(ctx); err != nil || !released {
				t.Fatalf("release = %t, %v; want released", released, err)
			}
		}
		if s.Err() != nil {
			t.Fatalf("releasing its leases ended the default session: %v", s.Err())
		}
	})
}

// TestOneRenewalKeepsEveryLeaseOfASession: a Client renews its default
// session once a renewal period whether it holds 1 lease or 100, over its
// one operation stream as renew_session operations, and renews none of the
// leases on its own.
func TestOneRenewalKeepsEveryLeaseOfASession(t *testing.T) {
	t.Parallel()
	const periods = 6
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		for _, n := range []int{1, 100} {
			ctx := testCtx(t)
			clock := clockwork.NewFakeClock()
			streams0 := startedStreams(t, coord, "Stream")
			c := dial(t, coord, withClock(clock))
			leases := make([]*Lease, n)
			for i := range leases {
				l, err := c.TryLock(ctx, fmt.Sprintf("renewals/%d/%d", n, i))
				if err != nil {
					t.Fatal(err)
				}
				leases[i] = l
			}
			count := func() (sessions, leases int) {
				return streamOps(t, coord, "renew_session") + unaryCalls(t, coord, "RenewSession"),
					streamOps(t, coord, "renew") + unaryCalls(t, coord, "Renew")
			}
			sessions0, leases0 := count()
			for range periods {
				renew(t, clock, leases[0].l.session)
			}
			sessions1, leases1 := count()
			if sessions1-sessions0 != periods || leases1 != leases0 || streamOps(t, coord, "renew_session") < periods {
				t.Errorf("%d leases: %d session renewals, %d of leases on their own in %d periods; want %d over the stream, none",
					n, sessions1-sessions0, leases1-leases0, periods, periods)
			}
			if got := startedStreams(t, coord, "Stream") - streams0; got != 1 {
				t.Fatalf("%d operation streams for %d leases; want 1", got, n)
			}
			for _, l := range leases {
				if err := l.Err(); err != nil {
					t.Fatalf("%s ended while its session lived: %v", l.Name(), err)
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestAnAcquisitionReplacesADefaultSessionThatEnded: an acquisition that
// the coordinator refuses because the default session ended (before the
// Client noticed) is made again in a new default session.
func TestAnAcquisitionReplacesADefaultSessionThatEnded(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c := dial(t, coord) // a long TTL: no renewal notices the loss
		s, err := c.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.API().CloseSession(ctx, &coordinatorv1.CloseSessionRequest{SessionId: s.ID()}); err != nil {
			t.Fatal(err)
		}
		l, err := c.Lock(ctx, "replaced")
		if err != nil {
			t.Fatalf("Lock after the default session ended on the coordinator: %v", err)
		}
		if l.SessionID() == s.ID() || l.SessionID() == "" || !errors.Is(s.Err(), ErrLost) {
			t.Errorf("granted in session %q; the old one (%s) ended with %v: want a new session, the old one lost", l.SessionID(), s.ID(), s.Err())
		}
	})
}

// TestALeadershipInASession: Campaign WithSession makes a term in the
// session; Proclaim sends the term and the session; the term ends with
// its session, and the next candidate is elected.
func TestALeadershipInASession(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c, rival := dial(t, coord), dial(t, coord)
		s, err := c.NewSession(ctx, WithTTL(sessionTTL))
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.Campaign(ctx, "in-session", []byte("v1"), WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * sessionTTL) // several session TTLs with no renewal of the term's own
		if err := e.Proclaim(ctx, []byte("v2")); err != nil {
			t.Fatalf("Proclaim in a session: %v", err)
		}
		info, err := c.Leader(ctx, "in-session")
		if err != nil || info.Term != e.Term() || string(info.Value) != "v2" {
			t.Fatalf("Leader = %+v, %v; want term %d proclaiming v2", info, err, e.Term())
		}
		d, err := c.Describe(ctx, "in-session")
		if err != nil || len(d.Holders) != 1 || d.Holders[0].SessionID != s.ID() {
			t.Fatalf("Describe = %+v, %v; want the term in session %s", d, err, s.ID())
		}
		got := make(chan *Leadership, 1)
		go func() {
			next, err := rival.Campaign(ctx, "in-session", []byte("rival"))
			if err != nil {
				t.Error(err)
			}
			got <- next
		}()
		eventually(t, "the rival waiting", func() bool {
			d, err := c.Describe(ctx, "in-session")
			return err == nil && d.Waiters == 1
		})
		if _, err := c.API().CloseSession(ctx, &coordinatorv1.CloseSessionRequest{SessionId: s.ID()}); err != nil {
			t.Fatal(err)
		}
		waitDone(t, e.Done(), 5*sessionTTL, "the leadership of the lost session")
		if !errors.Is(e.Err(), ErrLost) {
			t.Errorf("Err = %v; want ErrLost", e.Err())
		}
		select {
		case next := <-got:
			if next == nil || next.Term() <= e.Term() {
				t.Fatalf("the rival's term %v; want one above %d", next, e.Term())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the rival was not elected once the session closed")
		}
	})
}

// TestCloseClosesEachSessionInOneCall: Client.Close closes each
// session (the default one and those NewSession made) in one CloseSession,
// with no release of their leases one by one, and others get every name at
// once.
func TestCloseClosesEachSessionInOneCall(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c, err := New(coord.Addr())
		if err != nil {
			t.Fatal(err)
		}
		explicit, err := c.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		var leases []*Lease
		for i := range 20 {
			opts := []LockOption{}
			if i%4 == 0 {
				opts = append(opts, WithSession(explicit))
			}
			name := fmt.Sprintf("closing/%d", i)
			l, err := c.TryLock(ctx, name, opts...)
			if err != nil {
				t.Fatal(err)
			}
			names, leases = append(names, name), append(leases, l)
		}
		releases := streamOps(t, coord, "release") + unaryCalls(t, coord, "Release")
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		for _, l := range leases {
			if !errors.Is(l.Err(), ErrClosed) {
				t.Fatalf("%s: Err = %v after Close; want ErrClosed", l.Name(), l.Err())
			}
		}
		if n := unaryCalls(t, coord, "CloseSession"); n != 2 {
			t.Errorf("%d CloseSession calls; want 2, one a session", n)
		}
		if n := streamOps(t, coord, "release") + unaryCalls(t, coord, "Release") - releases; n != 0 {
			t.Errorf("%d releases one by one; want none", n)
		}
		if _, err := c.TryLock(ctx, "after-close"); !errors.Is(err, ErrClosed) {
			t.Errorf("TryLock on a closed Client = %v; want ErrClosed", err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		other := dial(t, coord)
		for _, name := range names {
			if l, err := other.TryLock(ctx, name); err != nil {
				t.Errorf("%s after Close: %v; want granted", name, err)
			} else {
				_, _ = l.Release(ctx)
			}
		}
	})
}
