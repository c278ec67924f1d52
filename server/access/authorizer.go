package access

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/errinfo"
	"github.com/coordinator-dev/coordinator/server/principal"
)

// Config says where the rules come from.
type Config struct {
	// File is the access file; empty means none.
	File string
	// AuthToken, when set, may use every name, with or without a file.
	AuthToken string
	// Parse says what the server can check.
	Parse ParseOptions
}

// Authorizer authenticates callers and checks the names they use against
// the current rules. Reload swaps the rules atomically.
type Authorizer struct {
	cfg    Config
	rules  atomic.Pointer[Rules]
	reload sync.Mutex
}

// New reads the rules. It returns nil, and no error, when cfg names neither
// a file nor a token: every caller may then use every name.
func New(cfg Config) (*Authorizer, error) {
	if cfg.File == "" && cfg.AuthToken == "" {
		return nil, nil //nolint:nilnil // no access control is a valid outcome, documented
	}
	a := &Authorizer{cfg: cfg}
	if err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// Reload reads the access file again. A bad file is refused, with the line
// it fails on, and the rules in force stay.
func (a *Authorizer) Reload() error {
	a.reload.Lock()
	defer a.reload.Unlock()
	rules := &Rules{certs: map[string]*Grant{}}
	if a.cfg.File != "" {
		var err error
		if rules, err = Load(a.cfg.File, a.cfg.Parse); err != nil {
			return err
		}
	}
	a.rules.Store(rules.withAllToken(a.cfg.AuthToken))
	return nil
}

// Rules are the rules in force.
func (a *Authorizer) Rules() *Rules { return a.rules.Load() }

// identity is a caller's credential as a call presents it: the digest of its
// bearer token, or else the Common Name of its verified client certificate.
type identity struct {
	hasToken bool
	digest   [sha256.Size]byte
	cn       string
}

type identityKey struct{}

// Authenticate is the auth.AuthFunc: it finds the caller's credential and
// refuses a call without a known one. The names are checked by the
// interceptors, against the rules in force at each check.
func (a *Authorizer) Authenticate(ctx context.Context) (context.Context, error) {
	id, err := identify(ctx)
	if err != nil {
		return nil, err
	}
	if a.rules.Load().grantFor(id) == nil {
		switch {
		case id.hasToken:
			return nil, status.Error(codes.Unauthenticated, "unknown bearer token")
		case id.cn != "":
			return nil, status.Errorf(codes.Unauthenticated, "client certificate CN=%q has no rule in the access file", id.cn)
		default:
			return nil, status.Error(codes.Unauthenticated, "no credential: send 'authorization: Bearer TOKEN'"+a.orCert())
		}
	}
	ctx = principal.With(ctx, id.principal())
	return context.WithValue(ctx, identityKey{}, id), nil
}

// principal names the credential, for the sessions it creates: a digest
// of a bearer token (never the token), or the certificate's Common Name.
func (id identity) principal() string {
	if id.hasToken {
		return "token:" + hex.EncodeToString(id.digest[:])
	}
	return "cert:" + id.cn
}

func (a *Authorizer) orCert() string {
	if a.cfg.Parse.ClientCerts {
		return " or a client certificate named in the access file"
	}
	return ""
}

var _ auth.AuthFunc = (*Authorizer)(nil).Authenticate

// identify reads the credential of a call: its bearer token when it sends
// one, else its verified client certificate.
func identify(ctx context.Context) (identity, error) {
	if len(metadata.ValueFromIncomingContext(ctx, "authorization")) > 0 {
		token, err := auth.AuthFromMD(ctx, "bearer")
		if err != nil {
			return identity{}, status.Error(codes.Unauthenticated, "the authorization header is not 'Bearer TOKEN'")
		}
		return identity{hasToken: true, digest: sha256.Sum256([]byte(token))}, nil
	}
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			// Only a chain the server verified names anyone.
			if chains := info.State.VerifiedChains; len(chains) > 0 && len(chains[0]) > 0 {
				return identity{cn: chains[0][0].Subject.CommonName}, nil
			}
		}
	}
	return identity{}, nil
}

