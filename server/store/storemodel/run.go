package storemodel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// Subject is a store under check, fresh and empty.
type Subject struct {
	store.Store
	// Now reads the store's clock: the model's time for the next call.
	Now func() time.Time
	// Advance lets d pass on the store's clock; nil for a store on real
	// time, where Advance operations sleep to the next window (Window).
	Advance func(d time.Duration)
	// Slack is how far a time the store reports may be from the model's:
	// 0 for a fake clock (exact), the call's latency and the store's
	// rounding for real time.
	Slack time.Duration
	// LazySessions: each name learns of its sessions' renewals and ends
	// when it next needs to (Redis, whose sessions live in other slots
	// than their names). So an attached grant's ExpiresAt is its session's
	// expiry as its name last learned it, as early as the grant; and until
	// the name learns that the session ended, the holder may still release
	// the grant (which ends its lock delay), and renewing it answers
	// ErrLeaseInSession rather than ErrLeaseNotHeld.
	LazySessions bool
	// Close ends the store and frees what it holds.
	Close func()
}

// Factory makes a fresh, empty store with the given lock delay.
type Factory func(lockDelay time.Duration) (Subject, error)

// Mismatch is a step where the store and the model disagree, or where the
// store broke a rule of tokens.
type Mismatch struct {
	Step  int
	Op    Op
	Why   string
	Store string // the store's answer
	Model string // the model's answer
}

func (m *Mismatch) Error() string {
	return fmt.Sprintf("step %d, %v: %s\n\tstore: %s\n\tmodel: %s", m.Step, m.Op, m.Why, m.Store, m.Model)
}

// errTooSlow ends a real-time run whose calls outran their window: its
// answers would prove nothing.
var errTooSlow = errors.New("the calls of one window took longer than half the window: the machine is too slow for this unit")

// Step is one step of a run as the trace reports it.
type Step struct {
	Op           Op
	Store, Model string
}

// runner applies a sequence to a subject and to the model side by side.
type runner struct {
	cfg    Config
	s      Subject
	m      *Model
	window time.Duration
	ctx    context.Context

	// slots are the sessions' ids (empty: never created), owners their
	// owners, labels what a trace calls each id.
	slots, owners []string
	labels        map[string]string
	created       int
	// issued are the tokens issued for each name, in order; floor the
	// largest token or LastToken the store reported for it; attached the
	// grants (name, holder, token) seen attached to a session.
	issued   map[string][]uint64
	floor    map[string]uint64
	attached map[grantID]bool

	base    time.Time // the first now, which traces count from
	start   time.Time // real time, for the windows
	win     int       // the current window
	trace   []Step
	tracing bool
}

// run applies seq to a fresh store of f and to the model. It returns the
// first mismatch (nil when none), how many operations ran, and an error
// when the run could not be made.
func run(ctx context.Context, cfg Config, f Factory, seq Sequence, window time.Duration, tracing bool) (*Mismatch, []Step, int, error) {
	s, err := f(seq.LockDelay)
	if err != nil {
		return nil, nil, 0, err
	}
	defer s.Close()
	r := &runner{cfg: cfg, s: s, m: New(seq.LockDelay), window: window, ctx: ctx, tracing: tracing,
		slots: make([]string, cfg.Sessions+1), owners: make([]string, cfg.Sessions+1), labels: map[string]string{},
		issued: map[string][]uint64{}, floor: map[string]uint64{}, attached: map[grantID]bool{}}
	r.base, r.start = s.Now(), time.Now()
	for i, op := range seq.Ops {
		if err := ctx.Err(); err != nil {
			return nil, r.trace, i, err
		}
		mm, err := r.step(op)
		if err == nil && mm == nil && seq.Observe {
			mm, err = r.observe(op)
		}
		if err != nil {
			return nil, r.trace, i, err
		}
		if mm != nil {
			mm.Step, mm.Op = i, op
			return mm, r.trace, i + 1, nil
		}
	}
	return nil, r.trace, len(seq.Ops), nil
}

