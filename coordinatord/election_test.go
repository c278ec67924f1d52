package coordinatord_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/servertest"
	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

func TestElectionBasics(t *testing.T) { forEachPath(t, testElectionBasics) }

func testElectionBasics(t *testing.T, via string) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := startVia(t, testConfig(t, kind), via)
			ctx := servertest.Timeout(t, 10*time.Second)
			campaign := func(candidate, value string) *coordinatorv1.CampaignResponse {
				t.Helper()
				resp, err := c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: "e", Candidate: candidate, Value: []byte(value), Ttl: servertest.Dur(time.Minute)})
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			first := campaign("a", "addr-a")
			if !first.GetElected() || first.GetLeader().GetTerm() == 0 || string(first.GetLeader().GetValue()) != "addr-a" {
				t.Fatalf("first campaign = %v", first)
			}
			if other := campaign("b", "addr-b"); other.GetElected() || other.GetLeader().GetCandidate() != "a" || other.GetRetryAfter().AsDuration() < 50*time.Second {
				t.Fatalf("b's campaign = %v; want not elected, naming a, retry after about a minute", other)
			}
			proclaimed := campaign("a", "addr-a2")
			if !proclaimed.GetElected() || proclaimed.GetLeader().GetTerm() != first.GetLeader().GetTerm() || string(proclaimed.GetLeader().GetValue()) != "addr-a2" {
				t.Fatalf("re-campaign with a new value = %v; want the same term, new value", proclaimed)
			}
			leader, err := c.client.Leader(ctx, &coordinatorv1.LeaderRequest{Election: "e"})
			if err != nil || !leader.GetHasLeader() || string(leader.GetLeader().GetValue()) != "addr-a2" {
				t.Fatalf("Leader = %v, %v", leader, err)
			}
			// The leadership is a lease: Renew works on it with the term.
			if _, err := c.client.Renew(ctx, &coordinatorv1.RenewRequest{Name: "e", Holder: "a", Token: first.GetLeader().GetTerm(), Ttl: servertest.Dur(time.Minute)}); err != nil {
				t.Fatalf("Renew of a leadership: %v", err)
			}
			for _, tc := range []struct {
				candidate string
				term      uint64
				want      bool
			}{
				{"b", first.GetLeader().GetTerm(), false},
				{"a", first.GetLeader().GetTerm() + 1, false},
				{"a", first.GetLeader().GetTerm(), true},
				{"a", first.GetLeader().GetTerm(), false},
			} {
				resp, err := c.client.Resign(ctx, &coordinatorv1.ResignRequest{Election: "e", Candidate: tc.candidate, Term: tc.term})
				if err != nil || resp.GetResigned() != tc.want {
					t.Fatalf("Resign(%s, %d) = %v, %v; want %v", tc.candidate, tc.term, resp, err, tc.want)
				}
			}
			if leader, err := c.client.Leader(ctx, &coordinatorv1.LeaderRequest{Election: "e"}); err != nil || leader.GetHasLeader() {
				t.Fatalf("Leader after resign = %v, %v", leader, err)
			}
			if next := campaign("b", "addr-b"); !next.GetElected() || next.GetLeader().GetTerm() <= first.GetLeader().GetTerm() {
				t.Fatalf("b's campaign after resign = %v", next)
			}
		})
	}
}

// TestElectionsWithCrashesAndResignations runs candidates that win, lead for
// a while, then resign or crash (stop renewing), while observers watch. No two
// candidates may lead at once, terms must only grow, and every observer must
// see every term begin and end, in order.
// TestCampaignInATermOnlyRenewsThatTerm: a leader that names its term
// renews and proclaims in it; once the term ended (expired, or resigned and
// taken by another) the same call fails with LEASE_NOT_HELD instead of
// starting a new term for a leader that does not know it lost.
func TestCampaignInATermOnlyRenewsThatTerm(t *testing.T) {
	forEachPath(t, testCampaignInATermOnlyRenewsThatTerm)
}

