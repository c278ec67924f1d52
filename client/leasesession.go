package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// Session is a liveness on the coordinator that locks attach to (WithSession),
// as etcd's concurrency.Session: one renewal, about every TTL/3, keeps every
// lease attached to it, and they all end together. When the session is lost
// (the coordinator refused a renewal, or no renewal was answered before its
// validity ran out) its Done closes and every attached lease's Done closes
// with it, Err reporting the loss. Close ends it and releases its leases on
// the coordinator in one call. Its id is a capability of the credential the
// Client uses. (It is not the stream that batches the Client's operations.)
//
// A Session is safe for concurrent use.
type Session struct {
	c   *Client
	id  string
	ttl time.Duration

	ended  context.Context
	finish context.CancelCauseFunc
	stop   context.CancelFunc // ends the renewal loop

	mu       sync.Mutex
	deadline time.Time // local validity, by the Client's clock
	leases   map[*lease]struct{}
	done     bool
	loop     chan struct{} // closed when the renewal loop returned
}

// NewSession creates a session of WithTTL's TTL (the Client's default
// otherwise) and renews it in the background until Close, its loss, or the
// Client's Close.
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
	ttl := durationOr(resp.GetSession().GetTtl(), cfg.ttl)
	ended, finish := context.WithCancelCause(context.Background())
	run, stop := context.WithCancel(c.closing)
	s := &Session{c: c, id: resp.GetSession().GetId(), ttl: ttl, ended: ended, finish: finish, stop: stop,
		deadline: sent.Add(ttl - driftMargin(ttl)), leases: map[*lease]struct{}{}, loop: make(chan struct{})}
	if !c.track() {
		stop()
		s.end(ErrClosed)
		return nil, ErrClosed
	}
	//nolint:contextcheck // the renewals outlive this call, until Close
	go s.keepAlive(run, sent)
	return s, nil
}

// ID is the session's id on the coordinator.
func (s *Session) ID() string { return s.id }

// TTL is how long each renewal keeps the session.
func (s *Session) TTL() time.Duration { return s.ttl }

// Deadline is when the session, and every lease attached to it, stops being
// valid by this process's clock unless a renewal is answered before.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// Done is closed when the session ends: closed, lost, expired, or its Client
// closed. Err then says which.
func (s *Session) Done() <-chan struct{} { return s.ended.Done() }

// Err is nil while the session lives; afterwards an error matching
// ErrReleased (Close), ErrLost, ErrExpired or ErrClosed.
func (s *Session) Err() error {
	if s.ended.Err() == nil {
		return nil
	}
	return context.Cause(s.ended)
}

// Close stops renewing the session, ends every attached lease (Err returns
// ErrReleased) and closes the session on the coordinator, which releases
// them all at once, retrying transient errors until ctx ends. It returns an
// error matching ErrLost, ErrExpired or ErrClosed when the session had
// already ended so. Calling it again returns nil.
func (s *Session) Close(ctx context.Context) error {
	if !s.end(ErrReleased) {
		prior := s.Err()
		if errors.Is(prior, ErrReleased) {
			return nil
		}
		// Lost or expired: the coordinator may hold its leases yet.
		<-s.loop
		_ = s.closeRemote(ctx)
		return prior
	}
	<-s.loop
	return s.closeRemote(ctx)
}

func (s *Session) closeRemote(ctx context.Context) error {
	b := newCallBackoff()
	for {
		_, err := s.c.api.CloseSession(ctx, &coordinatorv1.CloseSessionRequest{SessionId: s.id})
		switch {
		case err == nil:
			return nil
		case transient(err) && ctx.Err() == nil && sleep(ctx, retryIn(b, err)):
			continue
		}
		return callError(ctx, "close session "+s.id, err)
	}
}

