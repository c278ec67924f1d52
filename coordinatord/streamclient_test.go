package coordinatord_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordinator-dev/coordinator/coordinatord"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

// The lease calls (TryAcquire, Renew, Release, Campaign, Resign) reach the
// service two ways: as unary RPCs and as operations of an operation stream.
// The service, fault and election tests run both ways through one test
// body: start with a call path hands the test a client whose lease calls go
// that way, every other call being the unary RPC.
const (
	viaUnary  = "unary"
	viaStream = "stream"
)

var callPaths = []string{viaUnary, viaStream}

// forEachPath runs test once per call path, as subtests named after it.
func forEachPath(t *testing.T, test func(t *testing.T, via string)) {
	t.Helper()
	for _, via := range callPaths {
		t.Run(via, func(t *testing.T) { test(t, via) })
	}
}

// startVia is start with the lease calls of c.client made the via way.
func startVia(t *testing.T, cfg coordinatord.Config, via string) *coordinator {
	t.Helper()
	c := start(t, cfg)
	if via == viaStream {
		c.client = streamClient{CoordinatorClient: c.client, s: openTestStream(t, c.client)}
	}
	return c
}

// streamClient makes the lease calls as operations of one operation stream,
// shared by all its callers, and every other call as the unary RPC. It
// behaves as the unary client does, as a streaming client library would: an
// error result is the call's error; a call whose context ends gets the
// context's error (and a waiting acquire or campaign sends a cancel); and a
// wait is cut to end before the context's deadline, which a unary call's
// wait does on the server.
type streamClient struct {
	coordinatorv1.CoordinatorClient
	s *testStream
}

// waitMargin is kept from a context's deadline, as the server keeps its
// deadline margin from an RPC's.
const waitMargin = 50 * time.Millisecond

// waitBefore returns wait cut to end waitMargin before ctx's deadline.
func waitBefore(ctx context.Context, wait *durationpb.Duration) *durationpb.Duration {
	d, ok := ctx.Deadline()
	if !ok || wait.AsDuration() <= 0 {
		return wait
	}
	return durationpb.New(max(min(wait.AsDuration(), time.Until(d)-waitMargin), 0))
}

// call runs op on the stream and returns its result.
func (c streamClient) call(ctx context.Context, op *coordinatorv1.StreamOperation, waits bool) (*coordinatorv1.StreamResult, error) {
	if err := c.s.send(op); err != nil {
		return nil, status.Errorf(codes.Unavailable, "stream send: %v", err)
	}
	r, err := c.s.resultBy(ctx, op.GetId())
	if err != nil {
		if ctx.Err() != nil {
			if waits {
				_ = c.s.send(&coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Cancel{Cancel: op.GetId()}})
			}
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if e := r.GetError(); e != nil {
		return nil, status.ErrorProto(e)
	}
	return r, nil
}

func (c streamClient) TryAcquire(ctx context.Context, req *coordinatorv1.TryAcquireRequest, _ ...grpc.CallOption) (*coordinatorv1.TryAcquireResponse, error) {
	req = proto.CloneOf(req)
	req.Wait = waitBefore(ctx, req.GetWait())
	op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Acquire{Acquire: req}}
	return streamCall(ctx, c, op, req.GetWait().AsDuration() > 0, (*coordinatorv1.StreamResult).GetAcquire)
}

func (c streamClient) Renew(ctx context.Context, req *coordinatorv1.RenewRequest, _ ...grpc.CallOption) (*coordinatorv1.RenewResponse, error) {
	op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Renew{Renew: req}}
	return streamCall(ctx, c, op, false, (*coordinatorv1.StreamResult).GetRenew)
}

func (c streamClient) Release(ctx context.Context, req *coordinatorv1.ReleaseRequest, _ ...grpc.CallOption) (*coordinatorv1.ReleaseResponse, error) {
	op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Release{Release: req}}
	return streamCall(ctx, c, op, false, (*coordinatorv1.StreamResult).GetRelease)
}

func (c streamClient) Campaign(ctx context.Context, req *coordinatorv1.CampaignRequest, _ ...grpc.CallOption) (*coordinatorv1.CampaignResponse, error) {
	req = proto.CloneOf(req)
	req.Wait = waitBefore(ctx, req.GetWait())
	op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Campaign{Campaign: req}}
	return streamCall(ctx, c, op, req.GetTerm() == 0 && req.GetWait().AsDuration() > 0, (*coordinatorv1.StreamResult).GetCampaign)
}

func (c streamClient) Resign(ctx context.Context, req *coordinatorv1.ResignRequest, _ ...grpc.CallOption) (*coordinatorv1.ResignResponse, error) {
	op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Resign{Resign: req}}
	return streamCall(ctx, c, op, false, (*coordinatorv1.StreamResult).GetResign)
}

// streamCall runs op, which waits when waits, and returns the response
// that get takes from its result; a result of another kind is an error.
func streamCall[T any](ctx context.Context, c streamClient, op *coordinatorv1.StreamOperation, waits bool,
	get func(*coordinatorv1.StreamResult) *T,
) (*T, error) {
	r, err := c.call(ctx, op, waits)
	if err != nil {
		return nil, err
	}
	if resp := get(r); resp != nil {
		return resp, nil
	}
	return nil, status.Error(codes.Internal, fmt.Sprintf("stream result %d of the wrong kind: %v", r.GetId(), r))
}

// TestStreamClientFollowsTheUnaryCalls checks the test adapter itself: a
// refusal, an error with its reason and a cancelled wait look as they do
// through the unary client, so that a test that passes both ways tests the
// service, not the adapter.
func TestStreamClientFollowsTheUnaryCalls(t *testing.T) {
	c := startVia(t, testConfig(t, coordinatord.StoreMemory), viaStream)
	held := servertest.MustAcquire(t, c.client, "job", "a", time.Minute)
	if resp := servertest.Acquire(t, c.client, "job", "b", time.Minute, 0); resp.GetAcquired() || resp.GetHolder() != "a" {
		t.Fatalf("refusal = %v; want held by a", resp)
	}
	_, err := c.client.Renew(servertest.Timeout(t, 5*time.Second), &coordinatorv1.RenewRequest{Name: "job", Holder: "b", Token: held.GetToken(), Ttl: servertest.Dur(time.Minute)})
	if code, reason, _ := errorDetails(err); code != codes.FailedPrecondition || reason != "LEASE_NOT_HELD" {
		t.Fatalf("renew by another holder: %v; want FailedPrecondition LEASE_NOT_HELD", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	resp, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "job", Holder: "b", Ttl: servertest.Dur(time.Minute), Wait: servertest.Dur(time.Minute)})
	if err != nil || resp.GetAcquired() || time.Since(start) > 10*time.Second {
		t.Fatalf("a wait past the deadline: %v, %v after %s; want refused before the deadline", resp, err, time.Since(start))
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	quit := make(chan error, 1)
	go func() {
		_, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "job", Holder: "b", Ttl: servertest.Dur(time.Minute), Wait: servertest.Dur(time.Minute)})
		quit <- err
	}()
	servertest.WaitQueued(t, c.client, "job", 1)
	cancel()
	if err := <-quit; errCode(err) != codes.Canceled {
		t.Fatalf("a cancelled wait: %v; want Canceled", err)
	}
	// The cancel reached the server: the waiter left the queue.
	testwait.Until(t, 10*time.Second, "the cancelled waiter left the queue", func() bool {
		desc, err := c.client.Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: "job"})
		if err != nil {
			t.Fatal(err)
		}
		return desc.GetWaiters() == 0
	})
}