func testCampaignInATermOnlyRenewsThatTerm(t *testing.T, via string) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := startVia(t, testConfig(t, kind), via)
			ctx := servertest.Timeout(t, 10*time.Second)
			ttl := 300 * time.Millisecond
			first, err := c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: "e", Candidate: "a", Value: []byte("v1"), Ttl: servertest.Dur(ttl)})
			if err != nil || !first.GetElected() {
				t.Fatalf("Campaign = %v, %v", first, err)
			}
			term := first.GetLeader().GetTerm()
			proclaim := func(value string) (*coordinatorv1.CampaignResponse, error) {
				return c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: "e", Candidate: "a", Value: []byte(value), Ttl: servertest.Dur(ttl), Term: term})
			}
			if resp, err := proclaim("v2"); err != nil || !resp.GetElected() || resp.GetLeader().GetTerm() != term || string(resp.GetLeader().GetValue()) != "v2" {
				t.Fatalf("proclaim in the term = %v, %v; want term %d with v2", resp, err, term)
			}
			time.Sleep(ttl + 200*time.Millisecond) // the term expires
			_, err = proclaim("v3")
			if code, reason, _ := errorDetails(err); code != codes.FailedPrecondition || reason != "LEASE_NOT_HELD" {
				t.Fatalf("proclaim after the term expired: %v; want FailedPrecondition LEASE_NOT_HELD", err)
			}
			if leader, err := c.client.Leader(ctx, &coordinatorv1.LeaderRequest{Election: "e"}); err != nil || leader.GetHasLeader() {
				t.Fatalf("Leader after a late proclaim = %v, %v; want none (no new term)", leader, err)
			}
		})
	}
}

func TestElectionsWithCrashesAndResignations(t *testing.T) {
	forEachPath(t, testElectionsWithCrashesAndResignations)
}

func testElectionsWithCrashesAndResignations(t *testing.T, via string) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := startVia(t, testConfig(t, kind), via)
			const (
				candidates = 5
				ttl        = 300 * time.Millisecond
				runFor     = 3 * time.Second
				observers  = 3
			)
			ctx, cancel := context.WithTimeout(context.Background(), runFor)
			defer cancel()

			observed := make([][]*coordinatorv1.LeaderEvent, observers)
			var obsWG sync.WaitGroup
			obsCtx, stopObservers := context.WithCancel(context.Background())
			for i := range observers {
				stream, err := c.client.Observe(obsCtx, &coordinatorv1.ObserveRequest{Election: "leader"})
				if err != nil {
					t.Fatal(err)
				}
				obsWG.Add(1)
				go func() {
					defer obsWG.Done()
					for {
						ev, err := stream.Recv()
						if err != nil {
							return
						}
						observed[i] = append(observed[i], ev.GetEvent())
					}
				}()
			}

			// answered is the context of a call that runs to its answer even
			// when the test's time is up.
			answered := func(ctx context.Context) context.Context {
				callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				t.Cleanup(cancel)
				return callCtx
			}
			resource := &storetest.Resource{}
			var mu sync.Mutex
			var terms []uint64
			var wg sync.WaitGroup
			for i := range candidates {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(i), 3))
					name := fmt.Sprintf("c%d", i)
					for ctx.Err() == nil {
						sent := time.Now()
						// Calls run to their answer even when the test's time is
						// up: a grant whose answer a cancelled call dropped
						// would be a term the test never heard of.
						resp, err := c.client.Campaign(answered(ctx), &coordinatorv1.CampaignRequest{
							Election: "leader", Candidate: name, Value: []byte(name), Ttl: servertest.Dur(ttl), Wait: servertest.Dur(time.Second),
						})
						if err != nil || !resp.GetElected() {
							continue
						}
						term := resp.GetLeader().GetTerm()
						mu.Lock()
						terms = append(terms, term)
						mu.Unlock()
						// Lead for a few renewals, checked at the resource each time.
						for range 1 + rng.IntN(3) {
							if err := resource.Enter(name, term, sent.Add(ttl-50*time.Millisecond)); err != nil {
								t.Error(err)
								return
							}
							time.Sleep(ttl / 4)
							resource.Leave(name)
							sent = time.Now()
							resp, err := c.client.Campaign(answered(ctx), &coordinatorv1.CampaignRequest{
								Election: "leader", Candidate: name, Value: []byte(name), Ttl: servertest.Dur(ttl),
							})
							if err != nil || !resp.GetElected() {
								break
							}
							if resp.GetLeader().GetTerm() != term {
								// The term had expired: this call started a new one.
								term = resp.GetLeader().GetTerm()
								mu.Lock()
								terms = append(terms, term)
								mu.Unlock()
							}
						}
						if rng.IntN(2) == 0 {
							_, _ = c.client.Resign(ctx, &coordinatorv1.ResignRequest{Election: "leader", Candidate: name, Term: term})
						} else {
							time.Sleep(ttl + 50*time.Millisecond) // crashed: stopped renewing
						}
					}
				}()
			}
			wg.Wait()
			// Let the last term end by expiry and reach the observers.
			time.Sleep(ttl + 1200*time.Millisecond)
			stopObservers()
			obsWG.Wait()

			if len(terms) < 4 {
				t.Fatalf("only %d terms: the test did not exercise elections", len(terms))
			}
			for i := 1; i < len(terms); i++ {
				if terms[i] <= terms[i-1] {
					t.Fatalf("term %d granted after %d", terms[i], terms[i-1])
				}
			}
			for i, events := range observed {
				var seen []uint64
				vacant := true
				for j, ev := range events {
					switch ev.GetKind() {
					case coordinatorv1.LeaderEvent_KIND_ELECTED:
						if !vacant && j > 0 {
							t.Fatalf("observer %d: ELECTED term %d while term %d had not ended: %v", i, ev.GetLeader().GetTerm(), seen[len(seen)-1], events)
						}
						seen = append(seen, ev.GetLeader().GetTerm())
						vacant = false
					case coordinatorv1.LeaderEvent_KIND_VACANT:
						if vacant && j > 0 {
							t.Fatalf("observer %d: VACANT twice in a row: %v", i, events)
						}
						vacant = true
					case coordinatorv1.LeaderEvent_KIND_PROCLAIMED:
						if vacant {
							t.Fatalf("observer %d: PROCLAIMED with no leader", i)
						}
					}
				}
				if !vacant {
					t.Fatalf("observer %d did not see the last term end", i)
				}
				if fmt.Sprint(seen) != fmt.Sprint(terms) {
					t.Fatalf("observer %d saw terms %v; granted %v", i, seen, terms)
				}
			}
		})
	}
}