// grant is the grant of the caller of ctx under the rules in force now, or
// nil when its credential is no longer known.
func (a *Authorizer) grant(ctx context.Context) *Grant {
	id, _ := ctx.Value(identityKey{}).(identity)
	return a.rules.Load().grantFor(id)
}

// denied is the PermissionDenied error of a name outside the caller's grant.
func denied(g *Grant, field, name string) error {
	who := "this credential"
	if g != nil {
		who = g.Who
	}
	msg := fmt.Sprintf("%s %s is outside the name prefixes %s may use", field, strconv.Quote(name), who)
	if g == nil {
		msg = fmt.Sprintf("%s %s: the credential of this call is no longer in the access file", field, strconv.Quote(name))
	}
	st := status.New(codes.PermissionDenied, msg)
	if withDetails, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason: ReasonPermissionDenied, Domain: errinfo.Domain, Metadata: map[string]string{field: name},
	}); err == nil {
		st = withDetails
	}
	return st.Err()
}

// ReasonPermissionDenied is the ErrorInfo reason of a name refused by the
// access rules.
var ReasonPermissionDenied = coordinatorv1.ErrorReason_PERMISSION_DENIED.String()

// namesOf returns the names a request is about: one name or election, or
// every name of a group.
func namesOf(m any) (names []string, field string, ok bool) {
	switch m := m.(type) {
	case *coordinatorv1.AcquireGroupRequest:
		for _, member := range m.GetMembers() {
			names = append(names, member.GetName())
		}
		return names, "members", true
	case interface {
		GetLeases() []*coordinatorv1.GroupLease
	}:
		for _, l := range m.GetLeases() {
			names = append(names, l.GetName())
		}
		return names, "leases", true
	}
	name, field, ok := nameOf(m)
	return []string{name}, field, ok
}

// nameOf returns the name or election a request is about.
func nameOf(m any) (name, field string, ok bool) {
	switch m := m.(type) {
	case interface{ GetElection() string }:
		return m.GetElection(), "election", true
	case interface{ GetName() string }:
		return m.GetName(), "name", true
	}
	return "", "", false
}

// isSessionCall reports a request of the session calls (CreateSession,
// RenewSession, CloseSession, DescribeSession), which name no lease.
func isSessionCall(req any) bool {
	switch req.(type) {
	case *coordinatorv1.CreateSessionRequest, *coordinatorv1.RenewSessionRequest,
		*coordinatorv1.CloseSessionRequest, *coordinatorv1.DescribeSessionRequest:
		return true
	}
	return false
}

// check refuses a request on a name outside the caller's grant. An empty
// name is left to the handler, which refuses it as invalid; a request that
// names nothing is refused unless the caller may use every name, so that a
// method added later is closed until this package knows it.
func (a *Authorizer) check(ctx context.Context, req any) error {
	g := a.grant(ctx)
	names, field, ok := namesOf(req)
	switch {
	case g != nil && g.all:
		return nil
	case isSessionCall(req):
		// Any known credential may keep sessions: each is its creator's
		// capability, which the store checks against the caller's
		// principal. Its leases' names are checked as any name.
		if g == nil {
			return denied(nil, "session", "")
		}
		return nil
	case !ok:
		return status.Errorf(codes.PermissionDenied, "%T names no lease or election; only a credential for every name may send it", req)
	}
	for _, name := range names {
		if name != "" && (g == nil || !g.Allows(name)) {
			return denied(g, field, name)
		}
	}
	return nil
}