// now is the model's time for the next call; on real time it fails when
// the window's first half is over.
func (r *runner) now() (time.Time, error) {
	if r.s.Advance == nil && r.window > 0 {
		if time.Since(r.start)-time.Duration(r.win)*r.window > r.window/2-r.window/10 {
			return time.Time{}, errTooSlow
		}
	}
	return r.s.Now(), nil
}

func (r *runner) advance(d time.Duration) {
	if r.s.Advance != nil {
		r.s.Advance(d)
		return
	}
	r.win++
	time.Sleep(time.Until(r.start.Add(time.Duration(r.win) * r.window)))
}

// session resolves a slot to the id and owner a call names.
func (r *runner) session(op Op) (id, owner string) {
	if op.Session == 0 {
		return "", ""
	}
	id, owner = r.slots[op.Session], r.owners[op.Session]
	if id == "" {
		id = fmt.Sprintf("never-created-%d", op.Session)
	}
	if op.Intruder {
		owner = "intruder"
	}
	return id, owner
}

// token resolves a member's token reference.
func (r *runner) token(m Member, holder string) uint64 {
	issued := r.issued[m.Name]
	switch m.Token {
	case Mine:
		if t := r.m.TokenOf(m.Name, holder); t != 0 {
			return t
		}
		fallthrough
	case LastIssued:
		if len(issued) > 0 {
			return issued[len(issued)-1]
		}
	case FirstIssued:
		if len(issued) > 0 {
			return issued[0]
		}
	case NoToken:
		return 0
	}
	return 1 // none issued yet: a token nobody holds
}

func value(v string) []byte {
	if v == "" {
		return nil
	}
	return []byte(v)
}

// grantID names a grant.
type grantID struct {
	name, holder string
	token        uint64
}

// seen records the grants of leases attached to a session.
func (r *runner) seen(leases ...store.Lease) {
	for _, l := range leases {
		if l.Session != "" {
			r.attached[grantID{l.Name, l.Holder, l.Token}] = true
		}
	}
}

// release compares a Release of a lease. A store with lazy sessions may
// still release a grant whose session ended (in its lock delay or past
// it): the model then drops it too.
func (r *runner) release(c *cmp, now time.Time, l store.GroupLease, holder string, got, want bool) {
	if got && !want && r.s.LazySessions && r.attached[grantID{l.Name, holder, l.Token}] &&
		r.m.ReleaseEnded(now, l.Name, holder, l.Token) {
		return
	}
	c.equal("released "+l.Name, got, want)
}

// issue checks a fresh grant's token against every earlier token of its
// name, and records it.
func (r *runner) issue(n string, token uint64) string {
	why := ""
	if token <= r.floor[n] {
		why = fmt.Sprintf("%s: fresh token %d is not above %d, issued or reported before", n, token, r.floor[n])
	}
	r.issued[n] = append(r.issued[n], token)
	r.floor[n] = max(r.floor[n], token)
	return why
}

