package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/backoff"
)

// Lease is a lock, or a share of a semaphore or read-write lock, held
// through a Client: a grant of a name attached to a session, valid as long
// as the session, until it is released or lost.
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
// of the name, and stays the same while the lease is held.
func (l *Lease) Token() uint64 { return l.l.token }

// Weight is how much of the name's capacity the lease holds: 1 for a lock
// or a reader, the whole capacity for a writer.
func (l *Lease) Weight() int64 { return l.l.weight }

// SessionID is the id of the session the lease is attached to: the
// Client's default session, or WithSession's.
func (l *Lease) SessionID() string { return l.l.session.id }

// TTL is the TTL of the lease's session, as last granted.
func (l *Lease) TTL() time.Duration { return l.l.session.currentTTL() }

// Deadline is when the lease's session, and so the lease, stops being valid
// by this process's clock unless the session is renewed before (see
// Session.Deadline). Meaningless once Done is closed.
func (l *Lease) Deadline() time.Time { return l.l.session.currentDeadline() }

// Done is closed the moment the lease ends: released, lost or expired with
// its session, or its Client closed. Err then says which.
func (l *Lease) Done() <-chan struct{} { return l.l.ended.Done() }

// Err is nil while the lease is held; afterwards an error matching
// ErrReleased, ErrLost, ErrExpired or ErrClosed.
func (l *Lease) Err() error { return l.l.err() }

// Context returns a context derived from parent that is cancelled when the
// lease ends; context.Cause then returns Err. It needs no goroutine of its own.
func (l *Lease) Context(parent context.Context) context.Context {
	return l.l.context(parent)
}

// Release closes Done (Err returns ErrReleased), then gives the lease up on
// the coordinator, retrying transient errors until ctx ends. It reports
// whether the coordinator released it. A lease no longer held (released
// already, lost, or given up by Close) is a no-op: false, and no error. A
// lease whose session expired here is still released on the coordinator,
// in case it holds it yet.
func (l *Lease) Release(ctx context.Context) (bool, error) {
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

// ending is what a session and a lease share: a signal that ends once,
// with the reason as its cause.
type ending struct {
	ended  context.Context
	finish context.CancelCauseFunc
	done   bool // guarded by the Client's renewals.mu
}

func newEnding() ending {
	ended, finish := context.WithCancelCause(context.Background())
	return ending{ended: ended, finish: finish}
}

func (e *ending) err() error {
	if e.ended.Err() == nil {
		return nil
	}
	return context.Cause(e.ended)
}

func (e *ending) context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	if e.ended.Err() != nil {
		cancel(context.Cause(e.ended))
		return ctx
	}
	stop := context.AfterFunc(e.ended, func() { cancel(context.Cause(e.ended)) })
	// Once ctx ends by itself, stop watching.
	context.AfterFunc(ctx, func() { stop() })
	return ctx
}

// lease is what Lease, Leadership and Group share: a grant in a session, which
// ends with it.
type lease struct {
	ending
	c       *Client
	kind    string // "lock", "semaphore", "read lock", "write lock", "leadership" or "group", for messages
	name    string // empty for a group
	holder  string
	token   uint64
	weight  int64 // of the name's capacity; 1 for a lock or leadership
	session *session

	// members are a group's leases, in the request's order; nil for one
	// name.
	members []GroupLease
}

// describe names l in errors.
func (l *lease) describe() string {
	if l.kind != groupKind {
		return fmt.Sprintf("%s %q (token %d)", l.kind, l.name, l.token)
	}
	parts := make([]string, len(l.members))
	for i, m := range l.members {
		parts[i] = fmt.Sprintf("%q (token %d)", m.Name, m.Token)
	}
	return "group of " + strings.Join(parts, ", ")
}

// giveUpOnce releases l on the coordinator with one unary call, whatever
// its answer: for a grant that could not be attached to its session.
func (l *lease) giveUpOnce(ctx context.Context) {
	if l.kind == groupKind {
		_, _ = l.c.api.ReleaseGroup(ctx, &coordinatorv1.ReleaseGroupRequest{Holder: l.holder, Leases: groupLeases(l.members)})
		return
	}
	_, _ = l.c.api.Release(ctx, &coordinatorv1.ReleaseRequest{Name: l.name, Holder: l.holder, Token: l.token})
}

// release ends l with ErrReleased and then gives it up with call, retrying
// transient errors until ctx ends; it reports call's answer.
func (l *lease) release(ctx context.Context, call func(context.Context) (bool, error)) (bool, error) {
	if prior := l.c.renewals.endLease(l, ErrReleased); prior != nil && !errors.Is(prior, ErrExpired) {
		return false, nil // released already, lost, or Close released it
	}
	// Not a callCtx: a Release racing Close still gets its chance while
	// Close releases the rest.
	b := newCallBackoff()
	for {
		released, err := call(ctx)
		switch {
		case err == nil:
			return released, nil
		case transient(err) && !l.c.isClosed() && ctx.Err() == nil && sleep(ctx, retryIn(b, err)):
			continue
		}
		if l.c.isClosed() && ctx.Err() == nil {
			return false, fmt.Errorf("coordinator: release %s: %w", l.describe(), ErrClosed)
		}
		return false, callError(ctx, "release "+l.describe(), err)
	}
}

// driftMargin is kept from a session's validity for clock drift between
// this process and the store, and for this process being scheduled late:
// ttl/10, at least 50ms, at most ttl/2 (ClientRules.validity_margin_*).
func driftMargin(ttl time.Duration) time.Duration {
	return min(max(ttl*validityMarginPercent/100, validityMarginMin), ttl*validityMarginMaxPercent/100)
}

// renewalBackoff returns the delays before retrying a renewal that failed,
// in proportion to the TTL so that several retries fit in the session's
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
