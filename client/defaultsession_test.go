package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/testlog"
	"github.com/coordinator-dev/coordinator/server"
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
// lock, share and leadership without WithTTL joins, and WithTTL makes a
// lease of its own.
func TestTheDefaultSessionIsMadeOnFirstNeed(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c := dial(t, coord)
		if _, err := c.Leader(ctx, "nobody"); !errors.Is(err, ErrNoLeader) {
			t.Fatal(err)
		}
		if _, err := c.API().Describe(ctx, &coordinatorv1.DescribeRequest{Name: "free"}); err != nil {
			t.Fatal(err)
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
		own, err := c.TryLock(ctx, "default/own", WithTTL(5*time.Second))
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
		list, err := c.API().List(ctx, &coordinatorv1.ListRequest{Prefix: "default/"})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"default/a": s.ID(), "default/pool": s.ID(), "default/rw": s.ID(), "default/election": s.ID(), "default/own": ""}
		for _, got := range list.GetLeases() {
			if w, ok := want[got.GetName()]; !ok || got.GetSessionId() != w {
				t.Errorf("%s is in session %q; want %q", got.GetName(), got.GetSessionId(), w)
			}
			delete(want, got.GetName())
		}
		if len(want) != 0 {
			t.Errorf("not listed: %v", want)
		}
		if own.TTL() != 5*time.Second || l.TTL() != s.TTL() || !l.Deadline().Equal(s.Deadline()) {
			t.Errorf("TTLs %s (WithTTL) and %s (in the session); want 5s and %s, the session's deadline", own.TTL(), l.TTL(), s.TTL())
		}
		for _, release := range []func() error{
			func() error { return l.Release(ctx) }, func() error { return share.Release(ctx) },
			func() error { return read.Release(ctx) }, func() error { return e.Resign(ctx) }, func() error { return own.Release(ctx) },
		} {
			if err := release(); err != nil {
				t.Fatal(err)
			}
		}
		if s.Err() != nil {
			t.Fatalf("releasing its leases ended the default session: %v", s.Err())
		}
	})
}