// step applies op to both sides and compares their answers.
func (r *runner) step(op Op) (*Mismatch, error) {
	if op.Kind == Advance {
		r.advance(op.D)
		r.record(op, "", "")
		return nil, nil
	}
	now, err := r.now()
	if err != nil {
		return nil, err
	}
	ctx := r.ctx
	var c cmp
	switch op.Kind {
	case Acquire:
		m := op.Members[0]
		id, owner := r.session(op)
		req := store.AcquireRequest{Name: m.Name, Holder: op.Holder, TTL: op.TTL, Session: id, SessionOwner: owner,
			Value: value(op.Value), KeepValue: op.KeepValue, Token: r.token(m, op.Holder), Waiter: op.Waiter,
			WaiterTTL: op.WaiterTTL, Capacity: m.Capacity, Weight: m.Weight, MaxHolders: op.MaxHolders}
		got, gerr := r.s.Acquire(ctx, req)
		token := r.floor[m.Name] + 1 // what the model grants with when the store did not
		if gerr == nil && got.Acquired {
			token = got.Lease.Token
		}
		last := r.m.LastToken(m.Name)
		want, werr := r.m.Acquire(now, req, token)
		c = r.cmp(now)
		c.err(gerr, werr)
		if gerr == nil && werr == nil {
			c.acquireResult("", m.Name, got, want)
		}
		if c.ok() && want.Acquired && r.m.LastToken(m.Name) != last {
			c.fail(r.issue(m.Name, token))
		}
		r.seen(want.Lease)
		r.record(op, r.fmt(got, gerr), r.fmt(want, werr))
		return c.mismatch(r.fmt(got, gerr), r.fmt(want, werr)), nil

	case AcquireGroup:
		id, owner := r.session(op)
		req := store.GroupRequest{Holder: op.Holder, TTL: op.TTL, Session: id, SessionOwner: owner, Waiter: op.Waiter,
			WaiterTTL: op.WaiterTTL, MaxHolders: op.MaxHolders, Claim: op.Claim}
		for _, m := range op.Members {
			req.Members = append(req.Members, store.GroupMember{Name: m.Name, Capacity: m.Capacity, Weight: m.Weight})
		}
		got, gerr := r.s.AcquireGroup(ctx, req)
		tokens := make([]uint64, len(req.Members))
		lasts := make([]uint64, len(req.Members))
		for i, m := range req.Members {
			tokens[i] = r.floor[m.Name] + 1
			if gerr == nil && got.Acquired && i < len(got.Leases) {
				tokens[i] = got.Leases[i].Token
			}
			lasts[i] = r.m.LastToken(m.Name)
		}
		want, werr := r.m.AcquireGroup(now, req, tokens)
		c = r.cmp(now)
		c.err(gerr, werr)
		if gerr == nil && werr == nil {
			c.groupResult(req, got, want)
		}
		if c.ok() && want.Acquired {
			for i, m := range req.Members {
				if r.m.LastToken(m.Name) != lasts[i] {
					c.fail(r.issue(m.Name, tokens[i]))
				}
			}
		}
		r.seen(want.Leases...)
		r.record(op, r.fmt(got, gerr), r.fmt(want, werr))
		return c.mismatch(r.fmt(got, gerr), r.fmt(want, werr)), nil

	case Release:
		m := op.Members[0]
		token := r.token(m, op.Holder)
		got, gerr := r.s.Release(ctx, m.Name, op.Holder, token)
		want := r.m.Release(now, m.Name, op.Holder, token)
		c = r.cmp(now)
		c.err(gerr, nil)
		r.release(&c, now, store.GroupLease{Name: m.Name, Token: token}, op.Holder, got, want)
		r.record(op, r.fmt(got, gerr), r.fmt(want, nil))
		return c.mismatch(r.fmt(got, gerr), r.fmt(want, nil)), nil

	case ReleaseGroup:
		leases := make([]store.GroupLease, len(op.Members))
		for i, m := range op.Members {
			leases[i] = store.GroupLease{Name: m.Name, Token: r.token(m, op.Holder), Claim: op.Claim}
		}
		got, gerr := r.s.ReleaseGroup(ctx, op.Holder, leases)
		want := r.m.ReleaseGroup(now, op.Holder, leases)
		c = r.cmp(now)
		c.err(gerr, nil)
		if gerr == nil && len(got) != len(want) {
			c.fail(fmt.Sprintf("released: store %v, model %v", got, want))
		} else if gerr == nil {
			for i, l := range leases {
				r.release(&c, now, l, op.Holder, got[i], want[i])
			}
		}
		r.record(op, r.fmt(got, gerr), r.fmt(want, nil))
		return c.mismatch(r.fmt(got, gerr), r.fmt(want, nil)), nil

	case Renew:
		m := op.Members[0]
		token := r.token(m, op.Holder)
		got, gerr := r.s.Renew(ctx, m.Name, op.Holder, token, op.TTL)
		want, werr := r.m.Renew(now, m.Name, op.Holder, token, op.TTL)
		if r.s.LazySessions && errors.Is(gerr, store.ErrLeaseInSession) && errors.Is(werr, store.ErrLeaseNotHeld) &&
			r.attached[grantID{m.Name, op.Holder, token}] {
			werr = gerr // its session ended, which its name has not learned yet
		}
		c = r.cmp(now)
		c.err(gerr, werr)
		if gerr == nil && werr == nil {
			c.lease("lease", got, want)
		}
		r.record(op, r.fmt(got, gerr), r.fmt(want, werr))
		return c.mismatch(r.fmt(got, gerr), r.fmt(want, werr)), nil

	case Dequeue:
		gerr := r.s.Dequeue(ctx, op.Members[0].Name, op.Waiter)
		r.m.Dequeue(now, op.Members[0].Name, op.Waiter)
		c = r.cmp(now)
		c.err(gerr, nil)
		r.record(op, r.fmt(nil, gerr), "ok")
		return c.mismatch(r.fmt(nil, gerr), "ok"), nil

	case RefreshWaiters:
		gerr := r.s.RefreshWaiters(ctx, op.Members[0].Name, op.Waiters, op.TTL)
		werr := r.m.RefreshWaiters(now, op.Members[0].Name, op.Waiters, op.TTL)
		c = r.cmp(now)
		c.err(gerr, werr)
		r.record(op, r.fmt(nil, gerr), r.fmt(nil, werr))
		return c.mismatch(r.fmt(nil, gerr), r.fmt(nil, werr)), nil

	case List:
		got, gerr := r.s.List(ctx, op.Prefix, op.Cursor, op.Limit)
		want := r.m.List(now, op.Prefix, op.Cursor, op.Limit)
		c = r.cmp(now)
		c.err(gerr, nil)
		if gerr == nil {
			c.page(op, got, r.m.List(now, op.Prefix, op.Cursor, math.MaxInt))
		}
		r.record(op, r.fmt(got, gerr), r.fmt(want, nil))
		return c.mismatch(r.fmt(got, gerr), r.fmt(want, nil)), nil

	case CreateSession:
		got, gerr := r.s.CreateSession(ctx, op.Owner, op.TTL)
		r.created++
		id := fmt.Sprintf("failed-%d", r.created)
		if gerr == nil {
			id = got.ID
		}
		want, werr := r.m.CreateSession(now, op.Owner, op.TTL, id)
		if werr == nil {
			r.slots[op.Session], r.owners[op.Session] = id, op.Owner
			r.labels[id] = fmt.Sprintf("s%d.%d", op.Session, r.created)
		}
		c = r.cmp(now)
		c.err(gerr, werr)
		if gerr == nil && werr == nil {
			c.session(got, want)
		}
		r.record(op, r.fmt(got, gerr), r.fmt(want, werr))
		return c.mismatch(r.fmt(got, gerr), r.fmt(want, werr)), nil

	case RenewSession:
		id, owner := r.session(op)
		got, gerr := r.s.RenewSession(ctx, id, owner)
		want, werr := r.m.RenewSession(now, id, owner)
		c = r.cmp(now)
		c.err(gerr, werr)
		if gerr == nil && werr == nil {
			c.session(got, want)
		}
		r.record(op, r.fmt(got, gerr), r.fmt(want, werr))
		return c.mismatch(r.fmt(got, gerr), r.fmt(want, werr)), nil

	case CloseSession:
		id, owner := r.session(op)
		gerr := r.s.CloseSession(ctx, id, owner)
		werr := r.m.CloseSession(now, id, owner)
		c = r.cmp(now)
		c.err(gerr, werr)
		r.record(op, r.fmt(nil, gerr), r.fmt(nil, werr))
		return c.mismatch(r.fmt(nil, gerr), r.fmt(nil, werr)), nil

	case DescribeSession:
		return r.describeSession(op, op.Session, op.Intruder)

	case Describe:
		return r.describe(op, op.Members[0].Name)
	}
	return nil, fmt.Errorf("storemodel: no such operation %v", op.Kind)
}

