package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// The lease operations: one script call per state change (acquire.lua,
// renew.lua, release.lua, dequeue.lua, refresh_waiters.lua), each through
// Store.call, which bounds it and follows it with WAIT when asked to.

// acquireArgs are acquire.lua's ARGV, by name: argv lays them out in the
// order of the script's header, which TestAcquireArgsFollowTheScript holds.
type acquireArgs struct {
	holder     string
	ttlMS      int64
	value      []byte
	capacity   int64
	weight     int64
	maxHolders int
	name       string
	// session is the id of the session to attach to, or ""; sessionTTL its
	// ttl (ms); proofs the proofs of sessions (attached.lua) but its own.
	session    string
	sessionTTL int64
	attachedAt int64 // the attach's time (ms, the session slot's clock)
	proofs     string
	waiter     string
	waiterTTL  any    // int64 ms, boxed once for the default
	expected   string // decimal token or ""
	keepValue  string // "1" or ""
}

// argv lays the arguments out, leaving out the trailing ones that are ""
// (the script reads an absent one as ""; the waiter's ttl goes with the
// waiter, the session's ttl with the session): each costs Redis about 1k
// instructions, and a grant of its own that does not wait needs none of
// them, an attached one only its session, the session's ttl and the
// attach's time.
func (a acquireArgs) argv() []any {
	v := []any{a.holder, a.ttlMS, a.value, a.capacity, a.weight, a.maxHolders, a.name,
		a.session, a.sessionTTL, a.attachedAt, a.proofs, a.waiter, a.waiterTTL, a.expected, a.keepValue}
	switch {
	case a.keepValue != "":
		return v
	case a.expected != "":
		return v[:14]
	case a.waiter != "":
		return v[:13]
	case a.proofs != "":
		return v[:11]
	case a.session != "":
		return v[:10]
	}
	return v[:7]
}

// asked is the grant req would get from this call: acquire.lua's reply
// for a grant as asked carries only its token and expiry.
func (a acquireArgs) asked(req store.AcquireRequest) store.Lease {
	l := store.Lease{Name: req.Name, Holder: req.Holder, Value: req.Value, TTL: time.Duration(a.ttlMS) * time.Millisecond,
		Weight: a.weight, Session: a.session}
	if a.session != "" {
		l.TTL = time.Duration(a.sessionTTL) * time.Millisecond
	}
	return l
}

// acquireArgs lays out req for acquire.lua, but for its session's proofs
// and remaining time (Acquire adds them).
func (s *Store) acquireArgs(req store.AcquireRequest, capacity, weight int64) acquireArgs {
	args := acquireArgs{
		capacity: capacity, weight: weight, maxHolders: req.MaxHoldersOrDefault(),
		holder: req.Holder, ttlMS: durationMS(req.TTL), value: req.Value, waiter: req.Waiter, waiterTTL: s.boxed.waiterTTL,
		name: req.Name,
	}
	if req.WaiterTTL > 0 {
		args.waiterTTL = durationMS(req.WaiterTTL)
	}
	if req.KeepValue {
		args.keepValue = "1"
	}
	if req.Token != 0 {
		args.expected = strconv.FormatUint(req.Token, 10)
	}
	return args
}

// Acquire implements store.Leases.
//
// With a Session, it asks the session's slot first (as its owner, adding
// the name to the session's names) for the session's remaining time, which
// becomes the grant's bound. A name holding grants of sessions whose bounds
// passed asks for proofs of those sessions: they are fetched from their
// slots, and the call made again with them (see doc.go).
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if req.TTL <= 0 && req.Session == "" {
		return store.AcquireResult{}, fmt.Errorf("redisstore: acquire %q: ttl %s is not positive", req.Name, req.TTL)
	}
	if err := store.CheckShares(req); err != nil {
		return store.AcquireResult{}, fmt.Errorf("redisstore: %w", err)
	}
	capacity, weight := req.CapacityOrDefault(), req.WeightOrDefault()
	args := s.acquireArgs(req, capacity, weight)
	proofs := proofSet{}
	if req.Session != "" {
		if p, ok := s.attachments.proof(req.Session, req.SessionOwner, req.Name, time.Now()); ok {
			proofs[req.Session] = p
		} else if err := s.proveOwn(ctx, proofs, req); err != nil {
			return store.AcquireResult{}, err
		}
		args.session = req.Session
	}
	k := s.keys(req.Name)
	var reply acquireReply
	var replicated func() error
	attempt := func(text string) ([]string, error) {
		args.proofs = text
		if req.Session != "" {
			own, ok := proofs.left(req.Session, time.Now())
			if !ok {
				// Spent while other proofs were fetched: ask again.
				if err := s.proveOwn(ctx, proofs, req); err != nil {
					return nil, err
				}
				own, _ = proofs.left(req.Session, time.Now())
			}
			p := proofs[req.Session]
			args.ttlMS, args.sessionTTL, args.attachedAt = own, p.ttl.Milliseconds(), p.attachedAt
		}
		v, rep, err := s.callWait(ctx, "acquire", true, s.scripts.acquire,
			[]string{k.lease, k.queue, k.waiters, k.marker}, args.argv()...)
		if err != nil {
			return nil, err
		}
		if reply, err = decodeAcquire(args.asked(req), v); err != nil {
			return nil, err
		}
		if reply.lost {
			s.dataLost()
		}
		replicated = rep
		return reply.need, nil
	}
	// The script makes the attaching session's own proof from ttlMS, no
	// later than the one the proofs hold: only the others' travel. A name
	// that refuses the attach (detached from the session since) is
	// attached again: that puts it back among the session's names.
	for round := 1; ; round++ {
		if err := s.withProofs(ctx, proofs, req.Session, attempt); err != nil {
			return store.AcquireResult{}, err
		}
		if !reply.detached {
			break
		}
		s.attachments.detached(req.Session, req.Name)
		if round == maxProofRounds {
			return store.AcquireResult{}, fmt.Errorf("redisstore: acquire %q: %w: the name kept detaching its session (%d attaches)",
				req.Name, store.ErrUnavailable, round)
		}
		if err := s.proveOwn(ctx, proofs, req); err != nil {
			return store.AcquireResult{}, err
		}
	}
	switch {
	case reply.quarantined:
		return store.AcquireResult{}, &store.QuarantineError{RetryAfter: reply.retryAfter}
	case reply.capacity != 0:
		return store.AcquireResult{}, &store.CapacityError{Name: req.Name, Have: reply.capacity, Asked: capacity}
	case reply.holderLimit != 0:
		return store.AcquireResult{}, &store.HolderLimitError{Name: req.Name, Limit: reply.holderLimit}
	}
	if reply.result.Acquired {
		if err := replicated(); err != nil {
			return store.AcquireResult{}, err
		}
	}
	return reply.result, nil
}

