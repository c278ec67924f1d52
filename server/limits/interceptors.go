package limits

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/streamops"
)

// UnaryServerInterceptor caps waiting calls and leases per holder, and
// follows grants, renewals and releases to count each holder's leases.
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		switch r := req.(type) {
		case *coordinatorv1.TryAcquireRequest:
			return l.acquire(ctx, req, r.GetHolder(), r.GetName(), r.GetWait(), handler, func(resp any) {
				if resp, ok := resp.(*coordinatorv1.TryAcquireResponse); ok && resp.GetAcquired() {
					lease := resp.GetLease()
					l.holders.granted(r.GetHolder(), r.GetName(), lease.GetToken(), lease.GetTtl().AsDuration(), time.Now())
				}
			})
		case *coordinatorv1.CampaignRequest:
			return l.acquire(ctx, req, r.GetCandidate(), r.GetElection(), r.GetWait(), handler, func(resp any) {
				if resp, ok := resp.(*coordinatorv1.CampaignResponse); ok && resp.GetElected() {
					l.holders.granted(r.GetCandidate(), r.GetElection(), resp.GetLeader().GetTerm(), r.GetTtl().AsDuration(), time.Now())
				}
			})
		case *coordinatorv1.AcquireGroupRequest:
			return l.acquireGroup(ctx, r, handler)
		case *coordinatorv1.ReleaseGroupRequest:
			resp, err := handler(ctx, req)
			if err == nil && l.holders.enabled() {
				for _, lease := range r.GetLeases() {
					l.holders.released(r.GetHolder(), lease.GetName(), lease.GetToken())
				}
			}
			return resp, err
		case *coordinatorv1.RenewGroupRequest:
			resp, err := handler(ctx, req)
			if renewed, ok := resp.(*coordinatorv1.RenewGroupResponse); ok && err == nil && l.holders.enabled() {
				for _, lease := range renewed.GetLeases() {
					l.holders.granted(r.GetHolder(), lease.GetName(), lease.GetToken(), lease.GetTtl().AsDuration(), time.Now())
				}
			}
			return resp, err
		case *coordinatorv1.RenewRequest:
			resp, err := handler(ctx, req)
			if l.holders.enabled() {
				if renewed, ok := resp.(*coordinatorv1.RenewResponse); ok && err == nil {
					l.holders.granted(r.GetHolder(), r.GetName(), r.GetToken(), renewed.GetLease().GetTtl().AsDuration(), time.Now())
				} else if status.Code(err) == codes.FailedPrecondition {
					l.holders.released(r.GetHolder(), r.GetName(), r.GetToken())
				}
			}
			return resp, err
		case *coordinatorv1.ReleaseRequest:
			resp, err := handler(ctx, req)
			if err == nil && l.holders.enabled() {
				l.holders.released(r.GetHolder(), r.GetName(), r.GetToken())
			}
			return resp, err
		case *coordinatorv1.ResignRequest:
			resp, err := handler(ctx, req)
			if err == nil && l.holders.enabled() {
				l.holders.released(r.GetCandidate(), r.GetElection(), r.GetTerm())
			}
			return resp, err
		}
		return handler(ctx, req)
	}
}

// acquire runs a TryAcquire or Campaign within the caps: a place among the
// waiting calls when it may wait, and one among the holder's leases.
func (l *Limiter) acquire(ctx context.Context, req any, holder, name string, wait *durationpb.Duration, handler grpc.UnaryHandler, record func(resp any)) (any, error) {
	if wait.AsDuration() > 0 {
		release, err := l.takeWait(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	if !l.holders.enabled() || holder == "" || name == "" {
		return handler(ctx, req)
	}
	reserved, ok := l.holders.reserve(holder, name, time.Now())
	if !ok {
		return nil, l.refused(LeasesPerHolder, l.cfg.LeasesPerHolder, "holder:"+holder)
	}
	if reserved {
		defer l.holders.done(holder)
	}
	resp, err := handler(ctx, req)
	if err == nil {
		record(resp)
	}
	return resp, err
}

// acquireGroup runs an AcquireGroup within the caps, as acquire runs a
// TryAcquire: one waiting place, and a place among the holder's leases for
// each member.
func (l *Limiter) acquireGroup(ctx context.Context, r *coordinatorv1.AcquireGroupRequest, handler grpc.UnaryHandler) (any, error) {
	if r.GetWait().AsDuration() > 0 {
		release, err := l.takeWait(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	holder := r.GetHolder()
	if !l.holders.enabled() || holder == "" {
		return handler(ctx, r)
	}
	now := time.Now()
	for _, m := range r.GetMembers() {
		reserved, ok := l.holders.reserve(holder, m.GetName(), now)
		if !ok {
			return nil, l.refused(LeasesPerHolder, l.cfg.LeasesPerHolder, "holder:"+holder)
		}
		if reserved {
			defer l.holders.done(holder)
		}
	}
	resp, err := handler(ctx, r)
	if granted, ok := resp.(*coordinatorv1.AcquireGroupResponse); ok && err == nil && granted.GetAcquired() {
		for _, lease := range granted.GetLeases() {
			l.holders.granted(holder, lease.GetName(), lease.GetToken(), lease.GetTtl().AsDuration(), time.Now())
		}
	}
	return resp, err
}

// StreamServerInterceptor caps open streams and runs each operation of an
// operation stream
// through UnaryServerInterceptor, as the unary call of the same name: a
// waiting acquire takes a waiting place of the stream's connection, and an
// acquire or campaign a place among its holder's leases. The caller leaves
// health checks out.
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	ops := l.UnaryServerInterceptor()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		release, err := l.takeStream(ss)
		if err != nil {
			return err
		}
		defer release()
		if info.FullMethod == coordinatorv1.Coordinator_Stream_FullMethodName {
			ss = streamops.Intercept(ss, ops)
		}
		return handler(srv, ss)
	}
}