func (r *runner) record(op Op, got, want string) {
	if r.tracing {
		r.trace = append(r.trace, Step{Op: op, Store: got, Model: want})
	}
}

// describeSession compares DescribeSession of a slot.
func (r *runner) describeSession(op Op, slot int, intruder bool) (*Mismatch, error) {
	now, err := r.now()
	if err != nil {
		return nil, err
	}
	id, owner := r.session(Op{Session: slot, Intruder: intruder})
	got, gerr := r.s.DescribeSession(r.ctx, id, owner)
	want, werr := r.m.DescribeSession(now, id, owner)
	c := r.cmp(now)
	c.err(gerr, werr)
	if gerr == nil && werr == nil {
		c.session(got.Session, want.Session)
		c.equal("names", fmt.Sprint(got.Names), fmt.Sprint(want.Names))
	}
	if op.Kind == DescribeSession {
		r.record(op, r.fmt(got, gerr), r.fmt(want, werr))
	}
	return c.mismatch(r.fmt(got, gerr), r.fmt(want, werr)), nil
}

// describe compares Describe of name n.
func (r *runner) describe(op Op, n string) (*Mismatch, error) {
	now, err := r.now()
	if err != nil {
		return nil, err
	}
	got, gerr := r.s.Describe(r.ctx, n)
	want := r.m.Describe(now, n)
	c := r.cmp(now)
	c.err(gerr, nil)
	if gerr == nil {
		c.description(n, got, want)
	}
	if op.Kind == Describe {
		r.record(op, r.fmt(got, gerr), r.fmt(want, nil))
	}
	return c.mismatch(r.fmt(got, gerr), r.fmt(want, nil)), nil
}

