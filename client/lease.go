package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/backoff"
)

// Lease is a lock, or a share of a semaphore or read-write lock, held
// through a Client: a time-bounded grant of a name, renewed in the
// background until it is released or lost.
//
// Check Done (or use Context) before and while acting on what the lock
// protects, and hand Token to the protected resource so that it can refuse
// the writes of an older holder. A Lease is safe for concurrent use.
type Lease struct {
	l *lease
}

// Name is the lock's name.
func (l *Lease) Name() string { return l.l.name }

// Holder is who holds the lease: the Client's identity and a suffix unique
// to this acquisition.
func (l *Lease) Holder() string { return l.l.holder }

// Token is the fencing token: it is larger than that of every earlier grant
// of the name, and stays the same across renewals.
func (l *Lease) Token() uint64 { return l.l.token }

// Weight is how much of the name's capacity the lease holds: 1 for a lock
// or a reader, the whole capacity for a writer.
func (l *Lease) Weight() int64 { return l.l.weight }

// SessionID is the id of the session the lease is attached to (the
// Client's default session, or WithSession's), "" for a lease of its own
// TTL (WithTTL, WithoutDefaultSession).
func (l *Lease) SessionID() string { return l.l.sessionID }

// TTL is the lease's time to live, as last granted.
func (l *Lease) TTL() time.Duration { return l.l.currentTTL() }

// Deadline is when the lease stops being valid by this process's clock
// unless it is renewed before: the time the last successful grant or
// renewal was sent, plus the TTL, minus a margin for clock drift. The
// coordinator's expiry is later. Meaningless once Done is closed.
func (l *Lease) Deadline() time.Time { return l.l.currentDeadline() }

// Done is closed the moment the lease ends: released, lost, expired, or its
// Client closed. Err then says which.
func (l *Lease) Done() <-chan struct{} { return l.l.ended.Done() }

// Err is nil while the lease is held; afterwards an error matching
// ErrReleased, ErrLost, ErrExpired or ErrClosed.
func (l *Lease) Err() error { return l.l.err() }

// Context returns a context derived from parent that is cancelled when the
// lease ends; context.Cause then returns Err. It needs no goroutine of its own.
func (l *Lease) Context(parent context.Context) context.Context {
	return l.l.context(parent)
}

// Release stops renewing the lease, closes Done (Err returns ErrReleased),
// then gives the lease up on the coordinator, retrying transient errors
// until ctx ends. It returns nil when the lease was released, and an error
// matching ErrLost, ErrExpired or ErrClosed when it had already ended that
// way (an expired lease is still released on the coordinator, in case it
// holds it yet). Calling it again returns nil.
func (l *Lease) Release(ctx context.Context) error {
	return l.l.release(ctx, func(ctx context.Context) (bool, error) {
		resp, err := l.l.c.releaseCall(ctx, &coordinatorv1.ReleaseRequest{Name: l.l.name, Holder: l.l.holder, Token: l.l.token})
		return resp.GetReleased(), err
	})
}

// String describes the lease for logs.
func (l *Lease) String() string {
	if l.l.kind != "lock" {
		return fmt.Sprintf("%s %q held by %s with weight %d and token %d", l.l.kind, l.l.name, l.l.holder, l.l.weight, l.l.token)
	}
	return fmt.Sprintf("lock %q held by %s with token %d", l.l.name, l.l.holder, l.l.token)
}

// lease is what Lease, Leadership and Session share: a grant that the
// Client's renewer renews, or one attached to a session, which ends with it.
// A session is a lease of kind kindSession whose name is its id, token 0.
type lease struct {
	c      *Client
	kind   string // "lock", "semaphore", "read lock", "write lock", "leadership" or kindSession, for messages
	name   string
	holder string
	token  uint64
	weight int64 // of the name's capacity; 1 for a lock or leadership
	// sessionID is the session the lease is attached to, "" when it has a
	// TTL of its own. Set before the lease is handed out, never changed.
	sessionID string

	// ended is cancelled, with the reason as its cause, when the lease ends.
	ended  context.Context
	finish context.CancelCauseFunc

	// Guarded by c.renewals.mu.
	ttl       time.Duration
	deadline  time.Time // local validity, by the Client's clock (monotonic)
	confirmed time.Time // when the last successful grant or renewal was sent
	nextRenew time.Time
	inflight  any              // the renewal sent and not answered yet: its KeepAlive stream (*kaConn) or stream operation (*streamOp)
	sentAt    time.Time        // when that renewal was sent (KeepAlive)
	wantSend  bool             // queued in renewals.pending
	retry     *backoff.Backoff // delays after failed renewals; nil after a success
	lastErr   string           // why the last renewal failed
	index     int              // in renewals.queue; -1 when not there
	done      bool
	// Of an attached lease: its session's lease, whose validity is its
	// own. Of a session: the leases attached to it.
	session  *lease
	attached map[*lease]struct{}
}

