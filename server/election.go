package server

import (
	"bytes"
	"context"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/principal"
	"github.com/coordinator-dev/coordinator/server/store"
)

// An election is a lease on the election's name whose value is the leader's
// proclamation; the term is the lease's fencing token. Campaign is acquire
// with a value, Resign is release, Leader is describe. Renew and Release
// work on leaderships as on any lease.

// Campaign implements coordinatorv1.CoordinatorServer.
func (s *Service) Campaign(ctx context.Context, req *coordinatorv1.CampaignRequest) (*coordinatorv1.CampaignResponse, error) {
	var v validator
	v.name("election", req.GetElection())
	v.holder("candidate", req.GetCandidate())
	ttl := v.ttl("ttl", req.GetTtl(), s.maxTTL)
	wait := v.wait("wait", req.GetWait())
	v.sessionID("session_id", req.GetSessionId(), true)
	if len(req.GetValue()) > MaxValueBytes {
		v.fail("value", "is %d bytes long; at most %d are allowed", len(req.GetValue()), MaxValueBytes)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if term := req.GetTerm(); term != 0 {
		// Renewing or proclaiming in a known term: a term that ended is a
		// failure, never the start of a new one.
		res, err := s.acquire(ctx, store.AcquireRequest{
			Name: req.GetElection(), Holder: req.GetCandidate(), TTL: ttl, Value: req.GetValue(), Token: term,
			Session: req.GetSessionId(), SessionOwner: principal.Of(ctx),
		}, 0)
		if err != nil {
			return nil, err
		}
		if !res.Acquired {
			return nil, errLeaseNotHeld(req.GetElection())
		}
		return &coordinatorv1.CampaignResponse{Elected: true, Leader: leaderToProto(res.Lease)}, nil
	}
	res, err := s.acquire(ctx, store.AcquireRequest{
		Name: req.GetElection(), Holder: req.GetCandidate(), TTL: ttl, Value: req.GetValue(),
		Session: req.GetSessionId(), SessionOwner: principal.Of(ctx),
	}, wait)
	if err != nil {
		return nil, err
	}
	resp := &coordinatorv1.CampaignResponse{Elected: res.Acquired, RetryAfter: retryAfter(res)}
	if res.Lease.Holder != "" {
		resp.Leader = leaderToProto(res.Lease)
	}
	return resp, nil
}

// Resign implements coordinatorv1.CoordinatorServer.
func (s *Service) Resign(ctx context.Context, req *coordinatorv1.ResignRequest) (*coordinatorv1.ResignResponse, error) {
	var v validator
	v.name("election", req.GetElection())
	v.holder("candidate", req.GetCandidate())
	v.token("term", req.GetTerm())
	if err := v.Err(); err != nil {
		return nil, err
	}
	resigned, err := s.release(ctx, req.GetElection(), req.GetCandidate(), req.GetTerm())
	if err != nil {
		return nil, err
	}
	return &coordinatorv1.ResignResponse{Resigned: resigned}, nil
}

// Leader implements coordinatorv1.CoordinatorServer.
func (s *Service) Leader(ctx context.Context, req *coordinatorv1.LeaderRequest) (*coordinatorv1.LeaderResponse, error) {
	var v validator
	v.name("election", req.GetElection())
	if err := v.Err(); err != nil {
		return nil, err
	}
	d, err := s.store.Describe(ctx, req.GetElection())
	if err != nil {
		return nil, storeError(err)
	}
	if !d.Held {
		return &coordinatorv1.LeaderResponse{}, nil
	}
	return &coordinatorv1.LeaderResponse{HasLeader: true, Leader: leaderToProto(d.Lease)}, nil
}

func leaderToProto(l store.Lease) *coordinatorv1.Leader {
	return &coordinatorv1.Leader{
		Election:  l.Name,
		Candidate: l.Holder,
		Value:     l.Value,
		Term:      l.Token,
		ExpiresAt: timestamppb.New(l.ExpiresAt),
	}
}

// Observe implements coordinatorv1.CoordinatorServer.
func (s *Service) Observe(req *coordinatorv1.ObserveRequest, stream coordinatorv1.Coordinator_ObserveServer) error {
	var v validator
	v.name("election", req.GetElection())
	if err := v.Err(); err != nil {
		return err
	}
	events, cancel := s.observers.observe(req.GetElection())
	defer cancel()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return errObserverTooSlow
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-stream.Context().Done():
			// The caller left: report it as the code it is (Canceled or
			// DeadlineExceeded), not as an unknown failure.
			return status.FromContextError(stream.Context().Err()).Err()
		case <-s.stopping:
			return errStopping
		}
	}
}

// observedState is what observers last saw of an election, or of a name of
// capacity above 1 (a semaphore): its capacity and grants.
type observedState struct {
	held     bool
	lease    store.Lease
	capacity int64
	holders  []store.Lease
}

// shared reports whether the name is a semaphore, observed by its holders.
func (o *observedState) shared() bool { return o.capacity > 1 }

// sameHolders reports whether a and b hold the same grants with the same
// values.
func sameHolders(a, b []store.Lease) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Token != b[i].Token || a[i].Holder != b[i].Holder || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}
