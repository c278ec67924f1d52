package coordinatord_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

// testStream is an operation stream under test, safe for concurrent callers: call
// sends one operation and waits for its result; results are routed by id.
type testStream struct {
	t      testing.TB
	stream grpc.BidiStreamingClient[coordinatorv1.StreamRequest, coordinatorv1.StreamResponse]
	cancel context.CancelFunc

	sendMu   sync.Mutex
	nextID   atomic.Uint64
	mu       sync.Mutex
	waiting  map[uint64]chan *coordinatorv1.StreamResult
	early    map[uint64]*coordinatorv1.StreamResult // arrived before anyone waited
	messages atomic.Int64                           // StreamResponse received
	results  atomic.Int64                           // results received, in all of them
	ended    chan struct{}
	err      error // why the stream ended, once ended is closed
}

func openTestStream(t testing.TB, client coordinatorv1.CoordinatorClient) *testStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := client.Stream(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &testStream{
		t: t, stream: stream, cancel: cancel,
		waiting: map[uint64]chan *coordinatorv1.StreamResult{},
		early:   map[uint64]*coordinatorv1.StreamResult{},
		ended:   make(chan struct{}),
	}
	go s.recv()
	t.Cleanup(func() {
		cancel()
		<-s.ended
	})
	return s
}

func (s *testStream) recv() {
	defer close(s.ended)
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.err = err
			return
		}
		s.messages.Add(1)
		s.results.Add(int64(len(resp.GetResults())))
		s.mu.Lock()
		for _, r := range resp.GetResults() {
			if ch, ok := s.waiting[r.GetId()]; ok {
				delete(s.waiting, r.GetId())
				ch <- r
			} else {
				s.early[r.GetId()] = r
			}
		}
		s.mu.Unlock()
	}
}

// send sends ops in one message, numbering those without an id.
func (s *testStream) send(ops ...*coordinatorv1.StreamOperation) error {
	for _, op := range ops {
		if op.Id == 0 {
			op.Id = s.nextID.Add(1)
		}
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(&coordinatorv1.StreamRequest{Operations: ops})
}

// result waits for the result of id.
func (s *testStream) result(id uint64, within time.Duration) (*coordinatorv1.StreamResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	r, err := s.resultBy(ctx, id)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("no result for operation %d after %s", id, within)
	}
	return r, err
}

// resultBy waits for the result of id until ctx ends.
func (s *testStream) resultBy(ctx context.Context, id uint64) (*coordinatorv1.StreamResult, error) {
	s.mu.Lock()
	if r, ok := s.early[id]; ok {
		delete(s.early, id)
		s.mu.Unlock()
		return r, nil
	}
	ch := make(chan *coordinatorv1.StreamResult, 1)
	s.waiting[id] = ch
	s.mu.Unlock()
	select {
	case r := <-ch:
		return r, nil
	case <-s.ended:
		select {
		case r := <-ch:
			return r, nil
		default:
		}
		return nil, fmt.Errorf("the stream ended: %w", s.err)
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.waiting, id)
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

// call sends op alone and returns its result.
func (s *testStream) call(op *coordinatorv1.StreamOperation) (*coordinatorv1.StreamResult, error) {
	if err := s.send(op); err != nil {
		return nil, err
	}
	return s.result(op.GetId(), 30*time.Second)
}

// mustCall is call on the test's goroutine.
func (s *testStream) mustCall(op *coordinatorv1.StreamOperation) *coordinatorv1.StreamResult {
	s.t.Helper()
	r, err := s.call(op)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

func acquireOp(name, holder string, ttl, wait time.Duration) *coordinatorv1.StreamOperation {
	return &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Acquire{Acquire: &coordinatorv1.TryAcquireRequest{
		Name: name, Holder: holder, Ttl: servertest.Dur(ttl), Wait: servertest.Dur(wait),
	}}}
}

func renewOp(name, holder string, token uint64, ttl time.Duration) *coordinatorv1.StreamOperation {
	return &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Renew{Renew: &coordinatorv1.RenewRequest{
		Name: name, Holder: holder, Token: token, Ttl: servertest.Dur(ttl),
	}}}
}

func releaseOp(name, holder string, token uint64) *coordinatorv1.StreamOperation {
	return &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Release{Release: &coordinatorv1.ReleaseRequest{
		Name: name, Holder: holder, Token: token,
	}}}
}

