package coordinatord_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordinator-dev/coordinator/coordinatord"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/testcert"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

// writeAccessFile writes an access file into a directory of t's.
func writeAccessFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "access")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func as(t *testing.T, token string) context.Context {
	ctx := servertest.Timeout(t, 30*time.Second)
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// call makes each kind of call that names a lease or an election, on name,
// and returns its error.
var calls = map[string]func(ctx context.Context, c coordinatorv1.CoordinatorClient, name string) error{
	"TryAcquire": func(ctx context.Context, c coordinatorv1.CoordinatorClient, name string) error {
		_, err := c.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: "h", Ttl: durationpb.New(time.Minute)})
		return err
	},
	"Renew": func(ctx context.Context, c coordinatorv1.CoordinatorClient, name string) error {
		_, err := c.Renew(ctx, &coordinatorv1.RenewRequest{Name: name, Holder: "h", Token: 1, Ttl: durationpb.New(time.Minute)})
		if status.Code(err) == codes.FailedPrecondition {
			return nil // allowed, and not held
		}
		return err
	},
	"Release": func(ctx context.Context, c coordinatorv1.CoordinatorClient, name string) error {
		_, err := c.Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: "h", Token: 1})
		return err
	},
	"Describe": func(ctx context.Context, c coordinatorv1.CoordinatorClient, name string) error {
		_, err := c.Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
		return err
	},
	"Campaign": func(ctx context.Context, c coordinatorv1.CoordinatorClient, name string) error {
		_, err := c.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: name, Candidate: "h", Ttl: durationpb.New(time.Minute)})
		return err
	},
	"Resign": func(ctx context.Context, c coordinatorv1.CoordinatorClient, name string) error {
		_, err := c.Resign(ctx, &coordinatorv1.ResignRequest{Election: name, Candidate: "h", Term: 1})
		return err
	},
	"Leader": func(ctx context.Context, c coordinatorv1.CoordinatorClient, name string) error {
		_, err := c.Leader(ctx, &coordinatorv1.LeaderRequest{Election: name})
		return err
	},
	"Observe": func(ctx context.Context, c coordinatorv1.CoordinatorClient, name string) error {
		stream, err := c.Observe(ctx, &coordinatorv1.ObserveRequest{Election: name})
		if err == nil {
			_, err = stream.Recv()
		}
		return err
	},
}

const teamsFile = `
# tokens of two teams, one for operators
tok-a   team-a/ shared/
tok-b   team-b/
ops     *
`

func TestEveryCallIsCheckedAgainstTheCallersPrefixes(t *testing.T) {
	cfg := testConfig(t, "redis")
	cfg.AccessFile = writeAccessFile(t, teamsFile)
	c := start(t, cfg)
	tests := []struct {
		token, name string
		want        codes.Code
	}{
		{"tok-a", "team-a/job", codes.OK},
		{"tok-a", "shared/x", codes.OK},
		{"tok-a", "team-b/job", codes.PermissionDenied},
		{"tok-a", "team-ab", codes.PermissionDenied},
		{"tok-b", "team-b/job", codes.OK},
		{"tok-b", "team-a/job", codes.PermissionDenied},
		{"ops", "team-a/job", codes.OK},
		{"ops", "anything", codes.OK},
		{"nope", "team-a/job", codes.Unauthenticated},
		{"", "team-a/job", codes.Unauthenticated},
	}
	for method, call := range calls {
		for _, tc := range tests {
			err := call(as(t, tc.token), c.client, tc.name)
			if got := status.Code(err); got != tc.want {
				t.Errorf("%s(%q) as %q: %v; want %s", method, tc.name, tc.token, err, tc.want)
			}
			if tc.want == codes.PermissionDenied && !strings.Contains(status.Convert(err).Message(), `"`+tc.name+`"`) {
				t.Errorf("%s(%q) as %q: %v; want the name in the message", method, tc.name, tc.token, err)
			}
		}
	}
	if _, err := healthpb.NewHealthClient(c.conn).Check(servertest.Timeout(t, 5*time.Second), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health without a credential: %v", err)
	}
}

func TestAnInvalidNameIsRefusedAsInvalidNotDenied(t *testing.T) {
	cfg := testConfig(t, "memory")
	cfg.AccessFile = writeAccessFile(t, teamsFile)
	c := start(t, cfg)
	_, err := c.client.TryAcquire(as(t, "tok-a"), &coordinatorv1.TryAcquireRequest{Holder: "h", Ttl: durationpb.New(time.Minute)})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an empty name: %v; want InvalidArgument", err)
	}
}

