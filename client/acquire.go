package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
// lives as long as it, unless WithSession attaches it to another.
func (c *Client) TryLock(ctx context.Context, name string, opts ...LockOption) (*Lease, error) {
	l, err := c.acquire(ctx, opts, false, single("lock", name, c.tryAcquire(name, 0, 0)))
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
	l, err := c.acquire(ctx, opts, true, single("lock", name, c.tryAcquire(name, 0, 0)))
	if err != nil {
		return nil, err
	}
	return &Lease{l: l}, nil
}

// grant is a coordinator's answer to an acquisition.
type grant struct {
	acquired bool
	token    uint64
	weight   int64
	members  []GroupLease // a group's leases, in the request's order
	holder   string       // the current holder, when not acquired
	blocked  string       // a group's member in the way, when not acquired
}

// acquireCall asks the coordinator for a lease (or a group's) as holder
// in session, waiting up to wait.
type acquireCall func(ctx context.Context, holder string, session *Session, wait time.Duration) (grant, error)

// acquisition is what acquire runs: a request for one name (a lock, a
// share or a leadership) or a group's, for several at once.
type acquisition struct {
	kind  string   // "lock", "semaphore", "read lock", "write lock", "leadership" or "group", for messages
	names []string // the name, or the group's members in order
	call  acquireCall
}

// groupKind is the kind of a group's acquisition and lease.
const groupKind = "group"

// single is the acquisition of one name.
func single(kind, name string, call acquireCall) acquisition {
	return acquisition{kind: kind, names: []string{name}, call: call}
}

// what names the acquisition in errors.
func (a acquisition) what() string {
	if a.kind == groupKind {
		return "group " + quoteNames(a.names)
	}
	return fmt.Sprintf("%s %q", a.kind, a.names[0])
}

// notAcquiredName is the name a *NotAcquiredError reports: a group's
// member in the way when the coordinator said which, else its first.
func (a acquisition) notAcquiredName(blocked string) string {
	if blocked != "" || len(a.names) == 0 {
		return blocked
	}
	return a.names[0]
}

// logName is the name, or a group's names, for the log.
func (a acquisition) logName() string { return strings.Join(a.names, " ") }

// quoteNames lists names for messages and logs: "a", "b".
func quoteNames(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	return strings.Join(quoted, ", ")
}

// tryAcquire asks for weight of name, of capacity capacity (0 and 0: an
// exclusive lock).
func (c *Client) tryAcquire(name string, capacity, weight uint32) acquireCall {
	return func(ctx context.Context, holder string, session *Session, wait time.Duration) (grant, error) {
		req := &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: durationpb.New(session.s.asked), Capacity: capacity, Weight: weight,
			SessionId: session.ID()}
		if wait > 0 {
			req.Wait = durationpb.New(wait)
		}
		resp, err := c.tryAcquireCall(ctx, req)
		if err != nil {
			return grant{}, err
		}
		if !resp.GetAcquired() {
			return grant{holder: resp.GetHolder()}, nil
		}
		return grant{acquired: true, token: resp.GetLease().GetToken(), weight: max(int64(resp.GetLease().GetWeight()), 1)}, nil
	}
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d.IsValid() && d.AsDuration() > 0 {
		return d.AsDuration()
	}
	return def
}

