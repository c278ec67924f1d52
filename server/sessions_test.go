package server_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server"
	"github.com/coordinator-dev/coordinator/server/principal"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
)

// serveAsPrincipals serves a bare Service over a memory store behind an
// interceptor that makes each call's "principal" metadata its principal,
// as the access middleware makes the caller's credential.
func serveAsPrincipals(t *testing.T) coordinatorv1.CoordinatorClient {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	svc := server.NewService(st, server.ServiceOptions{})
	as := func(ctx context.Context) context.Context {
		if p := metadata.ValueFromIncomingContext(ctx, "principal"); len(p) > 0 {
			return principal.With(ctx, p[0])
		}
		return ctx
	}
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(as(ctx), req)
	}))
	coordinatorv1.RegisterCoordinatorServer(g, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		svc.Stop()
		g.Stop()
	})
	return coordinatorv1.NewCoordinatorClient(conn)
}

func asPrincipal(t *testing.T, who string) context.Context {
	return metadata.AppendToOutgoingContext(ctxTimeout(t, 20*time.Second), "principal", who)
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

	created, err := c.CreateSession(alice, &coordinatorv1.CreateSessionRequest{Ttl: dur(time.Minute)})
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
		resp, err := c.TryAcquire(alice, &coordinatorv1.TryAcquireRequest{Name: name, Holder: "worker", Ttl: dur(time.Second), SessionId: id})
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

	_, err = c.Renew(alice, &coordinatorv1.RenewRequest{Name: names[0], Holder: "worker", Token: tokens[0], Ttl: dur(time.Minute)})
	wantReason(t, "Renew of an attached lease", err, codes.FailedPrecondition, coordinatorv1.ErrorReason_LEASE_IN_SESSION)

	// The id is alice's capability.
	_, err = c.RenewSession(mallory, &coordinatorv1.RenewSessionRequest{SessionId: id})
	wantReason(t, "RenewSession by another principal", err, codes.PermissionDenied, coordinatorv1.ErrorReason_PERMISSION_DENIED)
	_, err = c.CloseSession(mallory, &coordinatorv1.CloseSessionRequest{SessionId: id})
	wantReason(t, "CloseSession by another principal", err, codes.PermissionDenied, coordinatorv1.ErrorReason_PERMISSION_DENIED)
	_, err = c.TryAcquire(mallory, &coordinatorv1.TryAcquireRequest{Name: "other", Holder: "m", Ttl: dur(time.Second), SessionId: id})
	wantReason(t, "attach by another principal", err, codes.PermissionDenied, coordinatorv1.ErrorReason_PERMISSION_DENIED)

	// Release one: the others stay; close: all go at once.
	if r, err := c.Release(alice, &coordinatorv1.ReleaseRequest{Name: names[0], Holder: "worker", Token: tokens[0]}); err != nil || !r.GetReleased() {
		t.Fatalf("Release = %v, %v", r, err)
	}
	if resp, err := c.TryAcquire(mallory, &coordinatorv1.TryAcquireRequest{Name: names[1], Holder: "m", Ttl: dur(time.Second)}); err != nil || resp.GetAcquired() {
		t.Fatalf("another holder got a lease of the live session: %v, %v", resp, err)
	}
	if _, err := c.CloseSession(alice, &coordinatorv1.CloseSessionRequest{SessionId: id}); err != nil {
		t.Fatalf("CloseSession: %v", err)
	}
	for _, name := range names[1:] {
		resp, err := c.TryAcquire(mallory, &coordinatorv1.TryAcquireRequest{Name: name, Holder: "m", Ttl: dur(time.Second)})
		if err != nil || !resp.GetAcquired() {
			t.Fatalf("%s after the close: %v, %v; want granted", name, resp, err)
		}
	}
	_, err = c.RenewSession(alice, &coordinatorv1.RenewSessionRequest{SessionId: id})
	wantReason(t, "RenewSession after close", err, codes.FailedPrecondition, coordinatorv1.ErrorReason_SESSION_CLOSED)
	_, err = c.TryAcquire(alice, &coordinatorv1.TryAcquireRequest{Name: "late", Holder: "worker", Ttl: dur(time.Second), SessionId: id})
	wantReason(t, "attach after close", err, codes.FailedPrecondition, coordinatorv1.ErrorReason_SESSION_CLOSED)
	_, err = c.RenewSession(alice, &coordinatorv1.RenewSessionRequest{SessionId: "no-such-session"})
	wantReason(t, "RenewSession of an unknown id", err, codes.FailedPrecondition, coordinatorv1.ErrorReason_SESSION_NOT_FOUND)
	_, err = c.RenewSession(alice, &coordinatorv1.RenewSessionRequest{})
	wantReason(t, "RenewSession without an id", err, codes.InvalidArgument, coordinatorv1.ErrorReason_INVALID_FIELD)
	_, err = c.CreateSession(alice, &coordinatorv1.CreateSessionRequest{Ttl: dur(time.Millisecond)})
	wantReason(t, "CreateSession with a ttl below the minimum", err, codes.InvalidArgument, coordinatorv1.ErrorReason_INVALID_FIELD)
}
