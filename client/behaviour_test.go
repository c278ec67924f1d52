package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/backoff"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

// The behaviour cases of testdata/behaviour.json, which the Python and
// TypeScript clients run too: each case is a subtest against one
// coordinator on the memory store, its names under a prefix of its own.

// behaviourStep is a step as the file has it: "do" and its arguments.
type behaviourStep map[string]any

func (s behaviourStep) str(key string) string { v, _ := s[key].(string); return v }
func (s behaviourStep) num(key string) int64  { v, _ := s[key].(float64); return int64(v) }

// expect is the step's "expect": a word ("granted"), a boolean, or an
// object ({"holders": 1}), whose fields want reads.
func (s behaviourStep) expect() any { return s["expect"] }

// want reads a number, a boolean or a string of an object expectation.
func want[T any](s behaviourStep, key string) (T, bool) {
	e, _ := s.expect().(map[string]any)
	v, ok := e[key].(T)
	return v, ok
}

// heldGrant is a grant a case named: a Lease, or a Leadership.
type heldGrant struct {
	token     uint64
	sessionID string
	done      <-chan struct{}
	err       func() error
	giveUp    func(context.Context) (bool, error)
}

func leaseGrant(l *Lease) heldGrant {
	return heldGrant{l.Token(), l.SessionID(), l.Done(), l.Err, l.Release}
}

func leadershipGrant(e *Leadership) heldGrant {
	return heldGrant{e.Term(), e.SessionID(), e.Done(), e.Err, e.Resign}
}

// groupGrants are the grants a group named as stands for: the group, and
// each member as "<as>.<name>" (name without the case's prefix), which
// has the member's token and ends with the group.
func groupGrants(as, prefix string, g *Group) map[string]heldGrant {
	grants := map[string]heldGrant{as: {0, g.SessionID(), g.Done(), g.Err, g.Release}}
	for _, l := range g.Leases() {
		grants[as+"."+strings.TrimPrefix(l.Name, prefix)] = heldGrant{l.Token, g.SessionID(), g.Done(), g.Err, g.Release}
	}
	return grants
}

