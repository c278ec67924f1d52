package coordinatord_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

// stream operations are checked, limited and answered one by one, as the
// unary calls they stand for; a refused operation gets its error and the
// stream stays up for the others.

// opStream is an operation stream read by one goroutine: the test's.
type opStream struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[coordinatorv1.StreamRequest, coordinatorv1.StreamResponse]
	got    map[uint64]*coordinatorv1.StreamResult
}

func openOpStream(t *testing.T, ctx context.Context, c *coordinator) *opStream {
	t.Helper()
	stream, err := c.client.Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &opStream{t: t, stream: stream, got: map[uint64]*coordinatorv1.StreamResult{}}
}

func (s *opStream) send(ops ...*coordinatorv1.StreamOperation) {
	s.t.Helper()
	if err := s.stream.Send(&coordinatorv1.StreamRequest{Operations: ops}); err != nil {
		s.t.Fatal(err)
	}
}

// await reads results until it has those of ids; the stream must stay up.
func (s *opStream) await(ids ...uint64) {
	s.t.Helper()
	for _, id := range ids {
		for s.got[id] == nil {
			resp, err := s.stream.Recv()
			if err != nil {
				s.t.Fatalf("waiting for the result of operation %d: the stream ended: %v", id, err)
			}
			for _, r := range resp.GetResults() {
				s.got[r.GetId()] = r
			}
		}
	}
}

func streamAcquire(id uint64, name, holder string, wait time.Duration) *coordinatorv1.StreamOperation {
	return &coordinatorv1.StreamOperation{Id: id, Operation: &coordinatorv1.StreamOperation_Acquire{Acquire: &coordinatorv1.TryAcquireRequest{
		Name: name, Holder: holder, Ttl: durationpb.New(time.Minute), Wait: durationpb.New(wait),
	}}}
}

func streamCampaign(id uint64, election, candidate string, wait time.Duration) *coordinatorv1.StreamOperation {
	return &coordinatorv1.StreamOperation{Id: id, Operation: &coordinatorv1.StreamOperation_Campaign{Campaign: &coordinatorv1.CampaignRequest{
		Election: election, Candidate: candidate, Ttl: durationpb.New(time.Minute), Wait: durationpb.New(wait),
	}}}
}

func resultError(r *coordinatorv1.StreamResult) error {
	if e := r.GetError(); e != nil {
		return status.ErrorProto(e)
	}
	return nil
}

// deniedName returns the code, ErrorInfo reason and the metadata entry
// naming the refused name of err.
func deniedName(err error) (code codes.Code, reason, field, name string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
			for k, v := range info.GetMetadata() {
				field, name = k, v
			}
		}
	}
	return st.Code(), reason, field, name
}

func TestStreamOperationsAreCheckedOneByOne(t *testing.T) {
	cfg := testConfig(t, "redis")
	cfg.AccessFile = writeAccessFile(t, teamsFile)
	c := start(t, cfg)
	s := openOpStream(t, as(t, "tok-a"), c)
	s.send(
		streamAcquire(1, "team-a/x", "h", 0),
		streamAcquire(2, "team-b/y", "h", 0),
		streamCampaign(3, "team-b/office", "h", 0),
		streamCampaign(4, "shared/office", "h", 0),
		&coordinatorv1.StreamOperation{Id: 5, Operation: &coordinatorv1.StreamOperation_Renew{Renew: &coordinatorv1.RenewRequest{
			Name: "team-ab", Holder: "h", Token: 1, Ttl: durationpb.New(time.Minute),
		}}},
		&coordinatorv1.StreamOperation{Id: 6},
		streamAcquire(7, "", "h", 0), // invalid, not denied
	)
	s.await(1, 2, 3, 4, 5, 6, 7)
	if !s.got[1].GetAcquire().GetAcquired() || !s.got[4].GetCampaign().GetElected() {
		t.Fatalf("allowed operations: %v, %v; want granted", s.got[1], s.got[4])
	}
	for id, want := range map[uint64]struct{ field, name string }{2: {"name", "team-b/y"}, 3: {"election", "team-b/office"}, 5: {"name", "team-ab"}} {
		err := resultError(s.got[id])
		code, reason, field, name := deniedName(err)
		if code != codes.PermissionDenied || reason != "PERMISSION_DENIED" || field != want.field || name != want.name ||
			!strings.Contains(status.Convert(err).Message(), `"`+want.name+`"`) {
			t.Errorf("operation %d: %v; want PermissionDenied, PERMISSION_DENIED naming %s %q", id, s.got[id], want.field, want.name)
		}
	}
	// Exactly the unary call's error.
	_, unary := c.client.TryAcquire(as(t, "tok-a"), &coordinatorv1.TryAcquireRequest{Name: "team-b/y", Holder: "h", Ttl: durationpb.New(time.Minute)})
	if got, want := s.got[2].GetError(), status.Convert(unary).Proto(); got.GetCode() != want.GetCode() || got.GetMessage() != want.GetMessage() || len(got.GetDetails()) != len(want.GetDetails()) {
		t.Errorf("denied operation: %v; want the unary call's %v", got, want)
	}
	if err := resultError(s.got[6]); status.Code(err) != codes.InvalidArgument || fieldOf(err) != "operation" {
		t.Errorf("an operation without a request: %v; want InvalidArgument naming operation", err)
	}
	if err := resultError(s.got[7]); status.Code(err) != codes.InvalidArgument || fieldOf(err) != "name" {
		t.Errorf("an acquire without a name: %v; want InvalidArgument naming name", err)
	}

	// A message whose every operation is denied is answered too, and the
	// stream serves the next.
	s.send(streamAcquire(8, "team-b/z", "h", 0))
	s.await(8)
	if status.Code(resultError(s.got[8])) != codes.PermissionDenied {
		t.Fatalf("operation 8: %v; want PermissionDenied", s.got[8])
	}
	s.send(streamAcquire(9, "team-a/z", "h", 0))
	s.await(9)
	if !s.got[9].GetAcquire().GetAcquired() {
		t.Fatalf("operation 9: %v; want granted", s.got[9])
	}

	// A credential for every name passes everything.
	ops := openOpStream(t, as(t, "ops"), c)
	ops.send(streamAcquire(1, "team-b/y", "h", 0), streamAcquire(2, "other", "h", 0))
	ops.await(1, 2)
	if !ops.got[1].GetAcquire().GetAcquired() || !ops.got[2].GetAcquire().GetAcquired() {
		t.Fatalf("as ops: %v, %v; want granted", ops.got[1], ops.got[2])
	}
}

