package server

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/principal"
	"github.com/coordinator-dev/coordinator/server/store"
)

// Sessions: thin adapters of store.Sessions. The owner of a session is the
// caller's principal (server/principal, set by the access middleware;
// empty without authentication), so that a session id is a capability of
// the credential that created it.

// MaxSessionIDBytes is the longest session id a request may carry.
var MaxSessionIDBytes = int(fieldRules(&coordinatorv1.RenewSessionRequest{}, "session_id").GetMaxBytes())

// sessionID checks a session id field: required unless optional.
func (v *validator) sessionID(field, id string, optional bool) {
	if id == "" && optional {
		return
	}
	v.text(field, id, MaxSessionIDBytes)
}

// CreateSession implements coordinatorv1.CoordinatorServer.
func (s *Service) CreateSession(ctx context.Context, req *coordinatorv1.CreateSessionRequest) (*coordinatorv1.CreateSessionResponse, error) {
	var v validator
	ttl := v.ttl("ttl", req.GetTtl(), s.maxTTL)
	if err := v.Err(); err != nil {
		return nil, err
	}
	sess, err := s.store.CreateSession(ctx, principal.Of(ctx), ttl)
	if err != nil {
		return nil, storeError(err)
	}
	return &coordinatorv1.CreateSessionResponse{Session: sessionToProto(sess)}, nil
}

// RenewSession implements coordinatorv1.CoordinatorServer.
func (s *Service) RenewSession(ctx context.Context, req *coordinatorv1.RenewSessionRequest) (*coordinatorv1.RenewSessionResponse, error) {
	var v validator
	v.sessionID("session_id", req.GetSessionId(), false)
	if err := v.Err(); err != nil {
		return nil, err
	}
	sess, err := s.store.RenewSession(ctx, req.GetSessionId(), principal.Of(ctx))
	if err != nil {
		s.countSessionRenewalFailure(err)
		return nil, errOfSession(req.GetSessionId(), err)
	}
	return &coordinatorv1.RenewSessionResponse{Session: sessionToProto(sess)}, nil
}

// countSessionRenewalFailure counts a refused or failed session renewal
// as a lease's: the SDKs renew sessions, not leases, so the renewal alerts
// see their losses (every lease of an ended session is lost) and failures
// only here.
func (s *Service) countSessionRenewalFailure(err error) {
	switch {
	case errors.Is(err, store.ErrSessionNotOwned):
		// A caller's mistake, not a loss nor a failure of the store.
	case errors.Is(err, store.ErrSessionNotFound), errors.Is(err, store.ErrSessionExpired), errors.Is(err, store.ErrSessionClosed):
		s.metrics.renewNotHeld.Inc()
	default:
		s.metrics.renewErrors.Inc()
	}
}

// CloseSession implements coordinatorv1.CoordinatorServer.
func (s *Service) CloseSession(ctx context.Context, req *coordinatorv1.CloseSessionRequest) (*coordinatorv1.CloseSessionResponse, error) {
	var v validator
	v.sessionID("session_id", req.GetSessionId(), false)
	if err := v.Err(); err != nil {
		return nil, err
	}
	if err := s.store.CloseSession(ctx, req.GetSessionId(), principal.Of(ctx)); err != nil {
		return nil, errOfSession(req.GetSessionId(), err)
	}
	return &coordinatorv1.CloseSessionResponse{}, nil
}

// DescribeSession implements coordinatorv1.CoordinatorServer.
func (s *Service) DescribeSession(ctx context.Context, req *coordinatorv1.DescribeSessionRequest) (*coordinatorv1.DescribeSessionResponse, error) {
	var v validator
	v.sessionID("session_id", req.GetSessionId(), false)
	if err := v.Err(); err != nil {
		return nil, err
	}
	d, err := s.store.DescribeSession(ctx, req.GetSessionId(), principal.Of(ctx))
	if err != nil {
		return nil, errOfSession(req.GetSessionId(), err)
	}
	return &coordinatorv1.DescribeSessionResponse{Session: sessionToProto(d.Session), Names: d.Names}, nil
}

func sessionToProto(sess store.Session) *coordinatorv1.Session {
	return &coordinatorv1.Session{Id: sess.ID, Ttl: durationpb.New(sess.TTL), ExpiresAt: timestamppb.New(sess.ExpiresAt)}
}

// errOfSession maps an error of a call on session id: the session errors to
// FailedPrecondition with their reasons (PermissionDenied for another
// owner's session), anything else as storeError does.
func errOfSession(id string, err error) error {
	var reason coordinatorv1.ErrorReason
	code := codes.FailedPrecondition
	switch {
	case errors.Is(err, store.ErrSessionNotOwned):
		reason, code = coordinatorv1.ErrorReason_PERMISSION_DENIED, codes.PermissionDenied
	case errors.Is(err, store.ErrSessionNotFound):
		reason = coordinatorv1.ErrorReason_SESSION_NOT_FOUND
	case errors.Is(err, store.ErrSessionExpired):
		reason = coordinatorv1.ErrorReason_SESSION_EXPIRED
	case errors.Is(err, store.ErrSessionClosed):
		reason = coordinatorv1.ErrorReason_SESSION_CLOSED
	default:
		return storeError(err)
	}
	return statusWithDetails(code, "session "+strconv.Quote(id)+": "+err.Error(),
		errorInfo(reason, map[string]string{"session_id": id}))
}

// errLeaseInSession is the error of a renewal of a lease attached to a
// session.
func errLeaseInSession(name string) error {
	return statusWithDetails(codes.FailedPrecondition, "lease on "+strconv.Quote(name)+" is attached to a session: renew the session",
		errorInfo(coordinatorv1.ErrorReason_LEASE_IN_SESSION, map[string]string{"name": name}))
}