// UnaryServerInterceptor checks the name or election of every call, and
// narrows List to what the caller may see. It runs after Authenticate, on
// the coordinator's service only (the selector decides).
func (a *Authorizer) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if list, ok := req.(*coordinatorv1.ListRequest); ok {
			return a.list(ctx, list, handler)
		}
		if err := a.check(ctx, req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// list lets List return only what the caller may see: unchanged when the
// grant covers the prefix asked for; narrowed to the one granted prefix
// under it when there is one (the store then pages through those names
// only); otherwise filtered, page by page, which may leave a page short or
// empty while a next page token remains.
func (a *Authorizer) list(ctx context.Context, req *coordinatorv1.ListRequest, handler grpc.UnaryHandler) (any, error) {
	g := a.grant(ctx)
	if g == nil {
		return nil, denied(nil, "prefix", req.GetPrefix())
	}
	if g.Allows(req.GetPrefix()) {
		return handler(ctx, req)
	}
	under := g.within(req.GetPrefix())
	switch len(under) {
	case 0:
		return &coordinatorv1.ListResponse{}, nil
	case 1:
		req.Prefix = under[0]
		return handler(ctx, req)
	}
	resp, err := handler(ctx, req)
	if page, ok := resp.(*coordinatorv1.ListResponse); ok && err == nil {
		kept := page.Leases[:0]
		for _, l := range page.GetLeases() {
			if g.Allows(l.GetName()) {
				kept = append(kept, l)
			}
		}
		page.Leases = kept
	}
	return resp, err
}

// StreamServerInterceptor checks every message a stream receives: Observe's
// request and each operation of a Stream request. A stream operation on a
// name outside the grant is answered with its PermissionDenied error,
// exactly as the unary call would return it, rather than ending the
// stream, whose other operations go on.
func (a *Authorizer) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &checkedStream{ServerStream: ss, a: a})
	}
}

type checkedStream struct {
	grpc.ServerStream
	a *Authorizer
	// sendMu orders the answers this stream injects with the handler's own
	// sends, which gRPC does not allow concurrently.
	sendMu sync.Mutex
}

func (s *checkedStream) SendMsg(m any) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.ServerStream.SendMsg(m)
}

func (s *checkedStream) RecvMsg(m any) error {
	for {
		if err := s.ServerStream.RecvMsg(m); err != nil {
			return err
		}
		if req, ok := m.(*coordinatorv1.StreamRequest); ok {
			if s.checkStream(req) {
				return nil
			}
			continue // every operation was refused and answered
		}
		return s.a.check(s.Context(), m)
	}
}

// checkStream answers the operations of req that the caller may not make
// with their errors, in one message, and leaves the others in req; it
// reports whether any are left. An operation that names nothing (none of
// its oneof is set) is left to the handler, which refuses it as invalid.
// A failed send ends the stream, which the next receive reports.
func (s *checkedStream) checkStream(req *coordinatorv1.StreamRequest) bool {
	ops := req.GetOperations()
	if g := s.a.grant(s.Context()); g != nil && g.all {
		return true
	}
	var refused []*coordinatorv1.StreamResult
	kept := ops[:0]
	for _, op := range ops {
		if inner := operationRequest(op); inner != nil {
			if err := s.a.check(s.Context(), inner); err != nil {
				refused = append(refused, &coordinatorv1.StreamResult{
					Id: op.GetId(), Result: &coordinatorv1.StreamResult_Error{Error: status.Convert(err).Proto()},
				})
				continue
			}
		}
		kept = append(kept, op)
	}
	clear(ops[len(kept):])
	req.Operations = kept
	if len(refused) > 0 {
		_ = s.SendMsg(&coordinatorv1.StreamResponse{Results: refused})
	}
	return len(kept) > 0
}

// operationRequest returns the request an operation carries, or nil.
func operationRequest(op *coordinatorv1.StreamOperation) any {
	switch o := op.GetOperation().(type) {
	case *coordinatorv1.StreamOperation_Acquire:
		return o.Acquire
	case *coordinatorv1.StreamOperation_Renew:
		return o.Renew
	case *coordinatorv1.StreamOperation_Release:
		return o.Release
	case *coordinatorv1.StreamOperation_Campaign:
		return o.Campaign
	case *coordinatorv1.StreamOperation_Resign:
		return o.Resign
	case *coordinatorv1.StreamOperation_RenewSession:
		return o.RenewSession
	case *coordinatorv1.StreamOperation_AcquireGroup:
		return o.AcquireGroup
	case *coordinatorv1.StreamOperation_RenewGroup:
		return o.RenewGroup
	case *coordinatorv1.StreamOperation_ReleaseGroup:
		return o.ReleaseGroup
	}
	return nil
}