// acquire runs a as a new holder: once (wait false) or until granted or
// ctx ends (wait true), in the session of opts (WithSession) or the
// default session, which it replaces when it turns out to have ended.
func (c *Client) acquire(ctx context.Context, opts []LockOption, wait bool, a acquisition) (*lease, error) {
	var cfg lockConfig
	for _, o := range opts {
		o.applyLock(&cfg)
	}
	session := cfg.session
	if session != nil {
		if err := session.Err(); err != nil {
			return nil, fmt.Errorf("coordinator: %s in session %s: %w", a.what(), session.ID(), err)
		}
	}
	// An acquisition that waits ends when the Client closes (callCtx). One
	// that does not is over in a round trip: Close answers it through the
	// stream, or by closing the connection, and a grant that arrives after
	// Close began is released (attached). It makes no context of its own,
	// which cost a TryLock a fifth of its own CPU: a cancel context, and an
	// AfterFunc on the Client's closing context whose lock every concurrent
	// call took twice.
	if wait {
		var cancel context.CancelFunc
		ctx, cancel = c.callCtx(ctx)
		defer cancel()
	} else if c.isClosed() {
		return nil, ErrClosed
	}
	inDefault := session == nil
	if inDefault {
		var err error
		if session, err = c.sessionToJoin(ctx, wait, a.kind, a.logName()); err != nil {
			if ctx.Err() != nil && wait {
				return nil, c.notAcquired(ctx, a.notAcquiredName(""), "", err)
			}
			return nil, callError(ctx, a.what(), err)
		}
	}
	holder := c.newHolder()
	b := newCallBackoff()
	var (
		lastErr     error
		lastBlocked string // a group's member in the way, as the coordinator last said
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
		_ = c.renewals.endSession(session.s, fmt.Errorf("%w: %s: %w", ErrLost, session.s.describe(), cause))
		s, err := c.sessionToJoin(ctx, wait, a.kind, a.logName())
		if err != nil {
			return false
		}
		session, holder = s, c.newHolder()
		return true
	}
	for {
		var waitFor time.Duration
		if wait {
			waitFor = maxWait
			if d, ok := ctx.Deadline(); ok {
				waitFor = max(min(waitFor, time.Until(d)-answerMargin), 0)
			}
		}
		start := time.Now()
		g, err := a.call(ctx, holder, session, waitFor)
		if err != nil && sessionEnded(err) && ctx.Err() == nil && nextSession(err) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil && wait && transient(err) {
				lastErr = err
				// Said, because waiting on an unreachable coordinator
				// looks like waiting for the lease.
				c.log.Warn("coordinator: acquisition failed; retrying", "kind", a.kind, "name", a.logName(), "err", err)
				if sleep(ctx, retryIn(b, err)) {
					continue // as the same holder: a lost grant is found again
				}
			}
			if outcomeUnknown(err) {
				c.abandon(ctx, a.names, holder)
			}
			if ctx.Err() != nil {
				return nil, c.notAcquired(ctx, a.notAcquiredName(lastBlocked), "", lastErr)
			}
			if c.isClosed() {
				return nil, ErrClosed
			}
			return nil, callError(ctx, a.what(), err)
		}
		if !g.acquired {
			if !wait {
				return nil, &NotAcquiredError{Name: a.notAcquiredName(g.blocked), Holder: g.holder}
			}
			lastBlocked = g.blocked
			// The coordinator was asked to answer before the deadline.
			if d, ok := ctx.Deadline(); ctx.Err() != nil || ok && time.Until(d) <= answerMargin {
				sleep(ctx, time.Until(d))
				return nil, c.notAcquired(ctx, a.notAcquiredName(g.blocked), g.holder, nil)
			}
			if time.Since(start) < waitFor/2 {
				// Answered long before the wait was over (a coordinator
				// shutting down?): do not spin.
				sleep(ctx, b.Next())
			}
			continue // the coordinator's longest wait passed: ask again
		}
		l, err := c.attached(ctx, session, a.kind, a.names, holder, g)
		if err != nil && ctx.Err() == nil && nextSession(err) {
			continue // ended between the grant and now
		}
		return l, err
	}
}

// attached makes the lease granted in s, valid as long as s and ended with
// it. When s ended meanwhile, it gives the grant up and fails.
func (c *Client) attached(ctx context.Context, s *Session, kind string, names []string, holder string, g grant) (*lease, error) {
	l := &lease{ending: newEnding(), c: c, kind: kind, holder: holder, token: g.token, weight: max(g.weight, 1), members: g.members, session: s.s}
	if kind != groupKind {
		l.name = names[0]
	}
	if err := c.renewals.attach(s.s, l); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		l.giveUpOnce(rctx)
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

// abandon gives up what an acquisition of names may have been granted
// without hearing of it (the call failed after it was sent), so that others
// need not wait for its TTL: each name's lease of holder, a group's one by
// one, as it may hold some of them (a group that waited across Redis
// Cluster slots). Best-effort, and after ctx (the acquisition's) ended.
func (c *Client) abandon(ctx context.Context, names []string, holder string) {
	if c.isClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	for _, name := range names {
		d, err := c.api.Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
		if err != nil || !d.GetHeld() {
			continue
		}
		// A semaphore's holder may be any of its grants.
		var token uint64
		for _, l := range append(d.GetHolders(), d.GetLease()) {
			if l.GetHolder() == holder {
				token = l.GetToken()
			}
		}
		if token == 0 {
			continue
		}
		if _, err := c.api.Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: token}); err != nil {
			c.log.Warn("coordinator: could not give up a lease granted to an abandoned acquisition; it expires after its TTL",
				"name", name, "holder", holder, "err", err)
		}
	}
}
