package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// LeaderInfo is an election's sitting leader.
type LeaderInfo struct {
	// Election is the election's name.
	Election string
	// Candidate is the leader's identity (a Client's Identity and a suffix).
	Candidate string
	// Value is what the leader proclaimed (its address, say).
	Value []byte
	// Term is the leadership's fencing token: larger for every new term.
	Term uint64
	// ExpiresAt is when the term ends unless renewed, by the coordinator's
	// store clock.
	ExpiresAt time.Time
}

func leaderInfo(l *coordinatorv1.Leader) LeaderInfo {
	info := LeaderInfo{Election: l.GetElection(), Candidate: l.GetCandidate(), Value: l.GetValue(), Term: l.GetTerm()}
	if ts := l.GetExpiresAt(); ts.IsValid() {
		info.ExpiresAt = ts.AsTime()
	}
	return info
}

// Leadership is an election won through a Client: a term in office, held
// in a session like a Lease (a leadership is a lease on the election's name
// whose token is the term) until it is resigned or lost.
//
// Check Done (or use Context) while acting as the leader, and hand Term to
// the resources the leader writes to, so that they can refuse an older
// term's writes. A Leadership is safe for concurrent use.
type Leadership struct {
	l *lease

	mu    sync.Mutex // serialises proclamations
	value []byte
}

// Election is the election's name.
func (e *Leadership) Election() string { return e.l.name }

// Candidate is who leads: the Client's identity and a suffix unique to this
// campaign.
func (e *Leadership) Candidate() string { return e.l.holder }

// Term is the leadership's fencing token.
func (e *Leadership) Term() uint64 { return e.l.token }

// Value is the value last proclaimed.
func (e *Leadership) Value() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return bytes.Clone(e.value)
}

// SessionID is the id of the session the leadership is attached to.
func (e *Leadership) SessionID() string { return e.l.session.id }

// TTL is the TTL of the leadership's session, as last granted.
func (e *Leadership) TTL() time.Duration { return e.l.session.currentTTL() }

// Deadline is when the leadership stops being valid by this process's
// clock unless its session is renewed before (see Session.Deadline).
func (e *Leadership) Deadline() time.Time { return e.l.session.currentDeadline() }

// Done is closed the moment the leadership ends: resigned, lost, expired,
// or its Client closed. Err then says which.
func (e *Leadership) Done() <-chan struct{} { return e.l.ended.Done() }

// Err is nil while in office; afterwards an error matching ErrReleased
// (resigned), ErrLost, ErrExpired or ErrClosed.
func (e *Leadership) Err() error { return e.l.err() }

// Context returns a context derived from parent that is cancelled when the
// leadership ends; context.Cause then returns Err.
func (e *Leadership) Context(parent context.Context) context.Context {
	return e.l.context(parent)
}

// String describes the leadership for logs.
func (e *Leadership) String() string {
	return fmt.Sprintf("leadership of %q by %s in term %d", e.l.name, e.l.holder, e.l.token)
}

// Proclaim publishes a new value as the sitting leader; observers see a
// PROCLAIMED event. It campaigns in the leadership's term only, so it never starts a new one: when the
// coordinator answers that the term is over (expired, resigned, or another
// term in office), the leadership ends with ErrLost and Proclaim returns
// that error; a transient error leaves the leadership as it was.
func (e *Leadership) Proclaim(ctx context.Context, value []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.l.err(); err != nil {
		return err
	}
	l, c := e.l, e.l.c
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.campaignCall(ctx, &coordinatorv1.CampaignRequest{
		Election: l.name, Candidate: l.holder, Value: value, Ttl: durationpb.New(l.session.asked), Term: l.token,
		SessionId: l.session.id,
	})
	if err != nil && ErrorReason(err) != coordinatorv1.ErrorReason_LEASE_NOT_HELD.String() {
		return callError(ctx, "proclaim in "+l.describe(), err)
	}
	if err != nil || !resp.GetElected() || resp.GetLeader().GetTerm() != l.token {
		lost := fmt.Errorf("%w: %s: the term is over on the coordinator", ErrLost, l.describe())
		if prior := c.renewals.endLease(l, lost); prior != nil {
			return prior
		}
		return lost
	}
	if err := l.err(); err != nil {
		return err
	}
	e.value = bytes.Clone(value)
	return nil
}

// Resign closes Done (Err returns ErrReleased), then steps down on the
// coordinator so that the next candidate is elected at once, retrying
// transient errors until ctx ends. It reports whether the coordinator
// stepped it down; a leadership no longer held (resigned already, lost, or
// given up by Close) is a no-op: false, and no error.
func (e *Leadership) Resign(ctx context.Context) (bool, error) {
	return e.l.release(ctx, func(ctx context.Context) (bool, error) {
		resp, err := e.l.c.resignCall(ctx, &coordinatorv1.ResignRequest{Election: e.l.name, Candidate: e.l.holder, Term: e.l.token})
		return resp.GetResigned(), err
	})
}