// kindSession is the kind of a session's own lease.
const kindSession = "session"

func (c *Client) newLease(kind, name, holder string, token uint64, ttl time.Duration, sent time.Time) *lease {
	ended, finish := context.WithCancelCause(context.Background())
	l := &lease{c: c, kind: kind, name: name, holder: holder, token: token, weight: 1, ended: ended, finish: finish, index: -1}
	l.granted(sent, ttl)
	return l
}

// granted records a successful grant or renewal sent at sent. Callers hold
// the session lock, or own l alone.
func (l *lease) granted(sent time.Time, ttl time.Duration) {
	l.ttl = ttl
	l.confirmed = sent
	l.deadline = sent.Add(ttl - driftMargin(ttl))
	l.nextRenew = sent.Add(jitter(ttl / renewalsPerTTL))
	l.retry, l.lastErr = nil, ""
}

// driftMargin is kept from a lease's validity for clock drift between this
// process and the store, and for this process being scheduled late:
// ttl/10, at least 50ms, at most ttl/2 (ClientRules.validity_margin_*).
func driftMargin(ttl time.Duration) time.Duration {
	return min(max(ttl*validityMarginPercent/100, validityMarginMin), ttl*validityMarginMaxPercent/100)
}

// renewalBackoff returns the delays before retrying a renewal that failed,
// in proportion to the TTL so that several retries fit in the lease's
// validity: from ttl/20, doubling, at most ttl/4, never below 10ms
// (ClientRules.renewal_retry_*).
func renewalBackoff(ttl time.Duration) *backoff.Backoff {
	return backoff.NewWithJitter(max(ttl*renewalRetryMinPercent/100, renewalRetryFloor), max(ttl*renewalRetryMaxPercent/100, renewalRetryFloor), retryJitter)
}

// jitter spreads a renewal's delay d by ±10% (ClientRules.renewal_jitter_percent).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	spread := d * renewalJitterPercent / 100
	return d - spread + rand.N(2*spread+1) //nolint:gosec // spreading renewals needs no secret randomness
}

// due is when the scheduler must next look at l: its renewal, or its
// deadline while a renewal is queued or in flight.
func (l *lease) due() time.Time {
	if l.wantSend || l.inflight != nil || !l.nextRenew.Before(l.deadline) {
		return l.deadline
	}
	return l.nextRenew
}

func (l *lease) err() error {
	if l.ended.Err() == nil {
		return nil
	}
	return context.Cause(l.ended)
}

func (l *lease) currentTTL() time.Duration {
	l.c.renewals.mu.Lock()
	defer l.c.renewals.mu.Unlock()
	return l.ttl
}

func (l *lease) currentDeadline() time.Time {
	l.c.renewals.mu.Lock()
	defer l.c.renewals.mu.Unlock()
	return l.deadline
}

func (l *lease) context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	if l.ended.Err() != nil {
		cancel(context.Cause(l.ended))
		return ctx
	}
	stop := context.AfterFunc(l.ended, func() { cancel(context.Cause(l.ended)) })
	// Once ctx ends by itself, stop watching the lease.
	context.AfterFunc(ctx, func() { stop() })
	return ctx
}

// describe names l in errors.
func (l *lease) describe() string {
	if l.kind == kindSession {
		return "session " + l.name
	}
	return fmt.Sprintf("%s %q (token %d)", l.kind, l.name, l.token)
}

// release ends l with ErrReleased and then gives it up with call, retrying
// transient errors until ctx ends.
func (l *lease) release(ctx context.Context, call func(context.Context) (bool, error)) error {
	prior := l.c.renewals.end(l, ErrReleased)
	switch {
	case prior == nil:
	case errors.Is(prior, ErrReleased):
		return nil
	case errors.Is(prior, ErrExpired):
		// The coordinator may hold it yet: give it up there too.
		_, _ = call(ctx)
		return prior
	default: // lost (the coordinator does not hold it) or closed (Close released it)
		return prior
	}

	// Not a callCtx: a Release racing Close still gets its chance while
	// Close releases the rest.
	b := newCallBackoff()
	for {
		released, err := call(ctx)
		switch {
		case err == nil && released:
			return nil
		case err == nil:
			return fmt.Errorf("%w: %s had already expired on the coordinator when it was released", ErrLost, l.describe())
		case transient(err) && !l.c.isClosed() && ctx.Err() == nil && sleep(ctx, retryIn(b, err)):
			continue
		}
		if l.c.isClosed() && ctx.Err() == nil {
			return fmt.Errorf("coordinator: release %s: %w", l.describe(), ErrClosed)
		}
		return callError(ctx, "release "+l.describe(), err)
	}
}
