package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/backoff"
)

// Session is a liveness on the coordinator that every lock, share and
// leadership of a Client is attached to, as etcd's concurrency.Session:
// one renewal, about every TTL/3 over the Client's operation stream (a
// renew_session operation), keeps every lease attached to it, and they all
// end together. When the session is lost (the coordinator refused a
// renewal) or expires (no renewal was answered before its validity ran
// out), its Done closes and every attached lease's Done closes with it,
// Err reporting the session's end. Close ends it and releases its leases
// on the coordinator in one call. Its id is a capability of the credential
// the Client uses.
//
// Every Client has a default session (see Client.Session), which its
// acquisitions attach to unless given WithSession.
//
// A Session is safe for concurrent use.
type Session struct {
	s *session
}

// session is a Session's state, renewed by the Client's renewer.
type session struct {
	ending
	c  *Client
	id string
	// asked is the TTL NewSession asked for, which every acquisition in
	// the session sends: the coordinator requires one, and gives a lease
	// in a session the session's. Read without a lock.
	asked time.Duration

	// Guarded by c.renewals.mu.
	ttl       time.Duration
	deadline  time.Time // local validity, by the Client's clock (monotonic)
	confirmed time.Time // when the last successful renewal (or the creation) was sent
	nextRenew time.Time
	inflight  *streamOp        // the renewal sent and not answered yet
	retry     *backoff.Backoff // delays after failed renewals; nil after a success
	lastErr   string           // why the last renewal failed
	index     int              // in renewals.queue; -1 when not there
	leases    map[*lease]struct{}
}

// NewSession creates a session of WithTTL's TTL (the Client's otherwise)
// and renews it in the background until Close, its loss, or the Client's
// Close, which closes it.
func (c *Client) NewSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	ttl := c.ttl
	for _, o := range opts {
		o.applySession(&ttl)
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("coordinator: session: TTL %s is not positive", ttl)
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	sent := c.clock.Now()
	resp, err := c.api.CreateSession(cctx, &coordinatorv1.CreateSessionRequest{Ttl: durationpb.New(ttl)})
	if err != nil {
		return nil, callError(cctx, "create session", err)
	}
	s := &session{ending: newEnding(), c: c, id: resp.GetSession().GetId(), asked: ttl, index: -1, leases: map[*lease]struct{}{}}
	s.granted(sent, durationOr(resp.GetSession().GetTtl(), ttl))
	//nolint:contextcheck // the renewals outlive this call, until Close
	if err := c.renewals.add(s); err != nil { // closed meanwhile
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = c.closeSession(rctx, s.id)
		cancel()
		return nil, err
	}
	return &Session{s: s}, nil
}

// granted records a successful creation or renewal sent at sent. Callers
// hold the renewer's lock, or own s alone.
func (s *session) granted(sent time.Time, ttl time.Duration) {
	s.ttl = ttl
	s.confirmed = sent
	s.deadline = sent.Add(ttl - driftMargin(ttl))
	s.nextRenew = sent.Add(jitter(ttl / renewalsPerTTL))
	s.retry, s.lastErr = nil, ""
}

// due is when the scheduler must next look at s: its renewal, or its
// deadline while a renewal is in flight.
func (s *session) due() time.Time {
	if s.inflight != nil || !s.nextRenew.Before(s.deadline) {
		return s.deadline
	}
	return s.nextRenew
}

func (s *session) expired() error {
	why := "no renewal was answered"
	if s.lastErr != "" {
		why = "the last renewal failed: " + s.lastErr
	}
	return fmt.Errorf("%w: %s: %s", ErrExpired, s.describe(), why)
}

func (s *session) describe() string { return "session " + s.id }

func (s *session) currentTTL() time.Duration {
	s.c.renewals.mu.Lock()
	defer s.c.renewals.mu.Unlock()
	return s.ttl
}

func (s *session) currentDeadline() time.Time {
	s.c.renewals.mu.Lock()
	defer s.c.renewals.mu.Unlock()
	return s.deadline
}

// ID is the session's id on the coordinator.
func (s *Session) ID() string { return s.s.id }

// TTL is how long each renewal keeps the session, as last granted.
func (s *Session) TTL() time.Duration { return s.s.currentTTL() }

// Deadline is when the session, and every lease attached to it, stops being
// valid by this process's clock unless a renewal is answered before: the
// time the last successful renewal was sent, plus the TTL, minus a margin
// for clock drift. The coordinator's expiry is later.
func (s *Session) Deadline() time.Time { return s.s.currentDeadline() }

// Done is closed when the session ends: closed, lost, expired, or its Client
// closed. Err then says which.
func (s *Session) Done() <-chan struct{} { return s.s.ended.Done() }

// Err is nil while the session lives; afterwards an error matching
// ErrReleased (Close), ErrLost, ErrExpired or ErrClosed.
func (s *Session) Err() error { return s.s.err() }

// Close stops renewing the session, ends every attached lease (Err returns
// ErrReleased) and closes the session on the coordinator, which releases
// them all at once, retrying transient errors until ctx ends. It returns an
// error matching ErrLost, ErrExpired or ErrClosed when the session had
// already ended so (a lost or expired session is closed on the coordinator
// all the same, in case it lives there yet). Calling it again returns nil.
func (s *Session) Close(ctx context.Context) error {
	prior := s.s.c.renewals.endSession(s.s, ErrReleased)
	switch {
	case prior == nil:
		return s.s.c.closeSession(ctx, s.s.id)
	case errors.Is(prior, ErrReleased):
		return nil
	case errors.Is(prior, ErrClosed): // the Client's Close closed it
		return prior
	default:
		_ = s.s.c.closeSession(ctx, s.s.id)
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
// read-write variants, the groups of LockAll and AcquireAll, Campaign and
// RunAsLeader) to s instead of the Client's default session: it is valid as
// long as s, and ends when s ends. Release or Resign still gives it up
// alone, and s goes on.
func WithSession(s *Session) LockOption { return sessionOption{s} }

type sessionOption struct{ s *Session }

func (o sessionOption) applyLock(c *lockConfig) { c.session = o.s }

// maxNewSessions bounds how many times one acquisition replaces a default
// session found ended: a coordinator that ends every session at once is
// broken, and the acquisition fails rather than spin.
const maxNewSessions = 3

// Session returns the Client's default session, which every acquisition
// without WithSession attaches to. It is made on first need, by this call
// or by the first such acquisition (a Client that only describes, lists or
// observes makes none), with the Client's TTL. A session that ended (lost,
// expired or closed) is never reused: the next call, or acquisition, makes
// a new one. Client.Close closes it.
func (c *Client) Session(ctx context.Context) (*Session, error) {
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

// sessionToJoin returns the default session for an acquisition without
// WithSession. With wait, transient failures to make it are retried until
// ctx ends.
func (c *Client) sessionToJoin(ctx context.Context, wait bool, kind, name string) (*Session, error) {
	b := newCallBackoff()
	for {
		s, err := c.Session(ctx)
		if err == nil {
			return s, nil
		}
		if wait && transient(err) && ctx.Err() == nil {
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