// dataLost reports a data loss detected by this store's script.
func (s *Store) dataLost() {
	s.log.Error("Redis lost its data (data-loss marker missing): leases, queues and fencing counters are gone; "+
		"tokens are re-seeded from the Redis clock", "quarantine", s.quarantine)
	s.marks.forget() // the watched marks are gone too
	if s.onDataLoss != nil {
		s.onDataLoss(s.quarantine)
	}
}

// Renew implements store.Leases.
func (s *Store) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (store.Lease, error) {
	if ttl <= 0 {
		return store.Lease{}, fmt.Errorf("redisstore: renew %q: ttl %s is not positive", name, ttl)
	}
	k := s.keys(name)
	ttlMS := durationMS(ttl)
	v, replicated, err := s.callWait(ctx, "renew", true, s.scripts.renew, []string{k.lease},
		holder, strconv.FormatUint(token, 10), ttlMS)
	if err != nil {
		return store.Lease{}, err
	}
	l, err := decodeRenew(name, v)
	if err != nil {
		return store.Lease{}, err
	}
	if err := replicated(); err != nil {
		return store.Lease{}, err
	}
	return l, nil
}

// releaseArgs are release.lua's ARGV.
func (s *Store) releaseArgs(name, holder string, token uint64) []any {
	return []any{holder, strconv.FormatUint(token, 10), name}
}

// Release implements store.Leases.
func (s *Store) Release(ctx context.Context, name, holder string, token uint64) (bool, error) {
	k := s.keys(name)
	v, err := s.call(ctx, "release", s.scripts.release, []string{k.lease}, s.releaseArgs(name, holder, token)...)
	if err != nil {
		return false, err
	}
	released, session, err := decodeRelease(v)
	if session != "" {
		s.detacher.released(session, name, time.Now())
	}
	return released, err
}

// Dequeue implements store.Leases.
func (s *Store) Dequeue(ctx context.Context, name, waiter string) error {
	k := s.keys(name)
	v, err := s.call(ctx, "dequeue", dequeueScript, []string{k.queue, k.waiters}, waiter, s.channel, name)
	if err != nil {
		return err
	}
	_, err = decodeDequeue(v)
	return err
}

// RefreshWaiters implements store.Leases.
func (s *Store) RefreshWaiters(ctx context.Context, name string, waiters []string, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("redisstore: refresh waiters of %q: ttl %s is not positive", name, ttl)
	}
	if len(waiters) == 0 {
		return nil
	}
	k := s.keys(name)
	keys := []string{k.queue, k.waiters, k.lease}
	args := make([]any, 0, 3+min(len(waiters), refreshWaitersBatch))
	for batch := range slices.Chunk(waiters, refreshWaitersBatch) {
		args = append(args[:0], durationMS(ttl), s.channel, name)
		for _, w := range batch {
			args = append(args, w)
		}
		cmd, _ := s.runAside(ctx, time.Time{}, false, refreshWaitersScript, keys, args...)
		v, err := cmd.Result()
		if err != nil {
			return s.wrapErr(ctx, "refresh waiters", err)
		}
		if _, err := decodeRefresh(v); err != nil {
			return err
		}
	}
	return nil
}

// refreshWaitersBatch is how many waiters one script call of
// RefreshWaiters refreshes. A line's refresh is the one call whose work
// grows with a queue (a ZADD of every parked waiter, about half a
// millisecond of Redis per thousand), and Redis runs a script alone: so
// the batches of a long line go one after another, each on a connection of
// its own, and neither Redis nor this coordinator's pipeline, where a
// handoff may be waiting, is held up for longer than one batch.
const refreshWaitersBatch = 250
