package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// TryLock acquires the lock name if it is free (and nobody is queued for
// it), without waiting. When someone else holds it, the error is a
// *NotAcquiredError matching ErrNotAcquired and naming the holder. Other
// errors are the coordinator's (gRPC status errors: see ErrorReason) or
// ErrClosed.
//
// The lease is attached to the Client's default session (Session), and
// lives as long as it, unless WithSession attaches it to another or WithTTL
// makes it a lease of its own, renewed in the background until Release,
// loss or Close.
func (c *Client) TryLock(ctx context.Context, name string, opts ...LockOption) (*Lease, error) {
	l, err := c.acquire(ctx, c.lockConfig(opts), false, "lock", name, c.tryAcquire(name, 0, 0))
	if err != nil {
		return nil, err
	}
	return &Lease{l: l}, nil
}

// Lock acquires the lock name, waiting for it in arrival order with the
// other waiters (the coordinator queues them) until ctx ends. It retries
// transient errors (coordinator or store unavailable) with backoff. When ctx
// ends first, the error is a *NotAcquiredError that matches ErrNotAcquired
// and ctx's error.
//
// The lease is attached as TryLock's is.
func (c *Client) Lock(ctx context.Context, name string, opts ...LockOption) (*Lease, error) {
	l, err := c.acquire(ctx, c.lockConfig(opts), true, "lock", name, c.tryAcquire(name, 0, 0))
	if err != nil {
		return nil, err
	}
	return &Lease{l: l}, nil
}

func (c *Client) lockConfig(opts []LockOption) lockConfig {
	cfg := lockConfig{ttl: c.ttl}
	for _, o := range opts {
		o.applyLock(&cfg)
	}
	return cfg
}

// grant is a coordinator's answer to an acquisition.
type grant struct {
	acquired bool
	token    uint64
	ttl      time.Duration
	value    []byte
	weight   int64
	holder   string    // the current holder, when not acquired
	sent     time.Time // when the request was sent, on the Client's clock
}

// acquireCall asks the coordinator for a lease as holder, waiting up to
// wait, attached to session (an id) unless it is empty.
type acquireCall func(ctx context.Context, holder string, ttl, wait time.Duration, session string) (grant, error)

// tryAcquire asks for weight of name, of capacity capacity (0 and 0: an
// exclusive lock).
func (c *Client) tryAcquire(name string, capacity, weight uint32) acquireCall {
	return func(ctx context.Context, holder string, ttl, wait time.Duration, session string) (grant, error) {
		req := &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: durationpb.New(ttl), Capacity: capacity, Weight: weight,
			SessionId: session}
		if wait > 0 {
			req.Wait = durationpb.New(wait)
		}
		resp, sent, err := c.tryAcquireCall(ctx, req)
		if err != nil {
			return grant{}, err
		}
		if !resp.GetAcquired() {
			return grant{holder: resp.GetHolder(), sent: sent}, nil
		}
		return grant{
			acquired: true,
			token:    resp.GetLease().GetToken(),
			ttl:      durationOr(resp.GetLease().GetTtl(), ttl),
			value:    resp.GetLease().GetValue(),
			weight:   max(int64(resp.GetLease().GetWeight()), 1),
			sent:     sent,
		}, nil
	}
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d.IsValid() && d.AsDuration() > 0 {
		return d.AsDuration()
	}
	return def
}

