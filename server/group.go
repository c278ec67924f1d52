package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/principal"
	"github.com/coordinator-dev/coordinator/server/store"
)

// Groups: AcquireGroup, RenewGroup and ReleaseGroup. A group is granted
// by the store all at once or not at all (store.Leases.AcquireGroup); this
// file validates the calls, maps their answers, and waits for a group
// (groupwait.go) in the line of every member.

// AcquireGroup implements coordinatorv1.CoordinatorServer.
func (s *Service) AcquireGroup(ctx context.Context, req *coordinatorv1.AcquireGroupRequest) (*coordinatorv1.AcquireGroupResponse, error) {
	var v validator
	members := v.members("members", req.GetMembers())
	v.holder("holder", req.GetHolder())
	ttl := v.ttl("ttl", req.GetTtl(), s.maxTTL)
	wait := v.wait("wait", req.GetWait())
	v.sessionID("session_id", req.GetSessionId(), true)
	if err := v.Err(); err != nil {
		return nil, err
	}
	greq := store.GroupRequest{
		Members: members, Holder: req.GetHolder(), TTL: ttl, MaxHolders: s.maxHolders,
		Session: req.GetSessionId(), SessionOwner: principal.Of(ctx),
		// The acquisition's own: what it gives back when it gives up is
		// only what no retry of the holder renewed since.
		Claim: newWaiterID(),
	}
	res, err := s.acquireGroup(ctx, greq, wait)
	if err != nil {
		return nil, err
	}
	if !res.Acquired {
		return refusedGroup(greq, res), nil
	}
	return &coordinatorv1.AcquireGroupResponse{Acquired: true, Leases: leasesToProto(res.Leases)}, nil
}

// refusedGroup names the first member in the way, preferring one with a
// holder to name.
func refusedGroup(req store.GroupRequest, res store.GroupResult) *coordinatorv1.AcquireGroupResponse {
	blocked := -1
	for i, m := range res.Members {
		if m.Acquired {
			continue
		}
		if blocked < 0 || res.Members[blocked].Lease.Holder == "" && m.Lease.Holder != "" {
			blocked = i
		}
	}
	if blocked < 0 { // a store answers at least one member in the way
		return &coordinatorv1.AcquireGroupResponse{}
	}
	m := res.Members[blocked]
	return &coordinatorv1.AcquireGroupResponse{BlockedName: req.Members[blocked].Name, Holder: m.Lease.Holder, RetryAfter: retryAfter(m)}
}

// acquireGroup asks the store for the group and, given a wait, waits for it
// in the line of every member until granted, the wait or the RPC deadline
// runs out, or the caller leaves. Without a wait, members a store held
// while refusing the others (GroupResult.Held) are given back at once.
func (s *Service) acquireGroup(ctx context.Context, req store.GroupRequest, wait time.Duration) (store.GroupResult, error) {
	if wait == 0 {
		res, err := s.store.AcquireGroup(ctx, req)
		if err == nil && !res.Acquired {
			s.metrics.contended.Inc()
		}
		if !res.Acquired && len(res.Held) > 0 {
			s.releaseHeld(ctx, req.Holder, req.Claim, res.Held)
		}
		return s.countGroup(req, res, err)
	}
	return s.newWaitingGroup(ctx, req, wait).run(ctx)
}

// countGroup counts the outcome of a group acquisition as countAcquire
// does a single one's, each lease granted as a grant.
func (s *Service) countGroup(req store.GroupRequest, res store.GroupResult, err error) (store.GroupResult, error) {
	if err != nil {
		_, err = s.countAcquire(store.AcquireRequest{Name: req.Members[0].Name, Session: req.Session}, store.AcquireResult{}, err)
		return store.GroupResult{}, err
	}
	if !res.Acquired {
		s.metrics.notAcquired.Inc()
		return res, nil
	}
	s.metrics.acquired.Inc()
	for _, l := range res.Leases {
		s.metrics.held.granted(l.Name, l.Token, l.TTL)
	}
	return res, nil
}

// releaseHeld gives back the members a store held for a group that is not
// granted, as long as they still carry its claim: a retry of the holder
// (which may have begun before this call saw its caller leave) that renewed
// them since keeps them. The caller may have left already: only ctx's
// values are kept. Best-effort: what is not released expires after its
// TTL.
func (s *Service) releaseHeld(parent context.Context, holder, claim string, held []store.Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), 2*time.Second)
	defer cancel()
	leases := groupLeases(held)
	for i := range leases {
		leases[i].Claim = claim
	}
	if _, err := s.releaseGroup(ctx, holder, leases); err != nil {
		s.log.Warn("could not give back the members held for a group that was not granted; they expire after their TTL",
			"name", held[0].Name, "members", len(held), "err", err)
	}
}