// observe compares, after op, Describe of each name it names and
// DescribeSession of its session.
func (r *runner) observe(op Op) (*Mismatch, error) {
	if op.Kind == Describe || op.Kind == DescribeSession {
		return nil, nil
	}
	for _, m := range op.Members {
		mm, err := r.describe(Op{}, m.Name)
		if mm != nil {
			mm.Why = "Describe(" + m.Name + ") after the step: " + mm.Why
		}
		if mm != nil || err != nil {
			return mm, err
		}
	}
	if op.Session == 0 || r.slots[op.Session] == "" {
		return nil, nil
	}
	mm, err := r.describeSession(Op{}, op.Session, false)
	if mm != nil {
		mm.Why = fmt.Sprintf("DescribeSession(s%d) after the step: %s", op.Session, mm.Why)
	}
	return mm, err
}

// cmp collects the differences of one step's answers.
type cmp struct {
	r    *runner
	now  time.Time
	diff []string
}

func (r *runner) cmp(now time.Time) cmp { return cmp{r: r, now: now} }

func (c *cmp) ok() bool { return len(c.diff) == 0 }

func (c *cmp) fail(why string) {
	if why != "" {
		c.diff = append(c.diff, why)
	}
}

func (c *cmp) mismatch(got, want string) *Mismatch {
	if c.ok() {
		return nil
	}
	return &Mismatch{Why: strings.Join(c.diff, "; "), Store: got, Model: want}
}

func (c *cmp) equal(what string, got, want any) {
	if got != want {
		c.fail(fmt.Sprintf("%s: store %v, model %v", what, got, want))
	}
}

