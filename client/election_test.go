package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

func TestCampaignProclaimResign(t *testing.T) {
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		clock := clockwork.NewFakeClock()
		c := dial(t, coord, withClock(clock))
		if _, err := c.Leader(ctx, "office"); !errors.Is(err, ErrNoLeader) {
			t.Fatalf("Leader of an empty election = %v; want ErrNoLeader", err)
		}
		e, err := c.Campaign(ctx, "office", []byte("v1"))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Proclaim(ctx, []byte("v2")); err != nil {
			t.Fatalf("Proclaim: %v", err)
		}
		// Its session renewed, the term keeps the proclaimed value.
		renew(t, clock, e.l.session)
		renew(t, clock, e.l.session)
		info, err := c.Leader(ctx, "office")
		if err != nil {
			t.Fatal(err)
		}
		if info.Term != e.Term() || info.Candidate != e.Candidate() || string(info.Value) != "v2" || string(e.Value()) != "v2" {
			t.Fatalf("Leader = %+v; want term %d by %s with v2", info, e.Term(), e.Candidate())
		}
		if _, err := e.Resign(ctx); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		if !errors.Is(e.Err(), ErrReleased) {
			t.Fatalf("Err after Resign = %v", e.Err())
		}
		if _, err := c.Leader(ctx, "office"); !errors.Is(err, ErrNoLeader) {
			t.Fatalf("Leader after Resign = %v; want ErrNoLeader", err)
		}
		if err := e.Proclaim(ctx, []byte("v3")); !errors.Is(err, ErrReleased) {
			t.Fatalf("Proclaim after Resign = %v; want ErrReleased", err)
		}
	})
}

func TestRunAsLeaderHandsOver(t *testing.T) {
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		type term struct {
			who   string
			term  uint64
			ended chan error // fn's context's cause
		}
		terms := make(chan *term, 10)
		run := func(c *Client, who string) chan error {
			done := make(chan error, 1)
			go func() {
				done <- c.RunAsLeader(ctx, "handover", []byte(who), func(lctx context.Context) error {
					info, err := c.Leader(lctx, "handover")
					tm := &term{who: who, term: info.Term, ended: make(chan error, 1)}
					if err != nil {
						t.Errorf("%s: Leader while leading: %v", who, err)
					}
					terms <- tm
					<-lctx.Done()
					tm.ended <- context.Cause(lctx)
					return lctx.Err()
				})
			}()
			return done
		}
		// b's session is renewed every 333ms, and its loss noticed as soon.
		a, b := dial(t, coord), dial(t, coord, WithTTL(time.Second))
		aDone := run(a, "a")
		first := <-terms
		if first.who != "a" {
			t.Fatalf("first leader %s; want a", first.who)
		}
		bDone := run(b, "b")
		select {
		case tm := <-terms:
			t.Fatalf("%s elected while a leads", tm.who)
		case <-time.After(500 * time.Millisecond):
		}

		// Closing a ends its term at once and hands over to b.
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if cause := <-first.ended; !errors.Is(cause, ErrClosed) {
			t.Fatalf("a's context ended with %v; want ErrClosed", cause)
		}
		if err := <-aDone; !errors.Is(err, ErrClosed) {
			t.Fatalf("a's RunAsLeader = %v; want ErrClosed", err)
		}
		second := <-terms
		if second.who != "b" || second.term <= first.term {
			t.Fatalf("after a: %s in term %d; want b in a term above %d", second.who, second.term, first.term)
		}

		// An operator ends b's session: its fn's context is cancelled
		// (lost), and b campaigns again into a new term, in a new session.
		s, err := b.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.API().CloseSession(ctx, &coordinatorv1.CloseSessionRequest{SessionId: s.ID()}); err != nil {
			t.Fatal(err)
		}
		if cause := <-second.ended; !errors.Is(cause, ErrLost) {
			t.Fatalf("b's context ended with %v; want ErrLost", cause)
		}
		third := <-terms
		if third.who != "b" || third.term <= second.term {
			t.Fatalf("after deposing b: %s in term %d; want b in a term above %d", third.who, third.term, second.term)
		}
		_ = b.Close()
		if err := <-bDone; !errors.Is(err, ErrClosed) {
			t.Fatalf("b's RunAsLeader = %v; want ErrClosed", err)
		}
	})
}

func TestRunAsLeaderReturnsWhenContextEnds(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	c := dial(t, coord)
	ctx, cancel := context.WithCancel(testCtx(t))
	var runs int
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		done <- c.RunAsLeader(ctx, "errs", nil, func(ctx context.Context) error {
			mu.Lock()
			runs++
			n := runs
			mu.Unlock()
			if n == 3 {
				cancel()
			}
			return fmt.Errorf("run %d failed", n)
		})
	}()
	if err := <-done; err != nil {
		t.Fatalf("RunAsLeader = %v; want nil when ctx ends", err)
	}
	if runs != 3 {
		t.Fatalf("fn ran %d times; want 3 (an error does not stop the loop)", runs)
	}
	if _, err := c.Leader(testCtx(t), "errs"); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader after RunAsLeader returned = %v; want ErrNoLeader (resigned)", err)
	}
}

func TestObserveDeliversChangesInOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		watcher, leader := dial(t, coord), dial(t, coord)
		events := watcher.Observe(ctx, "observed")
		next := expectEvents(t, events)

		next(Vacant, 0, "")
		e1, err := leader.Campaign(ctx, "observed", []byte("v1"))
		if err != nil {
			t.Fatal(err)
		}
		next(Elected, e1.Term(), "v1")
		if err := e1.Proclaim(ctx, []byte("v2")); err != nil {
			t.Fatal(err)
		}
		next(Proclaimed, e1.Term(), "v2")
		if _, err := e1.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		next(Vacant, 0, "")
		e2, err := leader.Campaign(ctx, "observed", []byte("v3"))
		if err != nil {
			t.Fatal(err)
		}
		if e2.Term() <= e1.Term() {
			t.Fatalf("term %d after %d", e2.Term(), e1.Term())
		}
		next(Elected, e2.Term(), "v3")
	})
}

