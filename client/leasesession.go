package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// Session is a liveness on the coordinator that locks and leaderships
// attach to (WithSession), as etcd's concurrency.Session: one renewal,
// about every TTL/3, keeps every lease attached to it, and they all end
// together. It is renewed as a lease is (the same scheduler, cadence,
// retries and validity margin), over the Client's operation stream as a
// renew_session operation, or with unary RenewSession calls under
// WithUnaryCalls. When the session is lost (the coordinator refused a
// renewal) or expires (no renewal was answered before its validity ran
// out), its Done closes and every attached lease's Done closes with it,
// Err reporting the session's loss. Close ends it and releases its leases
// on the coordinator in one call. Its id is a capability of the credential
// the Client uses. (It is not the stream that batches the Client's
// operations.)
//
// Every Client has a default session (see Client.Session), which its
// acquisitions attach to unless told otherwise.
//
// A Session is safe for concurrent use.
type Session struct {
	l *lease
}

// NewSession creates a session of WithTTL's TTL (the Client's default
// otherwise) and renews it in the background until Close, its loss, or the
// Client's Close, which closes it. A coordinator without sessions answers
// with an Unimplemented status.
func (c *Client) NewSession(ctx context.Context, opts ...LockOption) (*Session, error) {
	cfg := c.lockConfig(opts)
	if cfg.session != nil {
		return nil, errors.New("coordinator: a session cannot be attached to a session")
	}
	if cfg.ttl <= 0 {
		return nil, fmt.Errorf("coordinator: session: TTL %s is not positive", cfg.ttl)
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	sent := c.clock.Now()
	resp, err := c.api.CreateSession(cctx, &coordinatorv1.CreateSessionRequest{Ttl: durationpb.New(cfg.ttl)})
	if err != nil {
		return nil, callError(cctx, "create session", err)
	}
	l := c.newLease(kindSession, resp.GetSession().GetId(), "", 0, durationOr(resp.GetSession().GetTtl(), cfg.ttl), sent)
	//nolint:contextcheck // the renewals outlive this call, until Close
	if err := c.renewals.add(l); err != nil { // closed meanwhile
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = c.closeSession(rctx, l.name)
		cancel()
		return nil, err
	}
	return &Session{l: l}, nil
}

// ID is the session's id on the coordinator.
func (s *Session) ID() string { return s.l.name }

// TTL is how long each renewal keeps the session, as last granted.
func (s *Session) TTL() time.Duration { return s.l.currentTTL() }

// Deadline is when the session, and every lease attached to it, stops being
// valid by this process's clock unless a renewal is answered before.
func (s *Session) Deadline() time.Time { return s.l.currentDeadline() }

// Done is closed when the session ends: closed, lost, expired, or its Client
// closed. Err then says which.
func (s *Session) Done() <-chan struct{} { return s.l.ended.Done() }

// Err is nil while the session lives; afterwards an error matching
// ErrReleased (Close), ErrLost, ErrExpired or ErrClosed.
func (s *Session) Err() error { return s.l.err() }

// Close stops renewing the session, ends every attached lease (Err returns
// ErrReleased) and closes the session on the coordinator, which releases
// them all at once, retrying transient errors until ctx ends. It returns an
// error matching ErrLost, ErrExpired or ErrClosed when the session had
// already ended so (a lost or expired session is closed on the coordinator
// all the same, in case it lives there yet). Calling it again returns nil.
func (s *Session) Close(ctx context.Context) error {
	prior := s.l.c.renewals.end(s.l, ErrReleased)
	switch {
	case prior == nil:
		return s.l.c.closeSession(ctx, s.l.name)
	case errors.Is(prior, ErrReleased):
		return nil
	case errors.Is(prior, ErrClosed): // the Client's Close closed it
		return prior
	default:
		_ = s.l.c.closeSession(ctx, s.l.name)
		return prior
	}
}

// closeSession closes the session id on the coordinator, retrying
// transient errors until ctx ends.
func (c *Client) closeSession(ctx context.Context, id string) error {
	b := newCallBackoff()
	for {
		_, err := c.api.CloseSession(ctx, &coordinatorv1.CloseSessionRequest{SessionId: id})
		switch {
		case err == nil:
			return nil
		case transient(err) && ctx.Err() == nil && sleep(ctx, retryIn(b, err)):
			continue
		}
		return callError(ctx, "close session "+id, err)
	}
}

// WithSession attaches an acquisition (TryLock, Lock, their semaphore and
// read-write variants, Campaign and RunAsLeader) to s instead of the
// Client's default session: the lease is not renewed on its own, it is
// valid as long as s, and it ends when s ends. Release or Resign still
// gives it up alone, and s goes on. It excludes WithTTL.
func WithSession(s *Session) LockOption { return sessionOption{s} }

type sessionOption struct{ s *Session }

func (o sessionOption) applyLock(c *lockConfig) { c.session = o.s }

// maxNewSessions bounds how many times one acquisition replaces a default
// session found ended: a coordinator that ends every session at once is
// broken, and the acquisition fails rather than spin.
const maxNewSessions = 3

// errNoDefaultSession is Session's error on a Client made
// WithoutDefaultSession.
var errNoDefaultSession = errors.New("coordinator: the Client was made WithoutDefaultSession: it has no default session")

// Session returns the Client's default session, which every acquisition
// without WithTTL or WithSession attaches to. It is made on first need, by
// this call or by the first such acquisition (a Client that only observes
// makes none), with the Client's default TTL. A session that ended (lost,
// expired or closed) is never reused: the next call, or acquisition, makes
// a new one. Client.Close closes it. It fails on a Client made
// WithoutDefaultSession, and with the coordinator's Unimplemented status on
// a coordinator without sessions.
func (c *Client) Session(ctx context.Context) (*Session, error) {
	if c.noDefaultSession {
		return nil, errNoDefaultSession
	}
	if s := c.defaultSession.Load(); s != nil && s.Err() == nil {
		return s, nil
	}
	select {
	case c.sessionTurn <- struct{}{}:
	case <-ctx.Done():
		return nil, callError(ctx, "default session", ctx.Err())
	case <-c.closing.Done():
		return nil, ErrClosed
	}
	defer func() { <-c.sessionTurn }()
	if s := c.defaultSession.Load(); s != nil && s.Err() == nil { // made meanwhile
		return s, nil
	}
	s, err := c.NewSession(ctx)
	if err != nil {
		return nil, err
	}
	c.defaultSession.Store(s)
	return s, nil
}

// sessionToJoin returns the session an acquisition without WithTTL or
// WithSession attaches to: the default session, or nil for a lease of its
// own when the Client has none (WithoutDefaultSession, or a coordinator
// without sessions, which is said once in the log). With wait, transient
// failures to make it are retried until ctx ends.
func (c *Client) sessionToJoin(ctx context.Context, wait bool, kind, name string) (*Session, error) {
	if c.noDefaultSession || c.sessionsUnsupported.Load() {
		return nil, nil
	}
	b := newCallBackoff()
	for {
		s, err := c.Session(ctx)
		switch {
		case err == nil:
			return s, nil
		case status.Code(err) == codes.Unimplemented:
			if c.sessionsUnsupported.CompareAndSwap(false, true) {
				c.log.Warn("coordinator: the coordinator has no sessions; every lease gets a TTL of its own", "err", err)
			}
			return nil, nil
		case wait && transient(err) && ctx.Err() == nil:
			// Said as the acquisition's own retries are.
			c.log.Warn("coordinator: acquisition failed; retrying", "kind", kind, "name", name, "err", err)
			if sleep(ctx, retryIn(b, err)) {
				continue
			}
		}
		return nil, err
	}
}

// sessionEnded reports whether err says that the session of an
// acquisition has ended on the coordinator.
func sessionEnded(err error) bool {
	switch ErrorReason(err) {
	case coordinatorv1.ErrorReason_SESSION_NOT_FOUND.String(), coordinatorv1.ErrorReason_SESSION_EXPIRED.String(),
		coordinatorv1.ErrorReason_SESSION_CLOSED.String():
		return true
	}
	return false
}