func TestObserveStartsWithTheCurrentState(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	ctx := servertest.Timeout(t, 10*time.Second)
	stream, err := c.client.Observe(ctx, &coordinatorv1.ObserveRequest{Election: "e"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || !ev.GetInitial() || ev.GetEvent().GetKind() != coordinatorv1.LeaderEvent_KIND_VACANT {
		t.Fatalf("first message of a vacant election = %v, %v; want initial VACANT", ev, err)
	}
	resp, err := c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: "e", Candidate: "a", Value: []byte("v1"), Ttl: servertest.Dur(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || ev.GetInitial() || ev.GetEvent().GetKind() != coordinatorv1.LeaderEvent_KIND_ELECTED || ev.GetEvent().GetLeader().GetTerm() != resp.GetLeader().GetTerm() {
		t.Fatalf("after campaign = %v, %v", ev, err)
	}
	if _, err := c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: "e", Candidate: "a", Value: []byte("v2"), Ttl: servertest.Dur(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || ev.GetInitial() || ev.GetEvent().GetKind() != coordinatorv1.LeaderEvent_KIND_PROCLAIMED || string(ev.GetEvent().GetLeader().GetValue()) != "v2" {
		t.Fatalf("after proclaim = %v, %v", ev, err)
	}
	late, err := c.client.Observe(ctx, &coordinatorv1.ObserveRequest{Election: "e"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := late.Recv(); err != nil || !ev.GetInitial() || ev.GetEvent().GetKind() != coordinatorv1.LeaderEvent_KIND_ELECTED || string(ev.GetEvent().GetLeader().GetValue()) != "v2" {
		t.Fatalf("a late observer's first message = %v, %v; want the initial state", ev, err)
	}
}

func TestCancelledStreamsLeaveNoGoroutines(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	servertest.MustAcquire(t, c.client, "x", "h", time.Minute)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	ctx, cancel := context.WithCancel(context.Background())
	observe, err := c.client.Observe(ctx, &coordinatorv1.ObserveRequest{Election: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := observe.Recv(); err != nil {
		t.Fatal(err)
	}
	ops, err := c.client.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	renew := &coordinatorv1.RenewRequest{Name: "x", Holder: "h", Token: 1, Ttl: servertest.Dur(time.Minute)}
	if err := ops.Send(&coordinatorv1.StreamRequest{Operations: []*coordinatorv1.StreamOperation{
		{Id: 1, Operation: &coordinatorv1.StreamOperation_Renew{Renew: renew}},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.Recv(); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "x", Holder: "w", Ttl: servertest.Dur(time.Second), Wait: servertest.Dur(time.Minute)})
		waiting <- err
	}()
	servertest.WaitQueued(t, c.client, "x", 1)
	cancel()
	if err := <-waiting; errCode(err) != codes.Canceled {
		t.Fatalf("the cancelled wait ended with %v; want Canceled", err)
	}
	for _, recv := range []func() error{
		func() error { _, err := observe.Recv(); return err },
		func() error { _, err := ops.Recv(); return err },
	} {
		if err := recv(); err == nil || errors.Is(err, io.EOF) {
			continue
		} else if code := errCode(err); code != codes.Canceled {
			t.Fatalf("stream ended with %v", err)
		}
	}
}