// end ends the session and every lease attached to it with err; it reports
// whether it did (false: it had ended already).
func (s *Session) end(err error) bool {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return false
	}
	s.done = true
	leases := s.leases
	s.leases = nil
	s.mu.Unlock()
	s.stop()
	s.finish(err)
	for l := range leases {
		_ = s.c.renewals.end(l, err)
	}
	return true
}

// attach makes l a lease of the session: it ends with it, and its deadline
// follows the session's. It fails when the session ended.
func (s *Session) attach(l *lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return fmt.Errorf("coordinator: session %s: %w", s.id, context.Cause(s.ended))
	}
	s.leases[l] = struct{}{}
	s.c.renewals.mu.Lock()
	l.deadline = s.deadline
	s.c.renewals.mu.Unlock()
	context.AfterFunc(l.ended, func() { s.detach(l) })
	return nil
}

func (s *Session) detach(l *lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.leases, l)
}

// renewed records a renewal sent at sent and answered.
func (s *Session) renewed(sent time.Time, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline = sent.Add(ttl - driftMargin(ttl))
	s.c.renewals.mu.Lock()
	for l := range s.leases {
		l.ttl, l.confirmed, l.deadline = ttl, sent, s.deadline
	}
	s.c.renewals.mu.Unlock()
}

// keepAlive renews the session about every ttl/3 (the leases' renewal
// cadence, ClientRules) until it ends; a renewal refused for good loses
// it, one unanswered by the deadline expires it. Failures are retried with
// the renewals' backoff.
func (s *Session) keepAlive(run context.Context, confirmed time.Time) {
	defer s.c.wg.Done()
	defer close(s.loop)
	next := confirmed.Add(jitter(s.ttl / renewalsPerTTL))
	var retry interface{ Next() time.Duration }
	for {
		deadline := s.Deadline()
		wait := s.c.clock.Until(next)
		if until := s.c.clock.Until(deadline); until < wait {
			wait = until
		}
		timer := s.c.clock.NewTimer(max(wait, 0))
		select {
		case <-run.Done():
			timer.Stop()
			if s.end(ErrClosed) {
				// The Client closes: release the leases with the session.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(run), max(s.c.closeTimeout, time.Millisecond))
				_ = s.closeRemote(ctx)
				cancel()
			}
			return
		case <-timer.Chan():
		}
		if !s.c.clock.Now().Before(deadline) {
			s.end(fmt.Errorf("%w: session %s: no renewal was answered in time", ErrExpired, s.id))
			return
		}
		sent := s.c.clock.Now()
		ctx, cancel := context.WithDeadline(run, time.Now().Add(s.c.clock.Until(deadline)))
		resp, err := s.c.api.RenewSession(ctx, &coordinatorv1.RenewSessionRequest{SessionId: s.id})
		cancel()
		switch {
		case err == nil:
			ttl := durationOr(resp.GetSession().GetTtl(), s.ttl)
			s.renewed(sent, ttl)
			retry = nil
			next = sent.Add(jitter(ttl / renewalsPerTTL))
		case run.Err() != nil:
			// Closing: the top of the loop ends the session.
		case endsLease(ErrorReason(err)):
			s.end(fmt.Errorf("%w: session %s: %s: %s", ErrLost, s.id, ErrorReason(err), status.Convert(err).Message()))
			return
		default:
			if retry == nil {
				retry = renewalBackoff(s.ttl)
			}
			s.c.log.Warn("coordinator: session renewal failed; retrying", "session", s.id, "err", err)
			next = s.c.clock.Now().Add(retry.Next())
		}
	}
}

// WithSession attaches a lock (TryLock, Lock, and their semaphore and
// read-write variants) to s instead of giving it a TTL of its own: it is
// not renewed on its own, and it ends when s ends. Release still releases
// it alone. Campaign does not take it yet.
func WithSession(s *Session) LockOption { return sessionOption{s} }

type sessionOption struct{ s *Session }

func (o sessionOption) applyLock(c *lockConfig) { c.session = o.s }