func groupLeases(ls []store.Lease) []store.GroupLease {
	out := make([]store.GroupLease, len(ls))
	for i, l := range ls {
		out[i] = store.GroupLease{Name: l.Name, Token: l.Token}
	}
	return out
}

// RenewGroup implements coordinatorv1.CoordinatorServer: each lease is
// renewed as Renew renews it, all at once; the first failure, in the
// request's order, is the answer.
func (s *Service) RenewGroup(ctx context.Context, req *coordinatorv1.RenewGroupRequest) (*coordinatorv1.RenewGroupResponse, error) {
	var v validator
	v.holder("holder", req.GetHolder())
	leases := v.groupLeases("leases", req.GetLeases())
	ttl := v.ttl("ttl", req.GetTtl(), s.maxTTL)
	if err := v.Err(); err != nil {
		return nil, err
	}
	renewed := make([]store.Lease, len(leases))
	errs := make([]error, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Go(func() { renewed[i], errs[i] = s.renew(ctx, l.Name, req.GetHolder(), l.Token, ttl) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return &coordinatorv1.RenewGroupResponse{Leases: leasesToProto(renewed)}, nil
}

// ReleaseGroup implements coordinatorv1.CoordinatorServer.
func (s *Service) ReleaseGroup(ctx context.Context, req *coordinatorv1.ReleaseGroupRequest) (*coordinatorv1.ReleaseGroupResponse, error) {
	var v validator
	v.holder("holder", req.GetHolder())
	leases := v.groupLeases("leases", req.GetLeases())
	if err := v.Err(); err != nil {
		return nil, err
	}
	released, err := s.releaseGroup(ctx, req.GetHolder(), leases)
	if err != nil {
		return nil, err
	}
	return &coordinatorv1.ReleaseGroupResponse{Released: released}, nil
}

// releaseGroup releases holder's leases, telling the lines of their names,
// and reports whether any was released.
func (s *Service) releaseGroup(ctx context.Context, holder string, leases []store.GroupLease) (bool, error) {
	released, err := s.store.ReleaseGroup(ctx, holder, leases)
	if err != nil {
		return false, storeError(err)
	}
	anyReleased := false
	for i, l := range leases {
		if i < len(released) && released[i] {
			anyReleased = true
			s.lines.released(l.Name, l.Token)
		}
		s.metrics.held.released(l.Name, l.Token)
	}
	return anyReleased, nil
}

// members checks a group's members: 1 to store.MaxGroupMembers, each a
// valid name and share, no name twice. It returns them as the store takes
// them.
func (v *validator) members(field string, ms []*coordinatorv1.GroupMember) []store.GroupMember {
	if !v.count(field, len(ms), store.MaxGroupMembers) {
		return nil
	}
	out := make([]store.GroupMember, len(ms))
	seen := make(map[string]int, len(ms))
	for i, m := range ms {
		// Checked under the member's own field names, which are spelled
		// out only for a failure: a contended group is checked at every
		// attempt.
		var member validator
		member.name("name", m.GetName())
		capacity, weight := member.share(m.GetCapacity(), m.GetWeight())
		if member.err != nil && v.err == nil {
			v.err = &fieldError{field: fmt.Sprintf("%s[%d].%s", field, i, member.err.field), reason: member.err.reason}
		}
		if j, dup := seen[m.GetName()]; dup && v.err == nil {
			v.fail(field, "lists the name %q twice (members %d and %d): a group holds each name once", m.GetName(), j, i)
		}
		seen[m.GetName()] = i
		out[i] = store.GroupMember{Name: m.GetName(), Capacity: capacity, Weight: weight}
	}
	return out
}

// groupLeases checks the leases of a RenewGroup or ReleaseGroup: 1 to
// store.MaxGroupMembers, each a valid name and token.
func (v *validator) groupLeases(field string, ls []*coordinatorv1.GroupLease) []store.GroupLease {
	if !v.count(field, len(ls), store.MaxGroupMembers) {
		return nil
	}
	out := make([]store.GroupLease, len(ls))
	for i, l := range ls {
		var lease validator
		lease.name("name", l.GetName())
		lease.token("token", l.GetToken())
		if lease.err != nil && v.err == nil {
			v.err = &fieldError{field: fmt.Sprintf("%s[%d].%s", field, i, lease.err.field), reason: lease.err.reason}
		}
		out[i] = store.GroupLease{Name: l.GetName(), Token: l.GetToken()}
	}
	return out
}

// count checks the length of a repeated field that must have 1 to most
// entries.
func (v *validator) count(field string, n, most int) bool {
	switch {
	case n == 0:
		v.fail(field, "is required")
	case n > most:
		v.fail(field, "has %d entries; at most %d are allowed", n, most)
	default:
		return true
	}
	return false
}
