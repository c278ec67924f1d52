package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
)

// Group acquisitions (doc.go, "Groups"): one acquire_group.lua call per
// slot the members lie in, the slots in ascending order; release_group.lua
// releases a group's leases, one call a slot.

// AcquireGroup implements store.Leases.
//
// The members of one slot (every member, but on a Cluster) are taken in
// one script call, all or none. On a Cluster whose members lie in several
// slots, the slots are taken one after the other in ascending slot order,
// each granted whole before the next is asked for; the first slot that
// refuses ends the call, answering the leases of the earlier slots in
// GroupResult.Held, and, for a group that waits, taking its waiter out of
// the queues of the later slots' members, so that it waits in one slot's
// queues only. A slot that fails the call (an error) gives back what the
// earlier slots granted anew in this call; Held then reports the rest
// (parts renewed, or not given back).
func (s *Store) AcquireGroup(ctx context.Context, req store.GroupRequest) (store.GroupResult, error) {
	if err := store.CheckGroup(req); err != nil {
		return store.GroupResult{}, fmt.Errorf("redisstore: %w", err)
	}
	names := make([]string, len(req.Members))
	for i, m := range req.Members {
		names[i] = m.Name
	}
	parts := s.slotParts(names)
	g := groupCall{s: s, req: req, proofs: proofSet{}, attached: map[string]proof{}}
	start := time.Now()
	leases := make([]store.Lease, len(req.Members))
	var held []store.Lease
	var fresh []bool // of held
	for k, part := range parts {
		reply, err := g.acquirePart(ctx, part)
		if err != nil {
			return store.GroupResult{Held: s.giveBack(ctx, req.Holder, held, fresh)}, err
		}
		if !reply.acquired {
			res := store.GroupResult{Members: make([]store.AcquireResult, len(req.Members)), Held: held}
			for i := range res.Members {
				// Held, or in a slot not asked for: not known to be in
				// the way.
				res.Members[i].Acquired = true
			}
			for j, i := range part {
				res.Members[i] = reply.members[j]
			}
			if len(parts) > 1 {
				res.Queued = make([]bool, len(req.Members))
				for _, i := range part {
					res.Queued[i] = req.Waiter != ""
				}
			}
			if req.Waiter != "" && k+1 < len(parts) {
				if err := s.leaveParts(ctx, req.Waiter, names, parts[k+1:]); err != nil {
					return store.GroupResult{Held: held}, err
				}
			}
			return res, nil
		}
		for j, i := range part {
			leases[i] = reply.leases[j]
		}
		held = append(held, reply.leases...)
		fresh = append(fresh, reply.fresh...)
	}
	if len(parts) > 1 && req.Session == "" && time.Since(start) >= req.TTL {
		// The first slot's grants, made after start, may have run out.
		return store.GroupResult{Held: s.giveBack(ctx, req.Holder, held, fresh)}, fmt.Errorf("redisstore: acquire group: %w: taking %d slots took %s, more than the ttl %s",
			store.ErrUnavailable, len(parts), time.Since(start).Round(time.Millisecond), req.TTL)
	}
	return store.GroupResult{Acquired: true, Leases: leases}, nil
}

// giveBack releases those of held that were fresh (granted anew by this
// call) and returns those left held: the others, and any not released.
func (s *Store) giveBack(ctx context.Context, holder string, held []store.Lease, fresh []bool) []store.Lease {
	var mine []store.GroupLease
	for i, l := range held {
		if fresh[i] {
			mine = append(mine, store.GroupLease{Name: l.Name, Token: l.Token, Claim: string(l.Value)})
		}
	}
	if len(mine) == 0 {
		return held
	}
	// The caller may have left: the grants go back anyway.
	released, err := s.ReleaseGroup(context.WithoutCancel(ctx), holder, mine)
	if err != nil {
		s.log.Warn("a group's members taken before an error were not all given back; they expire after their TTL",
			"name", held[0].Name, "error", err)
	}
	var left []store.Lease
	k := 0
	for i, l := range held {
		if fresh[i] {
			gone := k < len(released) && released[k]
			k++
			if gone {
				continue
			}
		}
		left = append(left, l)
	}
	return left
}