// errKind classifies an error as far as the model tells errors apart.
func errKind(err error) string {
	var capErr *store.CapacityError
	var limit *store.HolderLimitError
	var quarantine *store.QuarantineError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &capErr):
		return fmt.Sprintf("capacity error (have %d, asked %d)", capErr.Have, capErr.Asked)
	case errors.As(err, &limit):
		return fmt.Sprintf("holder limit %d", limit.Limit)
	case errors.As(err, &quarantine):
		return "quarantine"
	}
	for _, known := range []error{store.ErrLeaseNotHeld, store.ErrLeaseInSession, store.ErrSessionNotFound,
		store.ErrSessionExpired, store.ErrSessionClosed, store.ErrSessionNotOwned, store.ErrUnavailable,
		context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, known) {
			return known.Error()
		}
	}
	// Whatever else a store answers is its wording of an invalid request:
	// the model says when one is.
	return ErrInvalid.Error()
}

func (c *cmp) err(got, want error) {
	if g, w := errKind(got), errKind(want); g != w {
		c.fail(fmt.Sprintf("error: store %q, model %q", g, w))
	}
}

// time compares a time the store reported with the model's: exactly on a
// fake clock, within the slack otherwise; lo, when not zero, is the
// earliest the store may report instead (a lazy session bound).
func (c *cmp) time(what string, got, want, lo time.Time) {
	slack := c.r.s.Slack
	if lo.IsZero() || !c.r.s.LazySessions {
		lo = want
	}
	if got.Before(lo.Add(-slack)) || got.After(want.Add(slack)) {
		c.fail(fmt.Sprintf("%s: store %s, model %s", what, c.r.at(got), c.r.at(want)))
	}
}

func (c *cmp) lease(what string, got, want store.Lease) {
	if got.Name != want.Name || got.Holder != want.Holder || got.Token != want.Token || !bytes.Equal(got.Value, want.Value) ||
		got.TTL != want.TTL || got.Weight != want.Weight || got.Session != want.Session {
		c.fail(fmt.Sprintf("%s: store %s, model %s", what, c.r.lease(got), c.r.lease(want)))
		return
	}
	lo := time.Time{}
	if want.Session != "" {
		lo = c.r.m.Since(want.Name, want.Holder)
	}
	c.time(what+" expiry", got.ExpiresAt, want.ExpiresAt, lo)
}

func (c *cmp) leases(what string, got, want []store.Lease) {
	if len(got) != len(want) {
		c.fail(fmt.Sprintf("%s: store %s, model %s", what, c.r.fmt(got, nil), c.r.fmt(want, nil)))
		return
	}
	for i := range got {
		c.lease(fmt.Sprintf("%s[%d]", what, i), got[i], want[i])
	}
}

// acquireResult compares an Acquire's answer (of a group's member, what
// names it); a refusal may name any of the grants that end first.
func (c *cmp) acquireResult(what, n string, got, want store.AcquireResult) {
	c.equal(what+"acquired", got.Acquired, want.Acquired)
	if !c.ok() {
		return
	}
	if got.Acquired || want.Lease.Holder == "" {
		c.lease(what+"lease", got.Lease, want.Lease)
	} else {
		first := c.r.m.FirstToEnd(n, c.now)
		if c.r.s.LazySessions || c.r.s.Slack > 0 {
			first = c.r.m.Describe(c.now, n).Holders
		}
		i := slices.IndexFunc(first, func(l store.Lease) bool { return l.Holder == got.Lease.Holder })
		if i < 0 {
			c.fail(fmt.Sprintf("%sthe holder named: store %s, model one of %s", what, c.r.lease(got.Lease), c.r.fmt(first, nil)))
			return
		}
		c.lease(what+"holder named", got.Lease, first[i])
	}
	lo := time.Time{}
	if !want.RetryAt.IsZero() {
		lo = c.now
	}
	if got.RetryAt.IsZero() != want.RetryAt.IsZero() {
		c.fail(fmt.Sprintf("%sretry at: store %s, model %s", what, c.r.at(got.RetryAt), c.r.at(want.RetryAt)))
	} else if !want.RetryAt.IsZero() {
		c.time(what+"retry at", got.RetryAt, want.RetryAt, lo)
	}
}