func campaignOp(election, candidate, value string, ttl time.Duration, term uint64) *coordinatorv1.StreamOperation {
	return &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Campaign{Campaign: &coordinatorv1.CampaignRequest{
		Election: election, Candidate: candidate, Value: []byte(value), Ttl: servertest.Dur(ttl), Term: term,
	}}}
}

func resignOp(election, candidate string, term uint64) *coordinatorv1.StreamOperation {
	return &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Resign{Resign: &coordinatorv1.ResignRequest{
		Election: election, Candidate: candidate, Term: term,
	}}}
}

// resultErr is the error a result carries, as the unary call returns it.
func resultErr(r *coordinatorv1.StreamResult) error {
	if e := r.GetError(); e != nil {
		return status.ErrorProto(e)
	}
	return nil
}

func TestStreamOperationsAnswerAsTheirUnaryCalls(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := start(t, testConfig(t, kind))
			s := openTestStream(t, c.client)
			var token, term uint64 // of the steps before
			steps := []struct {
				name  string
				op    func() *coordinatorv1.StreamOperation
				check func(r *coordinatorv1.StreamResult) error
			}{
				{"acquire a free name", func() *coordinatorv1.StreamOperation { return acquireOp("job", "a", time.Minute, 0) },
					func(r *coordinatorv1.StreamResult) error {
						if !r.GetAcquire().GetAcquired() || r.GetAcquire().GetLease().GetHolder() != "a" {
							return fmt.Errorf("want acquired by a")
						}
						token = r.GetAcquire().GetLease().GetToken()
						return nil
					}},
				{"acquire it again as its holder", func() *coordinatorv1.StreamOperation { return acquireOp("job", "a", time.Minute, 0) },
					func(r *coordinatorv1.StreamResult) error {
						if !r.GetAcquire().GetAcquired() || r.GetAcquire().GetLease().GetToken() != token {
							return fmt.Errorf("want the same lease, token %d", token)
						}
						return nil
					}},
				{"acquire a held name", func() *coordinatorv1.StreamOperation { return acquireOp("job", "b", time.Minute, 0) },
					func(r *coordinatorv1.StreamResult) error {
						if r.GetAcquire().GetAcquired() || r.GetAcquire().GetHolder() != "a" || r.GetAcquire().GetRetryAfter() == nil {
							return fmt.Errorf("want refused, held by a, with retry_after")
						}
						return nil
					}},
				{"renew", func() *coordinatorv1.StreamOperation { return renewOp("job", "a", token, 2*time.Minute) },
					func(r *coordinatorv1.StreamResult) error {
						if l := r.GetRenew().GetLease(); l.GetToken() != token || l.GetTtl().AsDuration() != 2*time.Minute {
							return fmt.Errorf("want renewed for 2m with token %d", token)
						}
						return nil
					}},
				{"renew under another token", func() *coordinatorv1.StreamOperation { return renewOp("job", "a", token+1, time.Minute) },
					wantError(codes.FailedPrecondition, "LEASE_NOT_HELD", "")},
				{"release by another holder", func() *coordinatorv1.StreamOperation { return releaseOp("job", "b", token) },
					func(r *coordinatorv1.StreamResult) error {
						if r.GetRelease() == nil || r.GetRelease().GetReleased() {
							return fmt.Errorf("want released=false")
						}
						return nil
					}},
				{"release", func() *coordinatorv1.StreamOperation { return releaseOp("job", "a", token) },
					func(r *coordinatorv1.StreamResult) error {
						if !r.GetRelease().GetReleased() {
							return fmt.Errorf("want released")
						}
						return nil
					}},
				{"campaign", func() *coordinatorv1.StreamOperation { return campaignOp("office", "c", "v1", time.Minute, 0) },
					func(r *coordinatorv1.StreamResult) error {
						l := r.GetCampaign().GetLeader()
						if !r.GetCampaign().GetElected() || l.GetCandidate() != "c" || string(l.GetValue()) != "v1" {
							return fmt.Errorf("want elected with v1")
						}
						term = l.GetTerm()
						return nil
					}},
				{"proclaim in the term", func() *coordinatorv1.StreamOperation { return campaignOp("office", "c", "v2", time.Minute, term) },
					func(r *coordinatorv1.StreamResult) error {
						if l := r.GetCampaign().GetLeader(); l.GetTerm() != term || string(l.GetValue()) != "v2" {
							return fmt.Errorf("want term %d with v2", term)
						}
						return nil
					}},
				{"proclaim in another term", func() *coordinatorv1.StreamOperation { return campaignOp("office", "c", "v3", time.Minute, term+1) },
					wantError(codes.FailedPrecondition, "LEASE_NOT_HELD", "")},
				{"resign", func() *coordinatorv1.StreamOperation { return resignOp("office", "c", term) },
					func(r *coordinatorv1.StreamResult) error {
						if !r.GetResign().GetResigned() {
							return fmt.Errorf("want resigned")
						}
						return nil
					}},
				{"resign again", func() *coordinatorv1.StreamOperation { return resignOp("office", "c", term) },
					func(r *coordinatorv1.StreamResult) error {
						if r.GetResign() == nil || r.GetResign().GetResigned() {
							return fmt.Errorf("want resigned=false")
						}
						return nil
					}},
				{"acquire without a name", func() *coordinatorv1.StreamOperation { return acquireOp("", "a", time.Minute, 0) },
					wantError(codes.InvalidArgument, "INVALID_FIELD", "name")},
				{"acquire with a ttl too short", func() *coordinatorv1.StreamOperation { return acquireOp("job", "a", time.Millisecond, 0) },
					wantError(codes.InvalidArgument, "INVALID_FIELD", "ttl")},
				{"renew without a token", func() *coordinatorv1.StreamOperation { return renewOp("job", "a", 0, time.Minute) },
					wantError(codes.InvalidArgument, "INVALID_FIELD", "token")},
				{"release without a holder", func() *coordinatorv1.StreamOperation { return releaseOp("job", "", 1) },
					wantError(codes.InvalidArgument, "INVALID_FIELD", "holder")},
				{"campaign without an election", func() *coordinatorv1.StreamOperation { return campaignOp("", "c", "", time.Minute, 0) },
					wantError(codes.InvalidArgument, "INVALID_FIELD", "election")},
				{"resign without a candidate", func() *coordinatorv1.StreamOperation { return resignOp("office", "", 1) },
					wantError(codes.InvalidArgument, "INVALID_FIELD", "candidate")},
				{"no operation", func() *coordinatorv1.StreamOperation { return &coordinatorv1.StreamOperation{} },
					wantError(codes.InvalidArgument, "INVALID_FIELD", "operation")},
				{"an empty acquire", func() *coordinatorv1.StreamOperation {
					return &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Acquire{}}
				}, wantError(codes.InvalidArgument, "INVALID_FIELD", "name")},
			}
			for i, step := range steps {
				op := step.op()
				op.Id = uint64(1000 + i)
				r := s.mustCall(op)
				if r.GetId() != op.GetId() {
					t.Fatalf("%s: result for id %d; want %d", step.name, r.GetId(), op.GetId())
				}
				if err := step.check(r); err != nil {
					t.Fatalf("%s: got %v: %v", step.name, r, err)
				}
			}
			// The stream is still up after every failure.
			if r := s.mustCall(acquireOp("after", "a", time.Minute, 0)); !r.GetAcquire().GetAcquired() {
				t.Fatalf("after the failures: %v", r)
			}
		})
	}
}