// acquire runs an acquisition as a new holder: once (wait false) or until
// granted or ctx ends (wait true), and registers the lease with the session.
//
// A grant's validity is counted from when its request was sent. A grant
// that arrived after a long wait has little of it left, so it is confirmed
// by asking again as the holder, which the coordinator answers at once with
// the same token and a fresh TTL.
func (c *Client) acquire(ctx context.Context, cfg lockConfig, wait bool, kind, name string, call acquireCall) (*lease, error) {
	if cfg.ttl <= 0 {
		return nil, fmt.Errorf("coordinator: %s %q: TTL %s is not positive", kind, name, cfg.ttl)
	}
	if cfg.session != nil && cfg.ownTTL {
		return nil, fmt.Errorf("coordinator: %s %q: WithTTL and WithSession exclude each other: a lease in a session lives as long as the session", kind, name)
	}
	if cfg.session != nil {
		if err := cfg.session.Err(); err != nil {
			return nil, fmt.Errorf("coordinator: %s %q in session %s: %w", kind, name, cfg.session.ID(), err)
		}
	}
	// An acquisition that waits ends when the Client closes (callCtx). One
	// that does not is over in a round trip: Close answers it through the
	// stream, or by closing the connection, and a grant that arrives after
	// Close began is released (attached, renewals.add). It makes no context
	// of its own, which cost a TryLock a fifth of its own CPU: a cancel
	// context, and an AfterFunc on the Client's closing context whose lock
	// every concurrent call took twice.
	if wait {
		var cancel context.CancelFunc
		ctx, cancel = c.callCtx(ctx)
		defer cancel()
	} else if c.isClosed() {
		return nil, ErrClosed
	}
	// inDefault: attached to the default session, which is replaced when
	// it turns out to have ended.
	inDefault := cfg.session == nil && !cfg.ownTTL
	if inDefault {
		s, err := c.sessionToJoin(ctx, wait, kind, name)
		if err != nil {
			if ctx.Err() != nil && wait {
				return nil, c.notAcquired(ctx, name, "", err)
			}
			return nil, callError(ctx, fmt.Sprintf("%s %q", kind, name), err)
		}
		cfg.session, inDefault = s, s != nil
	}
	var session string
	if cfg.session != nil {
		// The lease is valid as long as its session: its own TTL is the
		// session's (the coordinator ignores the one sent).
		session, cfg.ttl = cfg.session.ID(), cfg.session.TTL()
	}
	holder := c.newHolder()
	usable := cfg.ttl - driftMargin(cfg.ttl)
	b := newCallBackoff()
	var (
		confirms    int
		lastErr     error
		newSessions int
	)
	// nextSession replaces the default session that ended (cause says
	// how) with a new one; false when the error must be returned.
	nextSession := func(cause error) bool {
		if !inDefault || newSessions >= maxNewSessions {
			return false
		}
		newSessions++
		// Known dead on the coordinator: end it, and its leases, here too.
		_ = c.renewals.end(cfg.session.l, fmt.Errorf("%w: %s: %w", ErrLost, cfg.session.l.describe(), cause))
		s, err := c.sessionToJoin(ctx, wait, kind, name)
		if err != nil || s == nil {
			return false
		}
		cfg.session, session, cfg.ttl = s, s.ID(), s.TTL()
		holder = c.newHolder()
		return true
	}
	for {
		var waitFor time.Duration
		if wait && confirms == 0 {
			waitFor = maxWait
			if d, ok := ctx.Deadline(); ok {
				waitFor = max(min(waitFor, time.Until(d)-answerMargin), 0)
			}
		}
		// The grant's validity is on the Client's clock, from when the
		// request was sent (the call says when); how long the coordinator
		// waited is real time.
		start := time.Now()
		g, err := call(ctx, holder, cfg.ttl, waitFor, session)
		sent := g.sent
		if err != nil && sessionEnded(err) && ctx.Err() == nil && nextSession(err) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil && wait && transient(err) {
				lastErr = err
				// Said, because waiting on an unreachable coordinator
				// looks like waiting for the lease.
				c.log.Warn("coordinator: acquisition failed; retrying", "kind", kind, "name", name, "err", err)
				if sleep(ctx, retryIn(b, err)) {
					continue // as the same holder: a lost grant is found again
				}
			}
			if outcomeUnknown(err) {
				c.abandon(ctx, name, holder)
			}
			if ctx.Err() != nil {
				return nil, c.notAcquired(ctx, name, "", lastErr)
			}
			if c.isClosed() {
				return nil, ErrClosed
			}
			return nil, callError(ctx, fmt.Sprintf("%s %q", kind, name), err)
		}
		if !g.acquired {
			confirms = 0
			if !wait {
				return nil, &NotAcquiredError{Name: name, Holder: g.holder}
			}
			// The coordinator was asked to answer before the deadline.
			if d, ok := ctx.Deadline(); ctx.Err() != nil || ok && time.Until(d) <= answerMargin {
				sleep(ctx, time.Until(d))
				return nil, c.notAcquired(ctx, name, g.holder, nil)
			}
			if time.Since(start) < waitFor/2 {
				// Answered long before the wait was over (a coordinator
				// shutting down?): do not spin.
				sleep(ctx, b.Next())
			}
			continue // the coordinator's longest wait passed: ask again
		}
		b.Reset()
		if cfg.session != nil {
			// Valid as long as the session, whenever it was granted.
			l, err := c.attached(ctx, cfg.session, kind, name, holder, g, sent)
			if err != nil && ctx.Err() == nil && nextSession(err) {
				continue // ended between the grant and now
			}
			return l, err
		}
		if remaining := c.clock.Until(sent.Add(usable)); remaining < usable/2 && confirms < maxConfirms {
			confirms++
			continue
		}
		l := c.newLease(kind, name, holder, g.token, g.ttl, sent)
		l.weight = max(g.weight, 1)
		if !c.clock.Now().Before(l.deadline) {
			c.abandon(ctx, name, holder)
			return nil, fmt.Errorf("coordinator: %s %q: every grant arrived after its validity ended (the coordinator answers slower than the TTL %s allows)", kind, name, cfg.ttl)
		}
		//nolint:contextcheck // the renewals outlive this call, until Release or Close
		if err := c.renewals.add(l); err != nil { // closed meanwhile
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_, _ = c.api.Release(rctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: g.token})
			cancel()
			return nil, err
		}
		return l, nil
	}
}