func (c *cmp) groupResult(req store.GroupRequest, got, want store.GroupResult) {
	c.equal("acquired", got.Acquired, want.Acquired)
	c.equal("leases", len(got.Leases), len(want.Leases))
	c.equal("members", len(got.Members), len(want.Members))
	c.equal("held", len(got.Held), 0)
	// Queued: nil, or every member when the group waits (one state change).
	for i, q := range got.Queued {
		if q != (req.Waiter != "") {
			c.fail(fmt.Sprintf("queued[%d]: store %v, model %v", i, q, req.Waiter != ""))
		}
	}
	if !c.ok() {
		return
	}
	for i := range got.Leases {
		c.lease(fmt.Sprintf("lease[%d]", i), got.Leases[i], want.Leases[i])
	}
	for i := range got.Members {
		c.acquireResult(fmt.Sprintf("member[%d] ", i), req.Members[i].Name, got.Members[i], want.Members[i])
	}
}

// page compares a page of List with all the held leases after its cursor:
// the page has those of the first held names, at most its limit of them,
// and skips none: with a Next, those up to it (a store may stop short of
// the limit, when a name it counted ended before it read it), and without
// one, all of them.
func (c *cmp) page(op Op, got, all store.ListPage) {
	limit := op.Limit
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	names := 0
	for i, l := range got.Leases {
		if i == 0 || l.Name != got.Leases[i-1].Name {
			names++
		}
	}
	if names > limit {
		c.fail(fmt.Sprintf("a page of %d names, limit %d", names, limit))
	}
	want := all.Leases
	if got.Next != "" {
		want = slices.DeleteFunc(slices.Clone(want), func(l store.Lease) bool { return l.Name > got.Next })
	}
	c.leases("leases", got.Leases, want)
}

func (c *cmp) description(n string, got, want store.Description) {
	c.equal("held", got.Held, want.Held)
	// The capacity of a name nobody holds or waits for is 1, says
	// store.Description, but the stores keep reporting the last one until
	// they forget the name: the memory store after the idle retention,
	// Redis when the lease key expires (at the last waiter's deadline for a
	// name that was only waited for). Neither is checked.
	if c.r.m.Occupied(n, c.now) {
		c.equal("capacity", got.Capacity, want.Capacity)
	}
	c.equal("waiters", got.Waiters, want.Waiters)
	c.equal("waiting weight", got.WaitingWeight, want.WaitingWeight)
	c.leases("holders", got.Holders, want.Holders)
	if c.ok() && got.Held {
		c.lease("lease", got.Lease, want.Lease)
	}
	// LastToken: the last token issued when the store issued one (a name
	// forgotten would be a floor instead: the checks keep names longer
	// than a run), otherwise a floor of every token issued after.
	switch last := c.r.m.LastToken(n); {
	case last != 0 && got.LastToken != last:
		c.fail(fmt.Sprintf("last token: store %d, model %d (the last issued)", got.LastToken, last))
	case last == 0 && got.LastToken == 0:
		c.fail("last token 0")
	}
	c.r.floor[n] = max(c.r.floor[n], got.LastToken)
}

func (c *cmp) session(got, want store.Session) {
	c.equal("session id", c.r.label(got.ID), c.r.label(want.ID))
	c.equal("session owner", got.Owner, want.Owner)
	c.equal("session ttl", got.TTL, want.TTL)
	c.time("session expiry", got.ExpiresAt, want.ExpiresAt, time.Time{})
}

// TokenOf is the token of holder's grant of n (live or in its lock
// delay), 0 when it holds none.
func (m *Model) TokenOf(n, holder string) uint64 {
	if s := m.names[n]; s != nil {
		if g := s.grantOf(holder); g != nil {
			return g.token
		}
	}
	return 0
}
