package client

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// The lease calls, each an operation of the Client's operation stream
// (stream.go), with the answer and the error of its unary call. A name
// that is not UTF-8 cannot be encoded (and would break the message it went
// in for every operation in it): it is refused here.

// viaStream runs op, an operation on names, over the stream and picks its
// response.
func viaStream[R proto.Message](ctx context.Context, c *Client, names []string, op *coordinatorv1.StreamOperation,
	pick func(*coordinatorv1.StreamResult) R, kind string, late func(*coordinatorv1.StreamResult, error),
) (resp R, err error) {
	for _, name := range names {
		if !utf8.ValidString(name) {
			return resp, status.Errorf(codes.InvalidArgument, "coordinator: the name %q is not valid UTF-8", name)
		}
	}
	end := c.opTracer.start(ctx, kind, op)
	defer func() { end(err) }()
	res, err := c.stream.call(ctx, op, late)
	if err != nil {
		return resp, err
	}
	if err := resultError(res); err != nil {
		return resp, err
	}
	if resp = pick(res); !resp.ProtoReflect().IsValid() {
		return resp, unexpected(res, kind)
	}
	return resp, nil
}

func (c *Client) tryAcquireCall(ctx context.Context, req *coordinatorv1.TryAcquireRequest) (*coordinatorv1.TryAcquireResponse, error) {
	op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Acquire{Acquire: req}}
	late := func(res *coordinatorv1.StreamResult, err error) {
		if lease := res.GetAcquire().GetLease(); res.GetAcquire().GetAcquired() {
			c.giveUpLate(req.GetName(), releaseOp(lease.GetName(), lease.GetHolder(), lease.GetToken()))
		} else if err != nil && outcomeUnknown(err) {
			c.abandonLate([]string{req.GetName()}, req.GetHolder())
		}
	}
	return viaStream(ctx, c, []string{req.GetName()}, op, (*coordinatorv1.StreamResult).GetAcquire, "acquire", late)
}

func (c *Client) acquireGroupCall(ctx context.Context, req *coordinatorv1.AcquireGroupRequest) (*coordinatorv1.AcquireGroupResponse, error) {
	op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_AcquireGroup{AcquireGroup: req}}
	names := make([]string, len(req.GetMembers()))
	for i, m := range req.GetMembers() {
		names[i] = m.GetName()
	}
	late := func(res *coordinatorv1.StreamResult, err error) {
		if resp := res.GetAcquireGroup(); resp.GetAcquired() {
			leases := make([]*coordinatorv1.GroupLease, len(resp.GetLeases()))
			for i, l := range resp.GetLeases() {
				leases[i] = &coordinatorv1.GroupLease{Name: l.GetName(), Token: l.GetToken()}
			}
			c.giveUpLate(strings.Join(names, " "), releaseGroupOp(req.GetHolder(), leases))
		} else if err != nil && outcomeUnknown(err) {
			c.abandonLate(names, req.GetHolder())
		}
	}
	return viaStream(ctx, c, names, op, (*coordinatorv1.StreamResult).GetAcquireGroup, "acquire_group", late)
}

func (c *Client) campaignCall(ctx context.Context, req *coordinatorv1.CampaignRequest) (*coordinatorv1.CampaignResponse, error) {
	op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Campaign{Campaign: req}}
	var late func(*coordinatorv1.StreamResult, error)
	if req.GetTerm() == 0 {
		// A campaign nobody waits for any more: resign a term it won.
		late = func(res *coordinatorv1.StreamResult, err error) {
			if leader := res.GetCampaign().GetLeader(); res.GetCampaign().GetElected() {
				c.giveUpLate(req.GetElection(), resignOp(leader.GetElection(), leader.GetCandidate(), leader.GetTerm()))
			} else if err != nil && outcomeUnknown(err) {
				c.abandonLate([]string{req.GetElection()}, req.GetCandidate())
			}
		}
	}
	return viaStream(ctx, c, []string{req.GetElection()}, op, (*coordinatorv1.StreamResult).GetCampaign, "campaign", late)
}

func (c *Client) releaseCall(ctx context.Context, req *coordinatorv1.ReleaseRequest) (*coordinatorv1.ReleaseResponse, error) {
	op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Release{Release: req}}
	return viaStream(ctx, c, []string{req.GetName()}, op, (*coordinatorv1.StreamResult).GetRelease, "release", nil)
}

func (c *Client) releaseGroupCall(ctx context.Context, req *coordinatorv1.ReleaseGroupRequest) (*coordinatorv1.ReleaseGroupResponse, error) {
	op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_ReleaseGroup{ReleaseGroup: req}}
	names := make([]string, len(req.GetLeases()))
	for i, l := range req.GetLeases() {
		names[i] = l.GetName()
	}
	return viaStream(ctx, c, names, op, (*coordinatorv1.StreamResult).GetReleaseGroup, "release_group", nil)
}

func (c *Client) resignCall(ctx context.Context, req *coordinatorv1.ResignRequest) (*coordinatorv1.ResignResponse, error) {
	op := &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Resign{Resign: req}}
	return viaStream(ctx, c, []string{req.GetElection()}, op, (*coordinatorv1.StreamResult).GetResign, "resign", nil)
}

func releaseOp(name, holder string, token uint64) *coordinatorv1.StreamOperation {
	return &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Release{Release: &coordinatorv1.ReleaseRequest{
		Name: name, Holder: holder, Token: token,
	}}}
}

func releaseGroupOp(holder string, leases []*coordinatorv1.GroupLease) *coordinatorv1.StreamOperation {
	return &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_ReleaseGroup{ReleaseGroup: &coordinatorv1.ReleaseGroupRequest{
		Holder: holder, Leases: leases,
	}}}
}

func resignOp(election, candidate string, term uint64) *coordinatorv1.StreamOperation {
	return &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Resign{Resign: &coordinatorv1.ResignRequest{
		Election: election, Candidate: candidate, Term: term,
	}}}
}

// giveUpLate releases (or resigns) a lease granted to an acquisition whose
// caller had left by then, so that the next waiter need not wait for its
// TTL. Best-effort: it goes over the stream without waiting for the answer.
func (c *Client) giveUpLate(name string, op *coordinatorv1.StreamOperation) {
	_, err := c.stream.submit(op, false, func(_ *streamOp, res *coordinatorv1.StreamResult, err error) {
		if err == nil {
			err = resultError(res)
		}
		if err != nil {
			c.log.Warn("coordinator: could not give up a lease granted after its acquisition was abandoned; it expires after its TTL",
				"name", name, "err", err)
		}
	})
	if err != nil && !errors.Is(err, ErrClosed) {
		c.log.Warn("coordinator: could not give up a lease granted after its acquisition was abandoned; it expires after its TTL",
			"name", name, "err", err)
	}
}

// abandonLate is abandon for an acquisition whose caller had left when its
// stream broke: it may have been granted.
func (c *Client) abandonLate(names []string, holder string) {
	if !c.track() {
		return
	}
	go func() {
		defer c.wg.Done()
		c.abandon(c.closing, names, holder)
	}()
}