// wantError checks a result's error: code, ErrorInfo reason and BadRequest
// field (when given), as errorDetails reads them from a unary call.
func wantError(code codes.Code, reason, field string) func(r *coordinatorv1.StreamResult) error {
	return func(r *coordinatorv1.StreamResult) error {
		err := resultErr(r)
		if err == nil {
			return fmt.Errorf("want an error %s %s", code, reason)
		}
		gotCode, gotReason, gotField := errorDetails(err)
		if gotCode != code || gotReason != reason || gotField != field {
			return fmt.Errorf("error %s %q field %q; want %s %q field %q", gotCode, gotReason, gotField, code, reason, field)
		}
		return nil
	}
}

// An operation's error is exactly the unary call's: code, message and
// details.
func TestStreamErrorsAreTheUnaryCallsErrors(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	s := openTestStream(t, c.client)
	ctx := servertest.Timeout(t, 10*time.Second)
	req := &coordinatorv1.TryAcquireRequest{Name: "a//b", Holder: "h", Ttl: servertest.Dur(time.Minute)}
	_, unary := c.client.TryAcquire(ctx, req)
	r := s.mustCall(&coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Acquire{Acquire: req}})
	want, got := status.Convert(unary).Proto(), r.GetError()
	if got == nil || got.GetCode() != want.GetCode() || got.GetMessage() != want.GetMessage() || len(got.GetDetails()) != len(want.GetDetails()) {
		t.Fatalf("stream error %v; want the unary call's %v", got, want)
	}
	for i := range want.GetDetails() {
		if got.GetDetails()[i].GetTypeUrl() != want.GetDetails()[i].GetTypeUrl() || string(got.GetDetails()[i].GetValue()) != string(want.GetDetails()[i].GetValue()) {
			t.Fatalf("detail %d: %v; want %v", i, got.GetDetails()[i], want.GetDetails()[i])
		}
	}
}