// attached makes the lease granted in session s: not renewed on its own,
// ended with the session.
func (c *Client) attached(ctx context.Context, s *Session, kind, name, holder string, g grant, sent time.Time) (*lease, error) {
	l := c.newLease(kind, name, holder, g.token, g.ttl, sent)
	l.weight = max(g.weight, 1)
	l.sessionID = s.ID()
	if err := c.renewals.attach(s.l, l); err != nil {
		_ = c.renewals.end(l, err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, _ = c.api.Release(rctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: g.token})
		cancel()
		return nil, err
	}
	return l, nil
}

func (c *Client) notAcquired(ctx context.Context, name, holder string, lastErr error) error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = context.DeadlineExceeded
	}
	if errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	if lastErr != nil {
		cause = fmt.Errorf("%w (last error: %v)", cause, lastErr) //nolint:errorlint // a retried Unavailable is not why the wait ended: status.Code must not see it
	}
	return &NotAcquiredError{Name: name, Holder: holder, Err: cause}
}

// abandon gives up a lease that an acquisition may have been granted without
// hearing of it (the call failed after it was sent), so that others need not
// wait for its TTL. Best-effort, and after ctx (the acquisition's) ended.
func (c *Client) abandon(ctx context.Context, name, holder string) {
	if c.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	d, err := c.api.Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
	if err != nil || !d.GetHeld() {
		return
	}
	// A semaphore's holder may be any of its grants.
	var token uint64
	for _, l := range append(d.GetHolders(), d.GetLease()) {
		if l.GetHolder() == holder {
			token = l.GetToken()
		}
	}
	if token == 0 {
		return
	}
	if _, err := c.api.Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: token}); err != nil {
		c.log.Warn("coordinator: could not give up a lease granted to an abandoned acquisition; it expires after its TTL",
			"name", name, "holder", holder, "err", err)
	}
}