func TestListShowsOnlyWhatTheCallerMaySee(t *testing.T) {
	cfg := testConfig(t, "redis")
	cfg.AccessFile = writeAccessFile(t, teamsFile)
	c := start(t, cfg)
	for _, name := range []string{"team-a/1", "team-a/2", "team-b/1", "shared/1", "other/1"} {
		if _, err := c.client.TryAcquire(as(t, "ops"), &coordinatorv1.TryAcquireRequest{Name: name, Holder: "h", Ttl: durationpb.New(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(token, prefix string) []string {
		t.Helper()
		var names []string
		req := &coordinatorv1.ListRequest{Prefix: prefix, PageSize: 1}
		for {
			resp, err := c.client.List(as(t, token), req)
			if err != nil {
				t.Fatalf("List(%q) as %s: %v", prefix, token, err)
			}
			for _, l := range resp.GetLeases() {
				names = append(names, l.GetName())
			}
			if resp.GetNextPageToken() == "" {
				slices.Sort(names)
				return names
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
	tests := []struct {
		token, prefix, want string
	}{
		{"tok-a", "", "shared/1 team-a/1 team-a/2"},
		{"tok-a", "team-", "team-a/1 team-a/2"},
		{"tok-a", "team-a/", "team-a/1 team-a/2"},
		{"tok-a", "team-a/2", "team-a/2"},
		{"tok-a", "team-b/", ""},
		{"tok-b", "", "team-b/1"},
		{"ops", "", "other/1 shared/1 team-a/1 team-a/2 team-b/1"},
	}
	for _, tc := range tests {
		if got := strings.Join(list(tc.token, tc.prefix), " "); got != tc.want {
			t.Errorf("List(%q) as %s = %q, want %q", tc.prefix, tc.token, got, tc.want)
		}
	}
}

func TestAuthTokenMayUseEveryNameBesideTheFile(t *testing.T) {
	cfg := testConfig(t, "memory")
	cfg.AccessFile = writeAccessFile(t, "tok-a team-a/\n")
	cfg.AuthToken = "root"
	c := start(t, cfg)
	if err := calls["TryAcquire"](as(t, "root"), c.client, "anything"); err != nil {
		t.Fatalf("the auth token: %v", err)
	}
	if err := calls["TryAcquire"](as(t, "tok-a"), c.client, "anything"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a file token: %v; want PermissionDenied", err)
	}
}

func TestReloadSwapsGoodRulesAndKeepsThemOverABadFile(t *testing.T) {
	cfg := testConfig(t, "memory")
	cfg.AccessFile = writeAccessFile(t, "tok-a team-a/\n")
	c := start(t, cfg)
	try := func(token, name string) codes.Code {
		return status.Code(calls["Describe"](as(t, token), c.client, name))
	}
	if try("tok-a", "team-a/x") != codes.OK || try("tok-b", "team-b/x") != codes.Unauthenticated {
		t.Fatal("the first rules are not in force")
	}

	if err := os.WriteFile(cfg.AccessFile, []byte("tok-a team-c/\ntok-b team-b/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Server().ReloadAccess(); err != nil {
		t.Fatal(err)
	}
	if try("tok-a", "team-a/x") != codes.PermissionDenied || try("tok-a", "team-c/x") != codes.OK || try("tok-b", "team-b/x") != codes.OK {
		t.Fatal("the new rules are not in force")
	}

	if err := os.WriteFile(cfg.AccessFile, []byte("tok-a team-a/\ntok-b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := c.Server().ReloadAccess()
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a bad file: %v; want an error naming line 2", err)
	}
	if try("tok-a", "team-c/x") != codes.OK || try("tok-a", "team-a/x") != codes.PermissionDenied || try("tok-b", "team-b/x") != codes.OK {
		t.Fatal("the rules before the bad file are not in force")
	}
	if got := metric(t, c.Coordinator, `coordinator_access_file_reloads_total{outcome="refused"}`); got != 1 {
		t.Errorf("refused reloads counted: %v, want 1", got)
	}
}

func TestABadAccessFileStopsTheStart(t *testing.T) {
	cfg := testConfig(t, "memory")
	cfg.AccessFile = writeAccessFile(t, "tok-a team-a/\n\ntok-a team-b/\n")
	_, err := coordinatord.New(context.Background(), cfg, discardLog())
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("New: %v; want an error naming line 3", err)
	}
}

func TestClientCertificatesAreCredentialsByCommonName(t *testing.T) {
	serverCert := testcert.Write(t, "coordinator")
	billing := testcert.Write(t, "billing")
	stranger := testcert.Write(t, "stranger")
	// The client CA: both clients' self-signed certificates (each is its
	// own CA), so that both pass TLS and only the rules tell them apart.
	ca := filepath.Join(t.TempDir(), "clients.pem")
	var pem []byte
	for _, f := range []string{billing.Cert, stranger.Cert} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pem = append(pem, b...)
	}
	if err := os.WriteFile(ca, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "memory")
	cfg.TLS.Cert, cfg.TLS.Key, cfg.TLS.CA = serverCert.Cert, serverCert.Key, ca
	cfg.AccessFile = writeAccessFile(t, "cert:billing billing/\ntok-a team-a/\n")
	c := start(t, cfg)

	dial := func(client testcert.Files) coordinatorv1.CoordinatorClient {
		pair, err := tls.LoadX509KeyPair(client.Cert, client.Key)
		if err != nil {
			t.Fatal(err)
		}
		creds := credentials.NewTLS(&tls.Config{RootCAs: serverCert.Pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
		conn, err := grpc.NewClient(c.Addr(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return coordinatorv1.NewCoordinatorClient(conn)
	}
	billingClient, strangerClient := dial(billing), dial(stranger)
	if err := calls["TryAcquire"](as(t, ""), billingClient, "billing/invoice"); err != nil {
		t.Fatalf("cert:billing on billing/: %v", err)
	}
	if err := calls["TryAcquire"](as(t, ""), billingClient, "team-a/x"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("cert:billing on team-a/: %v; want PermissionDenied", err)
	}
	if err := calls["TryAcquire"](as(t, ""), strangerClient, "billing/invoice"); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "stranger") {
		t.Fatalf("a certificate without a rule: %v; want Unauthenticated naming its CN", err)
	}
	// A token sent over mTLS is the credential, whatever the certificate.
	if err := calls["TryAcquire"](as(t, "tok-a"), strangerClient, "team-a/x"); err != nil {
		t.Fatalf("a token over mTLS: %v", err)
	}
}

func TestCertificateRulesNeedClientCertificates(t *testing.T) {
	cfg := testConfig(t, "memory")
	cfg.AccessFile = writeAccessFile(t, "cert:billing billing/\n")
	if _, err := coordinatord.New(context.Background(), cfg, discardLog()); err == nil || !strings.Contains(err.Error(), "tls-client-ca") {
		t.Fatalf("New: %v; want an error naming tls-client-ca", err)
	}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
