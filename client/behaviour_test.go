package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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
)

// The behaviour cases of testdata/behaviour.json, which the Python and
// TypeScript clients run too: each case is a subtest against one
// coordinator on the memory store, its names under a prefix of its own.

type behaviourCase struct {
	Name  string          `json:"name"`
	Steps []behaviourStep `json:"steps"`
}

type behaviourStep struct {
	Do        string     `json:"do"`
	Client    string     `json:"client"`
	Name      string     `json:"name"`
	Election  string     `json:"election"`
	Value     string     `json:"value"`
	As        string     `json:"as"`
	Lease     string     `json:"lease"`
	Leases    []string   `json:"leases"`
	Above     string     `json:"above"`
	Capacity  int64      `json:"capacity"`
	Weight    int64      `json:"weight"`
	WithinMS  int        `json:"within_ms"`
	PrefixOf  string     `json:"prefix_of"`
	Code      string     `json:"code"`
	Schedule  string     `json:"schedule"`
	Attempts  int        `json:"attempts"`
	ExpectMS  [][2]int64 `json:"expect_ms"`
	RawExpect json.RawMessage
}

// behaviourExpect is a step's "expect", which is a word ("granted") or an
// object ({"holders": 1}) or a boolean, by step.
type behaviourExpect struct {
	Word           string
	Bool           *bool
	Holders        *int    `json:"holders"`
	Waiters        *int    `json:"waiters"`
	Count          *int    `json:"count"`
	Value          *string `json:"value"`
	Vacant         bool    `json:"vacant"`
	Transient      *bool   `json:"transient"`
	OutcomeUnknown *bool   `json:"outcome_unknown"`
}