// Campaign runs for leadership of election with value, waiting in arrival
// order with the other candidates until elected or ctx ends. It retries
// transient errors with backoff. When ctx ends first, the error is a
// *NotAcquiredError that matches ErrNotAcquired and ctx's error.
//
// The leadership is attached to the Client's default session, unless
// WithSession attaches it to another; its Done and Err follow the session.
func (c *Client) Campaign(ctx context.Context, election string, value []byte, opts ...LockOption) (*Leadership, error) {
	value = bytes.Clone(value)
	l, err := c.acquire(ctx, opts, true, single("leadership", election, c.campaign(election, value)))
	if err != nil {
		return nil, err
	}
	return &Leadership{l: l, value: value}, nil
}

func (c *Client) campaign(election string, value []byte) acquireCall {
	return func(ctx context.Context, candidate string, session *Session, wait time.Duration) (grant, error) {
		req := &coordinatorv1.CampaignRequest{Election: election, Candidate: candidate, Value: value, Ttl: durationpb.New(session.s.asked),
			SessionId: session.ID()}
		if wait > 0 {
			req.Wait = durationpb.New(wait)
		}
		resp, err := c.campaignCall(ctx, req)
		if err != nil {
			return grant{}, err
		}
		if !resp.GetElected() {
			return grant{holder: resp.GetLeader().GetCandidate()}, nil
		}
		return grant{acquired: true, token: resp.GetLeader().GetTerm()}, nil
	}
}

// Leader returns the sitting leader of election, or ErrNoLeader.
func (c *Client) Leader(ctx context.Context, election string) (LeaderInfo, error) {
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.api.Leader(ctx, &coordinatorv1.LeaderRequest{Election: election})
	if err != nil {
		return LeaderInfo{}, callError(ctx, fmt.Sprintf("leader of %q", election), err)
	}
	if !resp.GetHasLeader() {
		return LeaderInfo{}, fmt.Errorf("%w: %q", ErrNoLeader, election)
	}
	return leaderInfo(resp.GetLeader()), nil
}

// RunAsLeader campaigns for election with value and, each time it is
// elected, runs fn with a context that is cancelled the moment the
// leadership ends (lost, expired, or ctx done). When fn returns, it resigns,
// so that the next candidate takes over at once, and campaigns again — it
// does not stop after one term, unlike client-go's RunOrDie — until ctx
// ends (ClientRules.leader_campaigns_again; when the proto says false, it
// returns fn's error after one term).
//
// fn's error is logged (WithLogger) and does not stop the loop. When fn
// returns soon after it started (under a minute) while still leader, with
// or without an error, the next campaign is delayed by an exponential
// backoff (100ms to 30s) so that a failing fn does not spin; after a term
// lost or expired, campaigning starts again at once.
//
// fn must return soon after its context is cancelled: until it does,
// RunAsLeader cannot resign nor campaign, and fn may be acting without
// the leadership (its fencing token, the term, still protects the resources
// that check it).
//
// RunAsLeader returns nil when ctx ends, and an error when it cannot campaign
// at all: the Client was closed (ErrClosed) or the coordinator refuses the
// request (an invalid election name, a missing token…).
func (c *Client) RunAsLeader(ctx context.Context, election string, value []byte, fn func(ctx context.Context) error, opts ...LockOption) error {
	b := newLeaderBackoff()
	for {
		e, err := c.Campaign(ctx, election, value, opts...)
		if err != nil {
			if errors.Is(err, ErrClosed) || ctx.Err() == nil {
				return err
			}
			return nil
		}
		started := time.Now()
		lctx := e.Context(ctx)
		fnErr := fn(lctx)
		ended := e.Err() // before resigning: was the term over already?

		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(c.closeTimeout, time.Second))
		_, _ = e.Resign(rctx)
		cancel()

		switch {
		case ctx.Err() != nil:
			return nil
		case !leaderCampaignsAgain:
			return fnErr
		case ended != nil:
			c.log.Info("coordinator: leadership ended; campaigning again", "election", election, "term", e.Term(), "reason", ended, "fn_err", fnErr)
			b.Reset()
			continue
		case fnErr != nil:
			c.log.Error("coordinator: the leader's function failed; resigned and campaigning again", "election", election, "term", e.Term(), "err", fnErr)
		}
		if time.Since(started) >= leaderEarlyReturn {
			b.Reset()
			continue
		}
		if !sleep(ctx, b.Next()) {
			return nil
		}
	}
}