// slotParts divides names into the parts one script call takes: the
// indices of the names of each Cluster slot, the slots in ascending order,
// or, without a Cluster, every index in one part.
func (s *Store) slotParts(names []string) [][]int {
	if !s.cluster {
		all := make([]int, len(names))
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	bySlot := map[uint16][]int{}
	for i, n := range names {
		slot := slotOf(encodeName(n))
		bySlot[slot] = append(bySlot[slot], i)
	}
	slots := make([]uint16, 0, len(bySlot))
	for slot := range bySlot {
		slots = append(slots, slot)
	}
	slices.Sort(slots)
	parts := make([][]int, len(slots))
	for k, slot := range slots {
		parts[k] = bySlot[slot]
	}
	return parts
}

// leaveParts takes waiter out of the queues of the names of parts (one
// dequeue a name, concurrent: they share the pipeline). A group refused in
// one slot waits there alone: queued in a later slot too (by an attempt
// that got further), it would hold up that slot's waiters while it waits
// for an earlier one, which they may hold.
func (s *Store) leaveParts(ctx context.Context, waiter string, names []string, parts [][]int) error {
	var all []int
	for _, part := range parts {
		all = append(all, part...)
	}
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for k, i := range all {
		wg.Go(func() { errs[k] = s.Dequeue(ctx, names[i], waiter) })
	}
	wg.Wait()
	if err := cmp.Or(errs...); err != nil {
		return fmt.Errorf("redisstore: acquire group: leave the queues of later slots: %w", err)
	}
	return nil
}

// groupCall is one AcquireGroup: the proofs of sessions it gathered, and
// the proofs of its own session that attached each member's name.
type groupCall struct {
	s        *Store
	req      store.GroupRequest
	proofs   proofSet
	attached map[string]proof
}

// acquirePart takes the members part (indices into the request's members,
// of one slot) in one acquire_group.lua call, attaching them to the
// request's session first, and answers them in part's order.
func (g *groupCall) acquirePart(ctx context.Context, part []int) (groupReply, error) {
	s, req := g.s, g.req
	names := make([]string, len(part))
	for j, i := range part {
		names[j] = req.Members[i].Name
	}
	keys := s.groupKeys(names)
	if req.Session != "" {
		if err := g.attach(ctx, names, false); err != nil {
			return groupReply{}, err
		}
	}
	var (
		reply      groupReply
		replicated func() error
	)
	attempt := func(proofs string) ([]string, error) {
		args := groupArgs{holder: req.Holder, ttlMS: durationMS(req.TTL), maxHolders: req.Request(0).MaxHoldersOrDefault(),
			proofs: proofs, waiter: req.Waiter, session: req.Session, waiterTTL: durationMS(store.DefaultWaiterTTL), claim: req.Claim}
		if req.WaiterTTL > 0 {
			args.waiterTTL = durationMS(req.WaiterTTL)
		}
		ttl := req.TTL
		if req.Session != "" {
			own, p, ok := g.freshest(names, time.Now())
			if !ok {
				// Spent while other proofs were fetched: ask again.
				if err := g.attach(ctx, names[:1], true); err != nil {
					return nil, err
				}
				own, p, _ = g.freshest(names, time.Now())
			}
			args.ttlMS, args.sessionTTL, ttl = own, p.ttl.Milliseconds(), p.ttl
		}
		asked := make([]store.Lease, len(part))
		for j, i := range part {
			m := req.Members[i]
			args.members = append(args.members, groupMemberArgs{capacity: max(m.Capacity, 1), weight: max(m.Weight, 1),
				name: m.Name, attachedAt: g.attached[m.Name].attachedAt})
			asked[j] = store.Lease{Name: m.Name, Holder: req.Holder, TTL: ttl, Session: req.Session, Value: []byte(req.Claim)}
		}
		v, rep, err := s.callWait(ctx, "acquire group", true, s.scripts.acquireGroup, keys, args.argv()...)
		if err != nil {
			return nil, err
		}
		if reply, err = decodeAcquireGroup(asked, v); err != nil {
			return nil, err
		}
		if reply.lost {
			s.dataLost()
		}
		replicated = rep
		return reply.need, nil
	}
	// As in Acquire: a name that refuses the attach (detached from the
	// session since) is attached again.
	for round := 1; ; round++ {
		if err := s.withProofs(ctx, g.proofs, req.Session, attempt); err != nil {
			return groupReply{}, err
		}
		if !reply.detached {
			break
		}
		name := names[reply.member]
		s.attachments.detached(req.Session, name)
		if round == maxProofRounds {
			return groupReply{}, fmt.Errorf("redisstore: acquire group: %q: %w: the name kept detaching its session (%d attaches)",
				name, store.ErrUnavailable, round)
		}
		if err := g.attach(ctx, []string{name}, true); err != nil {
			return groupReply{}, err
		}
	}
	switch {
	case reply.quarantined:
		return groupReply{}, &store.QuarantineError{RetryAfter: reply.retryAfter}
	case reply.capacity != 0:
		m := req.Members[part[reply.member]]
		return groupReply{}, &store.CapacityError{Name: m.Name, Have: reply.capacity, Asked: max(m.Capacity, 1)}
	case reply.holderLimit != 0:
		return groupReply{}, &store.HolderLimitError{Name: names[reply.member], Limit: reply.holderLimit}
	}
	if reply.acquired {
		if err := replicated(); err != nil {
			return groupReply{}, err
		}
	}
	return reply, nil
}

// groupKeys are acquire_group.lua's KEYS for names of one slot.
func (s *Store) groupKeys(names []string) []string {
	keys := make([]string, 0, 3*len(names)+1)
	for _, n := range names {
		k := s.keys(n)
		keys = append(keys, k.lease, k.queue, k.waiters)
	}
	return append(keys, s.keys(names[0]).marker)
}

// attach gets a proof of the request's session for each of names that has
// none yet (every one with again), attaching the name to the session
// (session.lua, one call a name, concurrent: they share the pipeline)
// unless this store's attachments let it skip that, as Acquire does.
func (g *groupCall) attach(ctx context.Context, names []string, again bool) error {
	req := g.req
	now := time.Now()
	var missing []string
	for _, n := range names {
		if _, ok := g.attached[n]; ok && !again {
			continue
		}
		if p, ok := g.s.attachments.proof(req.Session, req.SessionOwner, n, now); ok && !again {
			g.attached[n] = p
			continue
		}
		missing = append(missing, n)
	}
	got := make([]proofSet, len(missing))
	errs := make([]error, len(missing))
	var wg sync.WaitGroup
	for k, n := range missing {
		got[k] = proofSet{}
		wg.Go(func() {
			errs[k] = g.s.proveOwn(ctx, got[k], store.AcquireRequest{Name: n, Session: req.Session, SessionOwner: req.SessionOwner})
		})
	}
	wg.Wait()
	// One member's error says it for all: they share the session.
	if err := cmp.Or(errs...); err != nil {
		return err
	}
	for k, n := range missing {
		g.attached[n] = got[k][req.Session]
	}
	return nil
}

// freshest is the most that is left at now (ms, at least 1) of the
// proofs of life that attached names, and that proof; false when every
// one ran out.
func (g *groupCall) freshest(names []string, now time.Time) (int64, proof, bool) {
	var best int64
	var bestProof proof
	for _, n := range names {
		if p := g.attached[n]; p.kind == 'a' {
			if left := (p.n - now.Sub(p.got)).Milliseconds(); left > best {
				best, bestProof = left, p
			}
		}
	}
	return best, bestProof, best >= 1
}

// groupArgs are acquire_group.lua's ARGV, by name: argv lays them out in
// the order of the script's header, which TestGroupArgsFollowTheScript
// holds.
type groupArgs struct {
	holder     string
	ttlMS      int64
	maxHolders int
	session    string
	sessionTTL int64
	proofs     string
	waiter     string
	waiterTTL  int64
	claim      string
	members    []groupMemberArgs
}

// groupMemberArgs are a member's arguments; attachedAt is sent only with
// a session.
type groupMemberArgs struct {
	capacity, weight int64
	name             string
	attachedAt       int64
}

func (a groupArgs) argv() []any {
	stride := 3
	if a.session != "" {
		stride = 4
	}
	v := make([]any, 0, 9+stride*len(a.members))
	sessionTTL, waiterTTL := any(""), any("")
	if a.session != "" {
		sessionTTL = a.sessionTTL
	}
	if a.waiter != "" {
		waiterTTL = a.waiterTTL
	}
	v = append(v, a.holder, a.ttlMS, a.maxHolders, a.session, sessionTTL, a.proofs, a.waiter, waiterTTL, a.claim)
	for _, m := range a.members {
		v = append(v, m.capacity, m.weight, m.name)
		if a.session != "" {
			v = append(v, m.attachedAt)
		}
	}
	return v
}

// ReleaseGroup implements store.Leases: one release_group.lua call per
// slot the leases' names lie in (one call but on a Cluster), the calls
// concurrent. On an error, released holds what the calls that answered
// released.
func (s *Store) ReleaseGroup(ctx context.Context, holder string, leases []store.GroupLease) ([]bool, error) {
	released := make([]bool, len(leases))
	if len(leases) == 0 {
		return released, nil
	}
	names := make([]string, len(leases))
	for i, l := range leases {
		names[i] = l.Name
	}
	parts := s.slotParts(names)
	errs := make([]error, len(parts))
	release := func(k int) {
		part := parts[k]
		mine := make([]store.GroupLease, len(part))
		for j, i := range part {
			mine[j] = leases[i]
		}
		keys, args := s.releaseGroupArgs(holder, mine)
		v, err := s.call(ctx, "release group", s.scripts.releaseGroup, keys, args...)
		if err != nil {
			errs[k] = err
			return
		}
		ok, sessions, err := decodeReleaseGroup(len(part), v)
		if err != nil {
			errs[k] = err
			return
		}
		now := time.Now()
		for j, i := range part {
			released[i] = ok[j]
			if sessions[j] != "" {
				s.detacher.released(sessions[j], names[i], now)
			}
		}
	}
	if len(parts) == 1 {
		release(0)
	} else {
		var wg sync.WaitGroup
		for k := range parts {
			wg.Go(func() { release(k) })
		}
		wg.Wait()
	}
	return released, errors.Join(errs...)
}

// releaseGroupArgs are release_group.lua's KEYS and ARGV for holder's
// leases, of names of one slot.
func (s *Store) releaseGroupArgs(holder string, leases []store.GroupLease) ([]string, []any) {
	keys := make([]string, len(leases))
	args := make([]any, 0, 1+3*len(leases))
	args = append(args, holder)
	for i, l := range leases {
		keys[i] = s.keys(l.Name).lease
		args = append(args, strconv.FormatUint(l.Token, 10), l.Name, l.Claim)
	}
	return keys, args
}