func (s *behaviourStep) UnmarshalJSON(b []byte) error {
	type plain behaviourStep
	var raw struct {
		plain
		Expect json.RawMessage `json:"expect"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*s = behaviourStep(raw.plain)
	s.RawExpect = raw.Expect
	return nil
}

func (s *behaviourStep) expect(t *testing.T) behaviourExpect {
	t.Helper()
	var e behaviourExpect
	if len(s.RawExpect) == 0 {
		return e
	}
	switch s.RawExpect[0] {
	case '"':
		if err := json.Unmarshal(s.RawExpect, &e.Word); err != nil {
			t.Fatal(err)
		}
	case 't', 'f':
		var b bool
		if err := json.Unmarshal(s.RawExpect, &b); err != nil {
			t.Fatal(err)
		}
		e.Bool = &b
	default:
		if err := json.Unmarshal(s.RawExpect, &e); err != nil {
			t.Fatal(err)
		}
	}
	return e
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

func TestBehaviourCases(t *testing.T) {
	raw, err := os.ReadFile("testdata/behaviour.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []behaviourCase `json:"cases"`
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
				clients: map[string]*Client{}, grants: map[string]heldGrant{}}
			for n, step := range bc.Steps {
				t.Logf("step %d: %s", n, step.Do)
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
	// observer describes and lists: it holds nothing.
	observer *Client
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
// default, or "not_acquired") and names a grant as the step says.
func (r *behaviourRun) tried(s behaviourStep, g heldGrant, err error) {
	r.t.Helper()
	want := s.expect(r.t).Word
	switch want {
	case "", "granted":
		if err != nil {
			r.t.Fatalf("%s %q: %v; want granted", s.Do, s.Name, err)
		}
		if s.As != "" {
			r.grants[s.As] = g
		}
	case "not_acquired":
		if !errors.Is(err, ErrNotAcquired) {
			r.t.Fatalf("%s %q: %v; want not acquired", s.Do, s.Name, err)
		}
	default:
		r.t.Fatalf("%s: unknown expectation %q", s.Do, want)
	}
}

func (r *behaviourRun) step(s behaviourStep) {
	t := r.t
	t.Helper()
	ctx := testCtx(t)
	name, election := r.prefix+s.Name, r.prefix+s.Election
	switch s.Do {
	case "connect":
		r.clients[s.Client] = dial(t, r.coord)
	case "close":
		if err := r.client(s.Client).Close(); err != nil {
			t.Fatal(err)
		}
	case "lock":
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := r.client(s.Client).Lock(lctx, name)
		if err != nil {
			t.Fatalf("lock %q: %v", name, err)
		}
		r.grants[s.As] = leaseGrant(l)
	case "try_lock", "acquire", "read_lock", "write_lock":
		c := r.client(s.Client)
		var (
			l   *Lease
			err error
		)
		switch s.Do {
		case "try_lock":
			l, err = c.TryLock(ctx, name)
		case "acquire":
			l, err = c.Semaphore(name, s.Capacity).TryAcquire(ctx, s.Weight)
		case "read_lock":
			l, err = c.RWMutex(name).TryRLock(ctx)
		case "write_lock":
			l, err = c.RWMutex(name).TryLock(ctx)
		}
		var g heldGrant
		if err == nil {
			g = leaseGrant(l)
		}
		r.tried(s, g, err)
	case "campaign":
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		e, err := r.client(s.Client).Campaign(cctx, election, []byte(s.Value))
		if err != nil {
			t.Fatalf("campaign %q: %v", election, err)
		}
		r.grants[s.As] = leadershipGrant(e)
	case "release", "resign":
		want := s.expect(t).Word
		released, err := r.grant(s.Lease).giveUp(ctx)
		switch {
		case err != nil:
			t.Fatalf("%s %s: %v; want no error", s.Do, s.Lease, err)
		case s.Do == "resign" && !released:
			t.Fatalf("resign %s: not resigned", s.Lease)
		case want == "released" && !released, want == "noop" && released:
			t.Fatalf("%s %s: released %t; want %s", s.Do, s.Lease, released, want)
		case s.Do == "release" && want != "released" && want != "noop":
			t.Fatalf("release: unknown expectation %q", want)
		}
	case "end_session":
		session, err := r.client(s.Client).Session(ctx)
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
		// The cases give the renewal period (TTL/renewals_per_ttl) as the
		// time to notice; the SDK spreads each renewal by the proto's
		// renewal jitter, up to that much later.
		within := time.Duration(s.WithinMS) * time.Millisecond * (100 + renewalJitterPercent) / 100
		g := r.grant(s.Lease)
		waitDone(t, g.done, within, s.Lease+" lost")
		if err := g.err(); !errors.Is(err, ErrLost) && !errors.Is(err, ErrExpired) {
			t.Fatalf("%s ended with %v; want lost or expired", s.Lease, err)
		}
	case "expect_held":
		if err := r.grant(s.Lease).err(); err != nil {
			t.Fatalf("%s: %v; want held", s.Lease, err)
		}
	case "expect_token":
		if got, above := r.grant(s.Lease).token, r.grant(s.Above).token; got <= above {
			t.Fatalf("%s's token %d is not above %s's, %d", s.Lease, got, s.Above, above)
		}
	case "expect_same_session":
		first := r.grant(s.Leases[0]).sessionID
		for _, l := range s.Leases {
			if got := r.grant(l).sessionID; got == "" || got != first {
				t.Fatalf("%s is in session %q; want %q, which is not empty", l, got, first)
			}
		}
	case "describe":
		want := s.expect(t)
		d, err := r.observe().Describe(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if want.Holders == nil || len(d.Holders) != *want.Holders || want.Waiters != nil && d.Waiters != *want.Waiters {
			t.Fatalf("describe %q: %d holders, %d waiters; want %s", name, len(d.Holders), d.Waiters, s.RawExpect)
		}
	case "list":
		want := s.expect(t)
		n := 0
		for _, err := range r.observe().List(ctx, r.prefix+s.PrefixOf) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if want.Count == nil || n != *want.Count {
			t.Fatalf("list %q: %d leases; want %s", r.prefix+s.PrefixOf, n, s.RawExpect)
		}
	case "leader":
		want := s.expect(t)
		info, err := r.client(s.Client).Leader(ctx, election)
		switch {
		case want.Vacant:
			if !errors.Is(err, ErrNoLeader) {
				t.Fatalf("leader of %q: %+v, %v; want vacant", election, info, err)
			}
		case want.Value != nil:
			if err != nil || string(info.Value) != *want.Value {
				t.Fatalf("leader of %q: %+v, %v; want value %q", election, info, err, *want.Value)
			}
		default:
			t.Fatalf("leader: unknown expectation %s", s.RawExpect)
		}
	case "classify":
		want := s.expect(t)
		c, ok := code.Code_value[s.Code]
		if !ok || want.Transient == nil || want.OutcomeUnknown == nil {
			t.Fatalf("classify: code %q or expectation %s unknown", s.Code, s.RawExpect)
		}
		err := status.Error(codes.Code(c), "behaviour case")
		if transient(err) != *want.Transient || outcomeUnknown(err) != *want.OutcomeUnknown {
			t.Fatalf("%s: transient %t, outcome unknown %t; want %s", s.Code, transient(err), outcomeUnknown(err), s.RawExpect)
		}
	case "backoff":
		schedules := map[string]func() *backoff.Backoff{"retry": newCallBackoff, "leader": newLeaderBackoff}
		newBackoff, ok := schedules[s.Schedule]
		if !ok || len(s.ExpectMS) != s.Attempts {
			t.Fatalf("backoff: schedule %q unknown, or %d attempts for %d ranges", s.Schedule, s.Attempts, len(s.ExpectMS))
		}
		// Many schedules, so that the jitter reaches its bounds.
		for range 500 {
			b := newBackoff()
			for i, bounds := range s.ExpectMS {
				d := b.Next()
				if d < time.Duration(bounds[0])*time.Millisecond || d > time.Duration(bounds[1])*time.Millisecond {
					t.Fatalf("%s delay %d is %s; want %d to %d ms", s.Schedule, i+1, d, bounds[0], bounds[1])
				}
			}
		}
	case "leader_campaigns_again":
		want := s.expect(t)
		if want.Bool == nil || leaderCampaignsAgain != *want.Bool {
			t.Fatalf("leader campaigns again: %t; want %s", leaderCampaignsAgain, s.RawExpect)
		}
	default:
		t.Fatalf("unknown step %q", s.Do)
	}
}

// observe is the client that describes and lists.
func (r *behaviourRun) observe() *Client {
	if r.observer == nil {
		r.observer = dial(r.t, r.coord)
	}
	return r.observer
}