func TestStreamWaitsAreCappedLikeWaitingCalls(t *testing.T) {
	for _, tc := range waitCaps {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.start(t)
			ctx := servertest.Timeout(t, time.Minute)
			held := servertest.Acquire(t, c.client, "busy", "holder", time.Minute, 0)
			s := openOpStream(t, ctx, c)
			// One after the other, so that w1 is first in the queue.
			s.send(streamAcquire(1, "busy", "w1", time.Minute))
			eventually(t, "one operation waits", func() bool { return metric(t, c.Coordinator, "coordinator_waiting_calls") == 1 })
			s.send(streamAcquire(2, "busy", "w2", time.Minute))
			eventually(t, "two operations wait", func() bool { return metric(t, c.Coordinator, "coordinator_waiting_calls") == 2 })

			s.send(streamAcquire(3, "busy", "w3", time.Minute), streamCampaign(4, "busy", "w3", time.Minute), streamAcquire(5, "busy", "no-wait", 0))
			s.await(3, 4, 5)
			for _, id := range []uint64{3, 4} {
				err := resultError(s.got[id])
				wantRefusal(t, err, tc.env)
				var quota bool
				for _, d := range status.Convert(err).Details() {
					_, quota = d.(*errdetails.QuotaFailure)
				}
				if !quota {
					t.Fatalf("operation %d: %v; want a QuotaFailure", id, err)
				}
			}
			if s.got[5].GetAcquire() == nil || s.got[5].GetAcquire().GetAcquired() {
				t.Fatalf("an acquire without a wait: %v; want refused as held", s.got[5])
			}
			// A unary waiting call on the same connection counts with them.
			if tc.perConn {
				_, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "busy", Holder: "unary", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)})
				wantRefusal(t, err, tc.env)
			}
			if _, err := c.client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: "busy", Holder: "holder", Token: held.GetLease().GetToken()}); err != nil {
				t.Fatal(err)
			}
			s.await(1)
			if !s.got[1].GetAcquire().GetAcquired() {
				t.Fatalf("the first waiter within the cap: %v", s.got[1])
			}
		})
	}
}

func TestStreamAcquiresCountAgainstTheHoldersLeases(t *testing.T) {
	cfg := testConfig(t, "memory")
	cfg.Limits.LeasesPerHolder = 2
	c := start(t, cfg)
	ctx := servertest.Timeout(t, time.Minute)
	s := openOpStream(t, ctx, c)
	s.send(streamAcquire(1, "a", "h", 0), streamCampaign(2, "b", "h", 0))
	s.await(1, 2)
	if !s.got[1].GetAcquire().GetAcquired() || !s.got[2].GetCampaign().GetElected() {
		t.Fatalf("within the cap: %v, %v", s.got[1], s.got[2])
	}
	s.send(streamAcquire(3, "c", "h", 0), streamAcquire(4, "a", "h", 0), streamAcquire(5, "c", "other", 0))
	s.await(3, 4, 5)
	wantRefusal(t, resultError(s.got[3]), "COORDINATOR_MAX_LEASES_PER_HOLDER")
	if !s.got[4].GetAcquire().GetAcquired() {
		t.Fatalf("asking again for a held lease: %v; want granted", s.got[4])
	}
	if !s.got[5].GetAcquire().GetAcquired() {
		t.Fatalf("another holder: %v; want granted", s.got[5])
	}
	// Unary calls see the stream's leases, and a release through the
	// stream frees a place.
	_, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "d", Holder: "h", Ttl: durationpb.New(time.Minute)})
	wantRefusal(t, err, "COORDINATOR_MAX_LEASES_PER_HOLDER")
	s.send(&coordinatorv1.StreamOperation{Id: 6, Operation: &coordinatorv1.StreamOperation_Release{Release: &coordinatorv1.ReleaseRequest{
		Name: "a", Holder: "h", Token: s.got[1].GetAcquire().GetLease().GetToken(),
	}}})
	s.await(6)
	if resp, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "d", Holder: "h", Ttl: durationpb.New(time.Minute)}); err != nil || !resp.GetAcquired() {
		t.Fatalf("after a release through the stream: %v, %v", resp, err)
	}
	if got := metric(t, c.Coordinator, fmt.Sprintf(`coordinator_stream_operations_total{code=%q,op="acquire"}`, codes.ResourceExhausted)); got != 1 {
		t.Errorf("refused stream acquires counted: %v; want 1", got)
	}
}
