package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/principal"
	"github.com/coordinator-dev/coordinator/server/servertest"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
)

// serveAsPrincipals serves a bare Service over a memory store behind an
// interceptor that makes each call's "principal" metadata its principal,
// as the access middleware makes the caller's credential.
func serveAsPrincipals(t *testing.T) coordinatorv1.CoordinatorClient {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	as := func(ctx context.Context) context.Context {
		if p := metadata.ValueFromIncomingContext(ctx, "principal"); len(p) > 0 {
			return principal.With(ctx, p[0])
		}
		return ctx
	}
	_, conn := serveStore(t, st, server.ServiceOptions{},
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(as(ctx), req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, &principalStream{ServerStream: ss, ctx: as(ss.Context())})
		}))
	return coordinatorv1.NewCoordinatorClient(conn)
}

type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *principalStream) Context() context.Context { return s.ctx }

func asPrincipal(t *testing.T, who string) context.Context {
	return metadata.AppendToOutgoingContext(servertest.Timeout(t, 20*time.Second), "principal", who)
}

// wantReason checks err's code and ErrorInfo reason.
func wantReason(t *testing.T, what string, err error, code codes.Code, reason coordinatorv1.ErrorReason) {
	t.Helper()
	st := status.Convert(err)
	got := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			got = info.GetReason()
		}
	}
	if st.Code() != code || got != reason.String() {
		t.Errorf("%s: %v (reason %q); want %s, %s", what, err, got, code, reason)
	}
}