func TestManyOperationsInOneMessage(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := start(t, testConfig(t, kind))
			s := openTestStream(t, c.client)
			n := server.MaxStreamOperations
			ops := make([]*coordinatorv1.StreamOperation, n)
			for i := range ops {
				ops[i] = acquireOp(fmt.Sprintf("many/%04d", i), "h", time.Minute, 0)
			}
			if err := s.send(ops...); err != nil {
				t.Fatal(err)
			}
			tokens := make([]uint64, n)
			for i, op := range ops {
				r, err := s.result(op.GetId(), 60*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if !r.GetAcquire().GetAcquired() {
					t.Fatalf("op %d: %v", i, r)
				}
				tokens[i] = r.GetAcquire().GetLease().GetToken()
			}
			// Exactly one result per operation; that results ready together
			// share a message is TestStreamSenderSendsWhatIsReadyInOneMessage's
			// (package server), where it is exact.
			msgs := s.messages.Load()
			t.Logf("%d results in %d messages", n, msgs)
			if got := s.results.Load(); got != int64(n) {
				t.Fatalf("%d operations were answered with %d results", n, got)
			}
			if msgs >= int64(n) {
				t.Errorf("%d results took %d messages: ready results are not sent together", n, msgs)
			}
			releases := make([]*coordinatorv1.StreamOperation, n)
			for i := range releases {
				releases[i] = releaseOp(fmt.Sprintf("many/%04d", i), "h", tokens[i])
			}
			if err := s.send(releases...); err != nil {
				t.Fatal(err)
			}
			for i, op := range releases {
				r, err := s.result(op.GetId(), 60*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if !r.GetRelease().GetReleased() {
					t.Fatalf("release %d: %v", i, r)
				}
			}
			if got := s.results.Load(); got != int64(2*n) {
				t.Fatalf("%d operations were answered with %d results", 2*n, got)
			}
			// Every lease was released: none is left held.
			for i := range n {
				name := fmt.Sprintf("many/%04d", i)
				if d, err := c.client.Describe(servertest.Timeout(t, 10*time.Second), &coordinatorv1.DescribeRequest{Name: name}); err != nil || d.GetHeld() {
					t.Fatalf("%s after its release: %v, %v", name, d, err)
				}
			}
		})
	}
}

func TestMoreOperationsThanAllowedFailTheStream(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	s := openTestStream(t, c.client)
	ops := make([]*coordinatorv1.StreamOperation, server.MaxStreamOperations+1)
	for i := range ops {
		ops[i] = acquireOp(fmt.Sprintf("over/%d", i), "h", time.Minute, 0)
	}
	if err := s.send(ops...); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream is still up")
	}
	if code, reason, field := errorDetails(s.err); code != codes.InvalidArgument || reason != "INVALID_FIELD" || field != "operations" {
		t.Fatalf("stream ended with %v; want InvalidArgument naming operations", s.err)
	}
	if d, err := c.client.Describe(servertest.Timeout(t, 10*time.Second), &coordinatorv1.DescribeRequest{Name: "over/0"}); err != nil || d.GetHeld() {
		t.Fatalf("an operation of the refused message ran: %v, %v", d, err)
	}
}