func TestBehaviourCases(t *testing.T) {
	raw, err := os.ReadFile("testdata/behaviour.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Name  string          `json:"name"`
			Steps []behaviourStep `json:"steps"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("no behaviour cases")
	}
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	for i, bc := range file.Cases {
		t.Run(bc.Name, func(t *testing.T) {
			t.Parallel()
			run := &behaviourRun{t: t, coord: coord, prefix: fmt.Sprintf("behaviour/%d/", i),
				clients: map[string]*Client{}, grants: map[string]heldGrant{}, started: map[string]chan groupOutcome{}}
			for n, step := range bc.Steps {
				t.Logf("step %d: %v", n, step)
				run.step(step)
			}
		})
	}
}

type behaviourRun struct {
	t       *testing.T
	coord   *coordtest.Coordinator
	prefix  string
	clients map[string]*Client
	grants  map[string]heldGrant
	// started are the background acquisitions (start_lock_all) by 'as'.
	started map[string]chan groupOutcome
	// observer describes and lists: it holds nothing.
	observer *Client
}

// groupOutcome is how a background LockAll ended.
type groupOutcome struct {
	group *Group
	err   error
}

func (r *behaviourRun) client(name string) *Client {
	r.t.Helper()
	c, ok := r.clients[name]
	if !ok {
		r.t.Fatalf("no client %q connected", name)
	}
	return c
}

func (r *behaviourRun) grant(name string) heldGrant {
	r.t.Helper()
	g, ok := r.grants[name]
	if !ok {
		r.t.Fatalf("no grant %q held", name)
	}
	return g
}

// tried checks the outcome of one try against want ("granted", the
// default, "not_acquired" or "invalid_argument") and names the grants as
// the step says (grants makes them from the 'as' name).
func (r *behaviourRun) tried(s behaviourStep, grants func(as string) map[string]heldGrant, err error) {
	r.t.Helper()
	switch s.expect() {
	case nil, "granted":
		if err != nil {
			r.t.Fatalf("%v: %v; want granted", s, err)
		}
		if s.str("as") != "" {
			maps.Copy(r.grants, grants(s.str("as")))
		}
	case "not_acquired":
		if !errors.Is(err, ErrNotAcquired) {
			r.t.Fatalf("%v: %v; want not acquired", s, err)
		}
	case "invalid_argument":
		if status.Code(err) != codes.InvalidArgument {
			r.t.Fatalf("%v: %v; want InvalidArgument", s, err)
		}
	default:
		r.t.Fatalf("%v: unknown expectation", s)
	}
}

// names are the step's "names", with the case's prefix.
func (r *behaviourRun) names(s behaviourStep) []string {
	list, _ := s["names"].([]any)
	names := make([]string, len(list))
	for i, n := range list {
		names[i] = r.prefix + n.(string)
	}
	return names
}

// members are the step's "members", with the case's prefix.
func (r *behaviourRun) members(s behaviourStep) []Member {
	list, _ := s["members"].([]any)
	members := make([]Member, len(list))
	for i, m := range list {
		m := behaviourStep(m.(map[string]any))
		members[i] = Member{Name: r.prefix + m.str("name"), Capacity: uint32(m.num("capacity")), Weight: uint32(m.num("weight"))}
	}
	return members
}

func (r *behaviourRun) step(s behaviourStep) {
	t := r.t
	t.Helper()
	ctx := testCtx(t)
	name, election, as := r.prefix+s.str("name"), r.prefix+s.str("election"), s.str("as")
	switch s.str("do") {
	case "connect":
		var opts []Option
		if ttl := s.num("ttl_ms"); ttl > 0 {
			opts = append(opts, WithTTL(time.Duration(ttl)*time.Millisecond))
		}
		r.clients[s.str("client")] = dial(t, r.coord, opts...)
	case "close":
		if err := r.client(s.str("client")).Close(); err != nil {
			t.Fatal(err)
		}
	case "lock":
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := r.client(s.str("client")).Lock(lctx, name)
		if err != nil {
			t.Fatalf("lock %q: %v", name, err)
		}
		r.grants[as] = leaseGrant(l)
	case "try_lock", "acquire", "read_lock", "write_lock":
		c := r.client(s.str("client"))
		var (
			l   *Lease
			err error
		)
		switch s.str("do") {
		case "try_lock":
			l, err = c.TryLock(ctx, name)
		case "acquire":
			l, err = c.Semaphore(name, s.num("capacity")).TryAcquire(ctx, s.num("weight"))
		case "read_lock":
			l, err = c.RWMutex(name).TryRLock(ctx)
		case "write_lock":
			l, err = c.RWMutex(name).TryLock(ctx)
		}
		r.tried(s, func(as string) map[string]heldGrant { return map[string]heldGrant{as: leaseGrant(l)} }, err)
	case "lock_all":
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		g, err := r.client(s.str("client")).LockAll(lctx, r.names(s))
		if err != nil {
			t.Fatalf("%v: %v", s, err)
		}
		maps.Copy(r.grants, groupGrants(as, r.prefix, g))
	case "try_lock_all", "acquire_all":
		c := r.client(s.str("client"))
		var (
			g   *Group
			err error
		)
		if s.str("do") == "try_lock_all" {
			g, err = c.TryLockAll(ctx, r.names(s))
		} else {
			g, err = c.TryAcquireAll(ctx, r.members(s))
		}
		r.tried(s, func(as string) map[string]heldGrant { return groupGrants(as, r.prefix, g) }, err)
	case "start_lock_all":
		names, c := r.names(s), r.client(s.str("client"))
		done := make(chan groupOutcome, 1)
		r.started[as] = done
		go func() {
			g, err := c.LockAll(ctx, names)
			done <- groupOutcome{g, err}
		}()
		testwait.Until(t, 5*time.Second, names[0]+" has a waiter", func() bool {
			d, err := r.observe().Describe(ctx, names[0])
			return err == nil && d.Waiters > 0
		})
	case "await":
		within := time.Duration(s.num("within_ms")) * time.Millisecond
		started, ok := r.started[as]
		if !ok {
			t.Fatalf("%v: nothing started as %q", s, as)
		}
		select {
		case out := <-started:
			if out.err != nil {
				t.Fatalf("%v: %v", s, out.err)
			}
			maps.Copy(r.grants, groupGrants(as, r.prefix, out.group))
		case <-time.After(within):
			t.Fatalf("%v: not granted after %s", s, within)
		}
	case "campaign":
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		e, err := r.client(s.str("client")).Campaign(cctx, election, []byte(s.str("value")))
		if err != nil {
			t.Fatalf("campaign %q: %v", election, err)
		}
		r.grants[as] = leadershipGrant(e)
	case "release":
		released, err := r.grant(s.str("lease")).giveUp(ctx)
		if err != nil || s.expect() != map[bool]string{true: "released", false: "noop"}[released] {
			t.Fatalf("%v: released %t, %v; want as expected, and no error", s, released, err)
		}
	case "resign":
		if resigned, err := r.grant(s.str("lease")).giveUp(ctx); err != nil || !resigned {
			t.Fatalf("%v: resigned %t, %v", s, resigned, err)
		}
	case "end_session":
		session, err := r.client(s.str("client")).Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(r.coord.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		if _, err := coordinatorv1.NewCoordinatorClient(conn).CloseSession(ctx, &coordinatorv1.CloseSessionRequest{SessionId: session.ID()}); err != nil {
			t.Fatal(err)
		}
	case "expect_lost":
		within := time.Duration(s.num("within_ms")) * time.Millisecond
		g := r.grant(s.str("lease"))
		waitDone(t, g.done, within, s.str("lease")+" lost")
		if err := g.err(); !errors.Is(err, ErrLost) && !errors.Is(err, ErrExpired) {
			t.Fatalf("%v: ended with %v; want lost or expired", s, err)
		}
	case "expect_held":
		if err := r.grant(s.str("lease")).err(); err != nil {
			t.Fatalf("%v: %v; want held", s, err)
		}
	case "expect_token":
		if got, above := r.grant(s.str("lease")).token, r.grant(s.str("above")).token; got <= above {
			t.Fatalf("%v: token %d is not above %d", s, got, above)
		}
	case "expect_same_session":
		leases, _ := s["leases"].([]any)
		sessions := map[string]bool{}
		for _, l := range leases {
			sessions[r.grant(l.(string)).sessionID] = true
		}
		if len(leases) == 0 || len(sessions) != 1 || sessions[""] {
			t.Fatalf("%v: in sessions %v; want one, not empty", s, sessions)
		}
	case "describe":
		d, err := r.observe().Describe(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		holders, ok := want[float64](s, "holders")
		waiters, some := want[float64](s, "waiters")
		if !ok || len(d.Holders) != int(holders) || some && d.Waiters != int(waiters) {
			t.Fatalf("%v: %d holders, %d waiters", s, len(d.Holders), d.Waiters)
		}
	case "list":
		n := 0
		for _, err := range r.observe().List(ctx, r.prefix+s.str("prefix_of")) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if count, ok := want[float64](s, "count"); !ok || n != int(count) {
			t.Fatalf("%v: %d leases", s, n)
		}
	case "leader":
		info, err := r.client(s.str("client")).Leader(ctx, election)
		value, hasValue := want[string](s, "value")
		switch vacant, _ := want[bool](s, "vacant"); {
		case vacant && !errors.Is(err, ErrNoLeader), hasValue && (err != nil || string(info.Value) != value), !vacant && !hasValue:
			t.Fatalf("%v: leader %+v, %v", s, info, err)
		}
	case "classify":
		c, ok := code.Code_value[s.str("code")]
		isTransient, ok1 := want[bool](s, "transient")
		isUnknown, ok2 := want[bool](s, "outcome_unknown")
		err := status.Error(codes.Code(c), "behaviour case")
		if !ok || !ok1 || !ok2 || transient(err) != isTransient || outcomeUnknown(err) != isUnknown {
			t.Fatalf("%v: transient %t, outcome unknown %t", s, transient(err), outcomeUnknown(err))
		}
	case "backoff":
		schedules := map[string]func() *backoff.Backoff{"retry": newCallBackoff, "leader": newLeaderBackoff}
		newBackoff, ok := schedules[s.str("schedule")]
		bounds, _ := s["expect_ms"].([]any)
		if !ok || len(bounds) != int(s.num("attempts")) {
			t.Fatalf("%v: unknown schedule, or not a range an attempt", s)
		}
		// Many schedules, so that the jitter reaches its bounds.
		for range 500 {
			b := newBackoff()
			for i, bound := range bounds {
				lo, hi := bound.([]any)[0].(float64), bound.([]any)[1].(float64)
				if d := b.Next(); d < time.Duration(lo)*time.Millisecond || d > time.Duration(hi)*time.Millisecond {
					t.Fatalf("%v: delay %d is %s", s, i+1, d)
				}
			}
		}
	case "leader_campaigns_again":
		again, ok := s.expect().(bool)
		if !ok {
			t.Fatalf("%v: expect is no bool", s)
		}
		// Run as leader until the function ran twice: once when it does
		// not campaign again.
		want := map[bool]int32{true: 2, false: 1}[again]
		var calls atomic.Int32
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		err := dial(t, r.coord).RunAsLeader(rctx, r.prefix+"again", nil, func(context.Context) error {
			if calls.Add(1) == want {
				cancel()
			}
			return nil
		})
		if err != nil || calls.Load() != want {
			t.Fatalf("%v: the function ran %d times (%v); want %d", s, calls.Load(), err, want)
		}
	default:
		t.Fatalf("unknown step %v", s)
	}
}

// observe is the client that describes and lists.
func (r *behaviourRun) observe() *Client {
	if r.observer == nil {
		r.observer = dial(r.t, r.coord)
	}
	return r.observer
}
