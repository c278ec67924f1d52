package access

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/principal"
)

// TestSessionsAreTheCapabilityOfACredential: Authenticate gives each
// credential a principal of its own that shows nothing of its token, and a
// credential limited to some prefixes may still keep sessions (they name no
// lease); the leases it attaches are checked as any.
func TestSessionsAreTheCapabilityOfACredential(t *testing.T) {
	file := filepath.Join(t.TempDir(), "access")
	if err := os.WriteFile(file, []byte("tok-a team-a/\ntok-b team-b/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{File: file})
	if err != nil {
		t.Fatal(err)
	}
	as := func(token string) context.Context {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
		ctx, err := a.Authenticate(ctx)
		if err != nil {
			t.Fatalf("Authenticate(%s): %v", token, err)
		}
		return ctx
	}
	ctxA, ctxB := as("tok-a"), as("tok-b")
	pa, pb := principal.Of(ctxA), principal.Of(ctxB)
	if pa == "" || pa == pb || strings.Contains(pa, "tok-a") {
		t.Fatalf("principals %q and %q: want two, neither showing its token", pa, pb)
	}
	if again := principal.Of(as("tok-a")); again != pa {
		t.Fatalf("the same token's principal changed: %q then %q", pa, again)
	}
	for _, req := range []any{
		&coordinatorv1.CreateSessionRequest{}, &coordinatorv1.RenewSessionRequest{SessionId: "x"},
		&coordinatorv1.CloseSessionRequest{SessionId: "x"}, &coordinatorv1.DescribeSessionRequest{SessionId: "x"},
	} {
		if err := a.check(ctxA, req); err != nil {
			t.Errorf("%T by a prefix-limited credential: %v; want allowed", req, err)
		}
	}
	attach := &coordinatorv1.TryAcquireRequest{Name: "team-b/x", SessionId: "x"}
	if err := a.check(ctxA, attach); status.Code(err) != codes.PermissionDenied {
		t.Errorf("attaching a name outside the prefixes: %v; want PermissionDenied", err)
	}
}