func TestAWaitingAcquireLetsOtherOperationsProceed(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := start(t, testConfig(t, kind))
			held := servertest.MustAcquire(t, c.client, "busy", "holder", time.Minute)
			s := openTestStream(t, c.client)
			waiting := acquireOp("busy", "waiter", time.Minute, time.Minute)
			if err := s.send(waiting); err != nil {
				t.Fatal(err)
			}
			testwait.Until(t, 30*time.Second, "the acquire waits", func() bool {
				d, err := c.client.Describe(servertest.Timeout(t, 5*time.Second), &coordinatorv1.DescribeRequest{Name: "busy"})
				return err == nil && d.GetWaiters() == 1
			})
			// Meanwhile the stream serves other operations.
			for i := range 5 {
				name := fmt.Sprintf("other/%d", i)
				r := s.mustCall(acquireOp(name, "waiter", time.Minute, 0))
				if !r.GetAcquire().GetAcquired() {
					t.Fatalf("acquire %s while another waits: %v", name, r)
				}
				if r := s.mustCall(releaseOp(name, "waiter", r.GetAcquire().GetLease().GetToken())); !r.GetRelease().GetReleased() {
					t.Fatalf("release %s: %v", name, r)
				}
			}
			if _, err := c.client.Release(servertest.Timeout(t, 5*time.Second), &coordinatorv1.ReleaseRequest{Name: "busy", Holder: "holder", Token: held.GetToken()}); err != nil {
				t.Fatal(err)
			}
			r, err := s.result(waiting.GetId(), 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !r.GetAcquire().GetAcquired() || r.GetAcquire().GetLease().GetToken() <= held.GetToken() {
				t.Fatalf("the waiter after the release: %v", r)
			}
		})
	}
}

func TestEndingAStreamGivesUpItsWaitsButKeepsItsLeases(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := start(t, testConfig(t, kind))
			ctx := servertest.Timeout(t, time.Minute)
			held := servertest.MustAcquire(t, c.client, "queue", "holder", time.Minute)
			s := openTestStream(t, c.client)
			kept := s.mustCall(acquireOp("kept", "leaver", time.Minute, 0))
			if !kept.GetAcquire().GetAcquired() {
				t.Fatalf("acquire: %v", kept)
			}
			if err := s.send(acquireOp("queue", "leaver", time.Minute, time.Minute)); err != nil {
				t.Fatal(err)
			}
			servertest.WaitQueued(t, c.client, "queue", 1) // the stream's acquire waits
			next := goAcquire(t, c, "queue", "next", time.Minute)
			servertest.WaitQueued(t, c.client, "queue", 2) // a second waiter behind it

			s.cancel()                                     // the client goes away
			servertest.WaitQueued(t, c.client, "queue", 1) // the stream's waiter left the queue
			if _, err := c.client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: "queue", Holder: "holder", Token: held.GetToken()}); err != nil {
				t.Fatal(err)
			}
			granted(t, next, 30*time.Second, "the next waiter")
			d, err := c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: "kept"})
			if err != nil || !d.GetHeld() || d.GetLease().GetToken() != kept.GetAcquire().GetLease().GetToken() {
				t.Fatalf("the stream's lease after it ended: %v, %v; want still held", d, err)
			}
		})
	}
}

// TestACancelGivesUpOneWait: a cancel operation takes its waiting acquire
// out of the queue at once (the next waiter is served) and that acquire
// answers Canceled; the cancel itself has no result, the stream goes on,
// and a cancel of an id that does not wait changes nothing.
func TestACancelGivesUpOneWait(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := start(t, testConfig(t, kind))
			ctx := servertest.Timeout(t, time.Minute)
			held := servertest.MustAcquire(t, c.client, "queue", "holder", time.Minute)
			s := openTestStream(t, c.client)
			waiting := acquireOp("queue", "canceller", time.Minute, time.Minute)
			if err := s.send(waiting); err != nil {
				t.Fatal(err)
			}
			servertest.WaitQueued(t, c.client, "queue", 1) // the stream's acquire waits

			cancel := &coordinatorv1.StreamOperation{Id: waiting.GetId() + 1000, Operation: &coordinatorv1.StreamOperation_Cancel{Cancel: waiting.GetId()}}
			unknown := &coordinatorv1.StreamOperation{Id: waiting.GetId() + 1001, Operation: &coordinatorv1.StreamOperation_Cancel{Cancel: 987654}}
			if err := s.send(cancel, unknown); err != nil {
				t.Fatal(err)
			}
			r, err := s.result(waiting.GetId(), 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if code := codes.Code(r.GetError().GetCode()); code != codes.Canceled {
				t.Fatalf("the cancelled acquire answered %v; want Canceled", r)
			}
			servertest.WaitQueued(t, c.client, "queue", 0) // the cancelled waiter left the queue
			if r := s.mustCall(acquireOp("other", "canceller", time.Minute, 0)); !r.GetAcquire().GetAcquired() {
				t.Fatalf("the stream after a cancel: %v", r)
			}
			if _, err := s.result(cancel.GetId(), 500*time.Millisecond); err == nil {
				t.Fatal("a cancel got a result of its own")
			}
			if d, err := c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: "queue"}); err != nil || d.GetLease().GetToken() != held.GetToken() {
				t.Fatalf("queue after the cancel: %v, %v; want still held by its holder", d, err)
			}
		})
	}
}