func TestObserveSurvivesCoordinatorRestart(t *testing.T) {
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		ctx := testCtx(t)
		watcher, leader := dial(t, coord), dial(t, coord, WithTTL(2*time.Second))
		e1, err := leader.Campaign(ctx, "restarted", []byte("v1"))
		if err != nil {
			t.Fatal(err)
		}
		next := expectEvents(t, watcher.Observe(ctx, "restarted"))
		next(Elected, e1.Term(), "v1")

		coord.Restart()

		if t.Name() == "TestObserveSurvivesCoordinatorRestart/memory" {
			// The new coordinator forgot the term: vacant, then the leader
			// finds out and campaigns into a new term.
			next(Vacant, 0, "")
			waitDone(t, e1.Done(), 10*time.Second, "leadership forgotten by the coordinator")
			if !errors.Is(e1.Err(), ErrLost) {
				t.Fatalf("Err = %v; want ErrLost", e1.Err())
			}
			e2, err := leader.Campaign(ctx, "restarted", []byte("v2"))
			if err != nil {
				t.Fatal(err)
			}
			next(Elected, e2.Term(), "v2")
			return
		}
		// Redis kept the term: the reconnect's current state equals what was
		// delivered, so nothing is repeated; the next event is the next change.
		if err := e1.Proclaim(ctx, []byte("v2")); err != nil {
			// The restarted coordinator may not be serving yet.
			eventually(t, "proclaim after restart", func() bool { return e1.Proclaim(ctx, []byte("v2")) == nil })
		}
		next(Proclaimed, e1.Term(), "v2")
		if e1.Err() != nil {
			t.Fatalf("leadership ended across a restart with Redis: %v", e1.Err())
		}
	})
}

// expectEvents returns a function that asserts the next event.
func expectEvents(t *testing.T, events <-chan LeaderEvent) func(kind EventKind, term uint64, value string) {
	return func(kind EventKind, term uint64, value string) {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("events closed; want %s", kind)
			}
			if ev.Kind != kind || ev.Leader.Term != term || !bytes.Equal(ev.Leader.Value, []byte(value)) {
				t.Fatalf("event %s term %d value %q; want %s term %d value %q",
					ev.Kind, ev.Leader.Term, ev.Leader.Value, kind, term, value)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no event after 20s; want %s", kind)
		}
	}
}

func TestObserveClosesWhenContextEnds(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	c := dial(t, coord)
	ctx, cancel := context.WithCancel(testCtx(t))
	events := c.Observe(ctx, "closing")
	<-events // current state
	cancel()
	for range events {
	}
	// And on Close.
	events = c.Observe(testCtx(t), "closing")
	<-events
	_ = c.Close()
	for range events {
	}
	if _, ok := <-c.Observe(testCtx(t), "closing"); ok {
		t.Fatal("Observe on a closed Client delivered an event")
	}
}

func TestTransition(t *testing.T) {
	leader := func(term uint64, value string) *coordinatorv1.LeaderEvent {
		return &coordinatorv1.LeaderEvent{Kind: coordinatorv1.LeaderEvent_KIND_ELECTED,
			Leader: &coordinatorv1.Leader{Election: "e", Term: term, Value: []byte(value)}}
	}
	vacant := &coordinatorv1.LeaderEvent{Kind: coordinatorv1.LeaderEvent_KIND_VACANT}
	delivered := func(kind EventKind, term uint64, value string) *LeaderEvent {
		ev := &LeaderEvent{Kind: kind}
		if kind != Vacant {
			ev.Leader = LeaderInfo{Election: "e", Term: term, Value: []byte(value)}
		}
		return ev
	}
	type want struct {
		kind  EventKind
		term  uint64
		value string
	}
	for _, tc := range []struct {
		name string
		last *LeaderEvent
		ev   *coordinatorv1.LeaderEvent
		want []want
	}{
		{"first: vacant", nil, vacant, []want{{Vacant, 0, ""}}},
		{"first: elected", nil, leader(5, "a"), []want{{Elected, 5, "a"}}},
		{"same term and value again", delivered(Elected, 5, "a"), leader(5, "a"), nil},
		{"same term after a proclamation again", delivered(Proclaimed, 5, "b"), leader(5, "b"), nil},
		{"vacant again", delivered(Vacant, 0, ""), vacant, nil},
		{"value changed while away", delivered(Elected, 5, "a"), leader(5, "b"), []want{{Proclaimed, 5, "b"}}},
		{"term changed while away", delivered(Elected, 5, "a"), leader(7, "a"), []want{{Vacant, 0, ""}, {Elected, 7, "a"}}},
		{"elected after vacant", delivered(Vacant, 0, ""), leader(7, "c"), []want{{Elected, 7, "c"}}},
		{"term ended", delivered(Proclaimed, 5, "b"), vacant, []want{{Vacant, 0, ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := transition(tc.last, tc.ev)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v; want %v", got, tc.want)
			}
			for i, w := range tc.want {
				if got[i].Kind != w.kind || got[i].Leader.Term != w.term || string(got[i].Leader.Value) != w.value {
					t.Fatalf("event %d: got %v; want %v", i, got[i], w)
				}
			}
		})
	}
}