func TestSessionsThroughTheService(t *testing.T) {
	t.Parallel()
	c := serveAsPrincipals(t)
	alice, mallory := asPrincipal(t, "token:alice"), asPrincipal(t, "token:mallory")

	created, err := c.CreateSession(alice, &coordinatorv1.CreateSessionRequest{Ttl: servertest.Dur(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	if id == "" || created.GetSession().GetTtl().AsDuration() != time.Minute {
		t.Fatalf("CreateSession = %v", created)
	}
	names := []string{"queue/1", "queue/2", "queue/3"}
	var tokens []uint64
	for _, name := range names {
		resp, err := c.TryAcquire(alice, &coordinatorv1.TryAcquireRequest{Name: name, Holder: "worker", Ttl: servertest.Dur(time.Second), SessionId: id})
		if err != nil || !resp.GetAcquired() || resp.GetLease().GetSessionId() != id || resp.GetLease().GetTtl().AsDuration() != time.Minute {
			t.Fatalf("TryAcquire(%s) in the session = %v, %v; want a lease of the session's ttl", name, resp, err)
		}
		tokens = append(tokens, resp.GetLease().GetToken())
	}
	if _, err := c.RenewSession(alice, &coordinatorv1.RenewSessionRequest{SessionId: id}); err != nil {
		t.Fatalf("RenewSession: %v", err)
	}
	d, err := c.DescribeSession(alice, &coordinatorv1.DescribeSessionRequest{SessionId: id})
	if err != nil || len(d.GetNames()) != 3 {
		t.Fatalf("DescribeSession = %v, %v; want 3 names", d, err)
	}
	list, err := c.List(alice, &coordinatorv1.ListRequest{Prefix: "queue/"})
	if err != nil || len(list.GetLeases()) != 3 || list.GetLeases()[0].GetSessionId() != id {
		t.Fatalf("List = %v, %v; want each lease with its session", list, err)
	}

	_, err = c.Renew(alice, &coordinatorv1.RenewRequest{Name: names[0], Holder: "worker", Token: tokens[0], Ttl: servertest.Dur(time.Minute)})
	wantReason(t, "Renew of an attached lease", err, codes.FailedPrecondition, coordinatorv1.ErrorReason_LEASE_IN_SESSION)

	// The id is alice's capability.
	_, err = c.RenewSession(mallory, &coordinatorv1.RenewSessionRequest{SessionId: id})
	wantReason(t, "RenewSession by another principal", err, codes.PermissionDenied, coordinatorv1.ErrorReason_PERMISSION_DENIED)
	_, err = c.CloseSession(mallory, &coordinatorv1.CloseSessionRequest{SessionId: id})
	wantReason(t, "CloseSession by another principal", err, codes.PermissionDenied, coordinatorv1.ErrorReason_PERMISSION_DENIED)
	_, err = c.TryAcquire(mallory, &coordinatorv1.TryAcquireRequest{Name: "other", Holder: "m", Ttl: servertest.Dur(time.Second), SessionId: id})
	wantReason(t, "attach by another principal", err, codes.PermissionDenied, coordinatorv1.ErrorReason_PERMISSION_DENIED)

	// Release one: the others stay; close: all go at once.
	if r, err := c.Release(alice, &coordinatorv1.ReleaseRequest{Name: names[0], Holder: "worker", Token: tokens[0]}); err != nil || !r.GetReleased() {
		t.Fatalf("Release = %v, %v", r, err)
	}
	if resp, err := c.TryAcquire(mallory, &coordinatorv1.TryAcquireRequest{Name: names[1], Holder: "m", Ttl: servertest.Dur(time.Second)}); err != nil || resp.GetAcquired() {
		t.Fatalf("another holder got a lease of the live session: %v, %v", resp, err)
	}
	if _, err := c.CloseSession(alice, &coordinatorv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatalf("CloseSession: %v", err)
	}
	for _, name := range names[1:] {
		resp, err := c.TryAcquire(mallory, &coordinatorv1.TryAcquireRequest{Name: name, Holder: "m", Ttl: servertest.Dur(time.Second)})
		if err != nil || !resp.GetAcquired() {
			t.Fatalf("%s after the close: %v, %v; want granted", name, resp, err)
		}
	}
	_, err = c.RenewSession(alice, &coordinatorv1.RenewSessionRequest{SessionId: id})
	wantReason(t, "RenewSession after close", err, codes.FailedPrecondition, coordinatorv1.ErrorReason_SESSION_CLOSED)
	_, err = c.TryAcquire(alice, &coordinatorv1.TryAcquireRequest{Name: "late", Holder: "worker", Ttl: servertest.Dur(time.Second), SessionId: id})
	wantReason(t, "attach after close", err, codes.FailedPrecondition, coordinatorv1.ErrorReason_SESSION_CLOSED)
	_, err = c.RenewSession(alice, &coordinatorv1.RenewSessionRequest{SessionId: "no-such-session"})
	wantReason(t, "RenewSession of an unknown id", err, codes.FailedPrecondition, coordinatorv1.ErrorReason_SESSION_NOT_FOUND)
	_, err = c.RenewSession(alice, &coordinatorv1.RenewSessionRequest{})
	wantReason(t, "RenewSession without an id", err, codes.InvalidArgument, coordinatorv1.ErrorReason_INVALID_FIELD)
	_, err = c.CreateSession(alice, &coordinatorv1.CreateSessionRequest{Ttl: servertest.Dur(time.Millisecond)})
	wantReason(t, "CreateSession with a ttl below the minimum", err, codes.InvalidArgument, coordinatorv1.ErrorReason_INVALID_FIELD)
}

// A leadership attached to a session lasts as long as the session, and the
// operation stream renews sessions as the unary call does, capability
// check included.
func TestCampaignsAndStreamRenewalsInASession(t *testing.T) {
	t.Parallel()
	c := serveAsPrincipals(t)
	alice, mallory := asPrincipal(t, "token:alice"), asPrincipal(t, "token:mallory")
	created, err := c.CreateSession(alice, &coordinatorv1.CreateSessionRequest{Ttl: servertest.Dur(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()

	won, err := c.Campaign(alice, &coordinatorv1.CampaignRequest{Election: "office", Candidate: "alice", Value: []byte("a"), Ttl: servertest.Dur(time.Second), SessionId: id})
	if err != nil || !won.GetElected() {
		t.Fatalf("Campaign in the session = %v, %v; want elected", won, err)
	}
	term := won.GetLeader().GetTerm()
	if got := won.GetLeader().GetExpiresAt().AsTime(); got.Before(time.Now().Add(30 * time.Second)) {
		t.Fatalf("the term ends at %v; want the session's end, a minute away", got)
	}
	proclaimed, err := c.Campaign(alice, &coordinatorv1.CampaignRequest{Election: "office", Candidate: "alice", Value: []byte("b"), Ttl: servertest.Dur(time.Second), Term: term, SessionId: id})
	if err != nil || !proclaimed.GetElected() || proclaimed.GetLeader().GetTerm() != term {
		t.Fatalf("proclaiming in the term = %v, %v; want the same term", proclaimed, err)
	}
	_, err = c.Campaign(mallory, &coordinatorv1.CampaignRequest{Election: "elsewhere", Candidate: "m", Ttl: servertest.Dur(time.Second), SessionId: id})
	wantReason(t, "Campaign in another principal's session", err, codes.PermissionDenied, coordinatorv1.ErrorReason_PERMISSION_DENIED)
	_, err = c.Campaign(alice, &coordinatorv1.CampaignRequest{Election: "office", Candidate: "alice", Ttl: servertest.Dur(time.Second), SessionId: string([]byte{0x7f})})
	wantReason(t, "Campaign with a session id that is not printable", err, codes.InvalidArgument, coordinatorv1.ErrorReason_INVALID_FIELD)

	renew := func(ctx context.Context) *coordinatorv1.StreamResult {
		t.Helper()
		stream, err := c.Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = stream.CloseSend() }()
		op := &coordinatorv1.StreamOperation{Id: 7, Operation: &coordinatorv1.StreamOperation_RenewSession{RenewSession: &coordinatorv1.RenewSessionRequest{SessionId: id}}}
		if err := stream.Send(&coordinatorv1.StreamRequest{Operations: []*coordinatorv1.StreamOperation{op}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetId() != 7 {
			t.Fatalf("the stream answered %v, %v; want one result of id 7", resp, err)
		}
		return resp.GetResults()[0]
	}
	if got := renew(alice).GetRenewSession().GetSession(); got.GetId() != id || got.GetTtl().AsDuration() != time.Minute {
		t.Fatalf("renew_session over the stream = %v; want the session renewed", got)
	}
	refused := renew(mallory).GetError()
	wantReason(t, "renew_session by another principal over the stream", status.ErrorProto(refused), codes.PermissionDenied, coordinatorv1.ErrorReason_PERMISSION_DENIED)

	if _, err := c.CloseSession(alice, &coordinatorv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Leader(alice, &coordinatorv1.LeaderRequest{Election: "office"}); err != nil || l.GetHasLeader() {
		t.Fatalf("Leader after the session closed: %v, %v; want none, the term ended with it", l, err)
	}
	next, err := c.Campaign(mallory, &coordinatorv1.CampaignRequest{Election: "office", Candidate: "m", Ttl: servertest.Dur(time.Second)})
	if err != nil || !next.GetElected() || next.GetLeader().GetTerm() <= term {
		t.Fatalf("the next Campaign = %v, %v; want elected in a later term than %d", next, err, term)
	}
}