// A client that closes its side gets the results of what was in flight,
// waits included, before the stream ends.
func TestClosingTheSendSideFinishesWhatIsInFlight(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	ctx := servertest.Timeout(t, time.Minute)
	held := servertest.MustAcquire(t, c.client, "later", "holder", time.Minute)
	s := openTestStream(t, c.client)
	waiting := acquireOp("later", "waiter", time.Minute, time.Minute)
	now := acquireOp("now", "waiter", time.Minute, 0)
	if err := s.send(waiting, now); err != nil {
		t.Fatal(err)
	}
	servertest.WaitQueued(t, c.client, "later", 1) // the acquire waits
	if err := s.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.result(now.GetId(), 30*time.Second); err != nil || !r.GetAcquire().GetAcquired() {
		t.Fatalf("the acquire without a wait: %v, %v", r, err)
	}
	if _, err := c.client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: "later", Holder: "holder", Token: held.GetToken()}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.result(waiting.GetId(), 30*time.Second); err != nil || !r.GetAcquire().GetAcquired() {
		t.Fatalf("the waiting acquire: %v, %v", r, err)
	}
	select {
	case <-s.ended:
		if s.err == nil || !strings.Contains(s.err.Error(), "EOF") {
			t.Fatalf("the stream ended with %v; want EOF", s.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end")
	}
}

func TestStopEndsStreamsWithUnavailable(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := start(t, testConfig(t, kind))
			servertest.MustAcquire(t, c.client, "stop", "holder", time.Minute)
			s := openTestStream(t, c.client)
			waiting := acquireOp("stop", "waiter", time.Minute, time.Minute)
			if err := s.send(waiting); err != nil {
				t.Fatal(err)
			}
			servertest.WaitQueued(t, c.client, "stop", 1) // the acquire waits
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				c.Stop()
			}()
			select {
			case <-s.ended:
			case <-time.After(30 * time.Second):
				t.Fatal("the stream is still open after Stop")
			}
			if status.Code(s.err) != codes.Unavailable {
				t.Fatalf("the stream ended with %v; want Unavailable", s.err)
			}
			// The wait in flight was answered first: shutting down.
			s.mu.Lock()
			r := s.early[waiting.GetId()]
			s.mu.Unlock()
			if r != nil && status.Code(resultErr(r)) != codes.Unavailable {
				t.Fatalf("the waiting acquire at Stop: %v; want Unavailable", r)
			}
			<-stopped
		})
	}
}

// Many goroutines on few names, over a few shared streams: the fencing
// token at each resource never goes backwards and no two holders are ever
// inside at once while both believe their leases valid.
func TestContendedLeasesNeverOverlapThroughStreams(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := start(t, testConfig(t, kind))
			const (
				streams = 4
				workers = 32
				rounds  = 25
				ttl     = 150 * time.Millisecond
			)
			names, resources := contendedResources()
			ss := make([]*testStream, streams)
			for i := range ss {
				ss[i] = openTestStream(t, c.client)
			}
			var grants atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 12))
					s := ss[w%streams]
					holder := fmt.Sprintf("worker-%d", w)
					for range rounds {
						name := names[rng.IntN(len(names))]
						sent := time.Now()
						r, err := s.call(acquireOp(name, holder, ttl, time.Duration(rng.IntN(50))*time.Millisecond))
						if err == nil {
							err = resultErr(r)
						}
						if err != nil {
							t.Error(err)
							return
						}
						if !r.GetAcquire().GetAcquired() {
							continue
						}
						grants.Add(1)
						token := r.GetAcquire().GetLease().GetToken()
						if !actInside(t, resources[name], holder, token, sent.Add(ttl-30*time.Millisecond), rng) {
							return
						}
						if rng.IntN(3) == 0 {
							continue // vanish: the lease must expire
						}
						r, err = s.call(releaseOp(name, holder, token))
						if err == nil {
							err = resultErr(r)
						}
						if err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if grants.Load() == 0 {
				t.Fatal("nothing was granted")
			}
		})
	}
}