// TestOneRenewalKeepsEveryLeaseOfASession: over a window of several
// renewal periods, a Client renews its default session about once a period
// whether it holds 1 lease or 100, and renews none of them on its own: over
// the operation stream as renew_session operations, or with unary
// RenewSession calls and no KeepAlive stream.
func TestOneRenewalKeepsEveryLeaseOfASession(t *testing.T) {
	t.Parallel()
	// A TTL a loaded 2-core machine renews in time (a 1s one lost its
	// session there once).
	const ttl, window = 3 * time.Second, 6 * time.Second
	forEachModeAndStore(t, func(t *testing.T, mode Option, coord *coordtest.Coordinator) {
		for _, n := range []int{1, 100} {
			ctx := testCtx(t)
			c := dial(t, coord, mode, WithTTL(ttl))
			leases := make([]*Lease, n)
			for i := range leases {
				l, err := c.TryLock(ctx, fmt.Sprintf("renewals/%d/%d", n, i))
				if err != nil {
					t.Fatal(err)
				}
				leases[i] = l
			}
			// The way it must not go.
			other := func() int { return unaryCalls(t, coord, "RenewSession") }
			if c.unary {
				other = func() int { return streamOps(t, coord, "renew_session") }
			}
			count := func() (sessions, leases, otherWay int) {
				return streamOps(t, coord, "renew_session") + unaryCalls(t, coord, "RenewSession"),
					streamOps(t, coord, "renew") + unaryCalls(t, coord, "Renew"), other()
			}
			sessions0, leases0, other0 := count()
			time.Sleep(window) // the measurement's window, not a synchronisation
			sessions1, leases1, other1 := count()
			renewals := sessions1 - sessions0
			if other1 != other0 {
				t.Errorf("%d session renewals the other way (unary calls: %t)", other1-other0, c.unary)
			}
			t.Logf("%d leases in a session of TTL %s: %d session renewals in %s", n, ttl, renewals, window)
			// About window/(ttl/3) = 6; at least a third of that on a
			// loaded machine, at most twice it with retries, and never one
			// a lease.
			if renewals < 2 || renewals > 12 {
				t.Errorf("%d session renewals in %s with a TTL of %s; want about %d", renewals, window, ttl, int(window/(ttl/3)))
			}
			if leases1 != leases0 || startedStreams(t, coord, "KeepAlive") != 0 {
				t.Errorf("%d renewals of leases on their own, %d KeepAlive streams; want none", leases1-leases0, startedStreams(t, coord, "KeepAlive"))
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

// TestLosingTheDefaultSessionEndsItsLeases: when the default session is
// lost, every lease and leadership in it ends with ErrLost, a lease of its
// own TTL goes on, and the next acquisition makes a new default session.
func TestLosingTheDefaultSessionEndsItsLeases(t *testing.T) {
	t.Parallel()
	forEachModeAndStore(t, func(t *testing.T, mode Option, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c := dial(t, coord, mode, WithTTL(sessionTTL))
		a, err := c.TryLock(ctx, "lost/a")
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.RWMutex("lost/b").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.Campaign(ctx, "lost/election", nil)
		if err != nil {
			t.Fatal(err)
		}
		own, err := c.TryLock(ctx, "lost/own", WithTTL(sessionTTL))
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Ended behind the Client's back: its next renewal is refused.
		if _, err := c.API().CloseSession(ctx, &coordinatorv1.CloseSessionRequest{SessionId: s.ID()}); err != nil {
			t.Fatal(err)
		}
		waitDone(t, s.Done(), 5*sessionTTL, "the lost default session")
		for _, done := range []struct {
			what string
			ch   <-chan struct{}
			err  func() error
		}{{"a", a.Done(), a.Err}, {"b", b.Done(), b.Err}, {"the leadership", e.Done(), e.Err}} {
			waitDone(t, done.ch, time.Second, done.what+" of the lost session")
			if err := done.err(); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), s.ID()) {
				t.Errorf("%s: Err = %v; want ErrLost naming the session", done.what, err)
			}
		}
		waitRenewed(t, own.l, 2)
		if err := own.Err(); err != nil {
			t.Fatalf("a lease of its own ended with the session: %v", err)
		}
		next, err := c.TryLock(ctx, "lost/a")
		if err != nil {
			t.Fatal(err)
		}
		s2, err := c.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s2.ID() == s.ID() || next.l.sessionID != s2.ID() || s2.Err() != nil {
			t.Errorf("after the loss, a lease in session %q, the default session %s (was %s): want a new one", next.l.sessionID, s2.ID(), s.ID())
		}
	})
}

// TestAnAcquisitionReplacesADefaultSessionThatEnded: an acquisition that
// the coordinator refuses because the default session ended (before the
// Client noticed) is made again in a new default session.
func TestAnAcquisitionReplacesADefaultSessionThatEnded(t *testing.T) {
	t.Parallel()
	forEachModeAndStore(t, func(t *testing.T, mode Option, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c := dial(t, coord, mode) // a long TTL: no renewal notices the loss
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
		if l.l.sessionID == s.ID() || l.l.sessionID == "" || !errors.Is(s.Err(), ErrLost) {
			t.Errorf("granted in session %q; the old one (%s) ended with %v: want a new session, the old one lost", l.l.sessionID, s.ID(), s.Err())
		}
	})
}

// TestWithoutDefaultSessionEveryLeaseHasItsOwnTTL: a Client made
// WithoutDefaultSession makes no session; its leases are renewed on their
// own, and Session fails.
func TestWithoutDefaultSessionEveryLeaseHasItsOwnTTL(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c := dial(t, coord, WithoutDefaultSession(), WithTTL(sessionTTL))
		l, err := c.TryLock(ctx, "alone")
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.Campaign(ctx, "alone-election", nil)
		if err != nil {
			t.Fatal(err)
		}
		waitRenewed(t, l.l, 2)
		waitRenewed(t, e.l, 2)
		if l.l.sessionID != "" || e.l.sessionID != "" || unaryCalls(t, coord, "CreateSession") != 0 {
			t.Errorf("sessions %q and %q, %d made; want none", l.l.sessionID, e.l.sessionID, unaryCalls(t, coord, "CreateSession"))
		}
		if _, err := c.Session(ctx); err == nil {
			t.Error("Session of a Client without a default session succeeded")
		}
		// An explicit session still works, and excludes WithTTL.
		s, err := c.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryLock(ctx, "both", WithSession(s), WithTTL(time.Second)); err == nil {
			t.Error("WithSession and WithTTL together were accepted")
		}
	})
}

// TestALeadershipInASession: Campaign WithSession makes a term in the
// session; Proclaim sends the term and the session; the term ends with
// its session, and the next candidate is elected.
func TestALeadershipInASession(t *testing.T) {
	t.Parallel()
	forEachModeAndStore(t, func(t *testing.T, mode Option, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c, rival := dial(t, coord, mode), dial(t, coord, mode)
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
		list, err := c.API().List(ctx, &coordinatorv1.ListRequest{Prefix: "in-session"})
		if err != nil || len(list.GetLeases()) != 1 || list.GetLeases()[0].GetSessionId() != s.ID() {
			t.Fatalf("List = %v, %v; want the term in session %s", list, err, s.ID())
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
			d, err := c.API().Describe(ctx, &coordinatorv1.DescribeRequest{Name: "in-session"})
			return err == nil && d.GetWaiters() == 1
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
	forEachModeAndStore(t, func(t *testing.T, mode Option, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		c, err := New(coord.Addr(), mode)
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
		other := dial(t, coord)
		for _, name := range names {
			if l, err := other.TryLock(ctx, name, WithTTL(time.Second)); err != nil {
				t.Errorf("%s after Close: %v; want granted", name, err)
			} else {
				_ = l.Release(ctx)
			}
		}
	})
}

// noSessions is a coordinator from before sessions.
type noSessions struct{ *server.Service }

func (noSessions) CreateSession(context.Context, *coordinatorv1.CreateSessionRequest) (*coordinatorv1.CreateSessionResponse, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method CreateSession")
}

// TestACoordinatorWithoutSessionsGetsLeasesOfTheirOwn: without
// CreateSession, the leases that would join the default session get TTLs
// of their own (said once in the log), and NewSession fails.
func TestACoordinatorWithoutSessionsGetsLeasesOfTheirOwn(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, mode Option) {
		addr := serveOlderCoordinator(t, func(svc *server.Service) coordinatorv1.CoordinatorServer { return noSessions{svc} })
		var logs testlog.Buffer
		c, err := New(addr, mode, WithTTL(sessionTTL),
			WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		ctx := testCtx(t)
		var leases []*Lease
		for i := range 3 {
			l, err := c.Lock(ctx, fmt.Sprintf("old/%d", i))
			if err != nil {
				t.Fatalf("Lock: %v", err)
			}
			leases = append(leases, l)
		}
		e, err := c.Campaign(ctx, "old-election", nil)
		if err != nil {
			t.Fatalf("Campaign: %v", err)
		}
		waitRenewed(t, leases[0].l, 2) // on its own
		waitRenewed(t, e.l, 1)
		for _, l := range append(leases, &Lease{l: e.l}) {
			if l.l.sessionID != "" || l.TTL() != sessionTTL {
				t.Errorf("%s in session %q with TTL %s; want a lease of its own of the Client's TTL", l, l.l.sessionID, l.TTL())
			}
		}
		if n := strings.Count(logs.String(), "has no sessions"); n != 1 {
			t.Errorf("the fallback was logged %d times; want once: %q", n, logs.String())
		}
		if _, err := c.NewSession(ctx); status.Code(err) != codes.Unimplemented {
			t.Errorf("NewSession = %v; want Unimplemented", err)
		}
	})
}
