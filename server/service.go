package server

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/principal"
	"github.com/coordinator-dev/coordinator/server/store"
)

const defaultPageSize = 100

// Service implements coordinatorv1.CoordinatorServer over a store.Store.
type Service struct {
	coordinatorv1.UnimplementedCoordinatorServer

	store      store.Store
	maxTTL     time.Duration
	maxHolders int
	// refuseHolders makes the error of a grant refused at the holder cap.
	refuseHolders func(limit int, name string) error
	metrics       *Metrics
	log           *slog.Logger

	observers *observers
	lines     *waitLines
	stopping  chan struct{}
	stopOnce  sync.Once
}

// ServiceOptions configures a Service. A zero field takes the default its
// comment gives, so the zero ServiceOptions is a working configuration.
type ServiceOptions struct {
	// MaxTTL is the longest lease a client may ask for (default
	// DefaultMaxTTL).
	MaxTTL time.Duration
	// Reconcile is how often, on average, observers re-read an election
	// even without a notification (default DefaultReconcile). Changes are
	// announced, and announcements that may have been missed are too, so this
	// is only a safety net: it bounds how long a change the store never
	// announced (it lost the mark asking for announcements, with its data)
	// can leave observers of a vacant election stale. Each observed election
	// costs the store about one read per interval.
	Reconcile time.Duration
	// MaxHoldersPerName caps the grants one name carries at once (lock
	// delays included); 0 means no cap but the capacity.
	MaxHoldersPerName int
	// RefuseHolders, when set, makes the error of a grant refused at that
	// cap (the middleware's, which counts it with the other caps); without,
	// it is a plain ResourceExhausted.
	RefuseHolders func(limit int, name string) error
	// Metrics receives the lease metrics (default: kept, not exported).
	Metrics *Metrics
	// Log receives the service's own log lines (default: discarded).
	Log *slog.Logger
}

// Defaults of ServiceOptions.
const (
	DefaultMaxTTL = 5 * time.Minute
	// DefaultReconcile keeps 5,000 idle observed elections near 50 Redis
	// commands per second (a read is one HMGET, batched).
	DefaultReconcile = 2 * time.Minute
)

// NewService serves st. Call Stop before closing the store.
func NewService(st store.Store, opts ServiceOptions) *Service {
	if opts.MaxTTL <= 0 {
		opts.MaxTTL = DefaultMaxTTL
	}
	if opts.Reconcile <= 0 {
		opts.Reconcile = DefaultReconcile
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	maxHolders := opts.MaxHoldersPerName
	if maxHolders <= 0 {
		maxHolders = store.MaxCapacity // no cap: each grant weighs at least 1
	}
	refuseHolders := opts.RefuseHolders
	if refuseHolders == nil {
		refuseHolders = func(limit int, name string) error {
			return status.Errorf(codes.ResourceExhausted, "too many holders of %q: the limit is %d", name, limit)
		}
	}
	return &Service{
		store:         st,
		maxTTL:        opts.MaxTTL,
		maxHolders:    maxHolders,
		refuseHolders: refuseHolders,
		metrics:       opts.Metrics,
		log:           opts.Log,
		observers:     newObservers(st, opts.Reconcile, opts.Log),
		lines:         newWaitLines(st, opts.Log),
		stopping:      make(chan struct{}),
	}
}

// Stop ends waiting calls and streams with Unavailable so that a graceful
// shutdown need not wait for them. Calling it again does nothing.
func (s *Service) Stop() {
	s.stopOnce.Do(func() { close(s.stopping) })
}

var errStopping = status.Error(codes.Unavailable, "coordinator is shutting down")

// TryAcquire implements coordinatorv1.CoordinatorServer.
func (s *Service) TryAcquire(ctx context.Context, req *coordinatorv1.TryAcquireRequest) (*coordinatorv1.TryAcquireResponse, error) {
	var v validator
	v.name("name", req.GetName())
	v.holder("holder", req.GetHolder())
	ttl := v.ttl("ttl", req.GetTtl(), s.maxTTL)
	wait := v.wait("wait", req.GetWait())
	capacity, weight := v.share(req.GetCapacity(), req.GetWeight())
	v.sessionID("session_id", req.GetSessionId(), true)
	if err := v.Err(); err != nil {
		return nil, err
	}
	// KeepValue: a lock call by an election's leader on its own name renews
	// the lease and must not erase the leader's proclaimed value.
	res, err := s.acquire(ctx, store.AcquireRequest{
		Name: req.GetName(), Holder: req.GetHolder(), TTL: ttl, KeepValue: true,
		Capacity: capacity, Weight: weight, MaxHolders: s.maxHolders,
		Session: req.GetSessionId(), SessionOwner: principal.Of(ctx),
	}, wait)
	if err != nil {
		return nil, err
	}
	if !res.Acquired {
		return &coordinatorv1.TryAcquireResponse{Holder: res.Lease.Holder, RetryAfter: retryAfter(res)}, nil
	}
	return &coordinatorv1.TryAcquireResponse{Acquired: true, Lease: leaseToProto(res.Lease)}, nil
}

// retryAfter is how long a refused caller should wait before asking again:
// until the holder's lease or the lock delay ends. It is unset when the
// name waits on queued callers instead, whose turn no clock tells.
func retryAfter(res store.AcquireResult) *durationpb.Duration {
	if res.Acquired || res.RetryAt.IsZero() {
		return nil
	}
	return durationpb.New(max(time.Until(res.RetryAt), 0))
}

// Renew implements coordinatorv1.CoordinatorServer.
func (s *Service) Renew(ctx context.Context, req *coordinatorv1.RenewRequest) (*coordinatorv1.RenewResponse, error) {
	ttl, err := s.validateRenew(req.GetName(), req.GetHolder(), req.GetToken(), req.GetTtl())
	if err != nil {
		return nil, err
	}
	lease, err := s.renew(ctx, req.GetName(), req.GetHolder(), req.GetToken(), ttl)
	if err != nil {
		return nil, err
	}
	return &coordinatorv1.RenewResponse{Lease: leaseToProto(lease)}, nil
}

// validateRenew checks the fields of a renewal (Renew, or a renew
// operation of a stream), and returns its ttl.
func (s *Service) validateRenew(name, holder string, token uint64, ttl *durationpb.Duration) (time.Duration, error) {
	var v validator
	v.name("name", name)
	v.holder("holder", holder)
	v.token("token", token)
	d := v.ttl("ttl", ttl, s.maxTTL)
	return d, v.Err()
}

func (s *Service) renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (store.Lease, error) {
	lease, err := s.store.Renew(ctx, name, holder, token, ttl)
	switch {
	case errors.Is(err, store.ErrLeaseNotHeld):
		s.metrics.renewNotHeld.Inc()
		s.metrics.held.released(name, token)
		return lease, errLeaseNotHeld(name)
	case errors.Is(err, store.ErrLeaseInSession):
		s.metrics.renewNotHeld.Inc()
		return lease, errLeaseInSession(name)
	case err != nil:
		s.metrics.renewErrors.Inc()
		return lease, storeError(err)
	}
	s.metrics.held.granted(name, token, ttl)
	return lease, nil
}

// Release implements coordinatorv1.CoordinatorServer.
func (s *Service) Release(ctx context.Context, req *coordinatorv1.ReleaseRequest) (*coordinatorv1.ReleaseResponse, error) {
	var v validator
	v.name("name", req.GetName())
	v.holder("holder", req.GetHolder())
	v.token("token", req.GetToken())
	if err := v.Err(); err != nil {
		return nil, err
	}
	released, err := s.release(ctx, req.GetName(), req.GetHolder(), req.GetToken())
	if err != nil {
		return nil, err
	}
	return &coordinatorv1.ReleaseResponse{Released: released}, nil
}

func (s *Service) release(ctx context.Context, name, holder string, token uint64) (bool, error) {
	released, err := s.store.Release(ctx, name, holder, token)
	if err != nil {
		return false, storeError(err)
	}
	if released {
		s.lines.released(name, token)
	}
	s.metrics.held.released(name, token)
	return released, nil
}

// Describe implements coordinatorv1.CoordinatorServer.
func (s *Service) Describe(ctx context.Context, req *coordinatorv1.DescribeRequest) (*coordinatorv1.DescribeResponse, error) {
	var v validator
	v.name("name", req.GetName())
	if err := v.Err(); err != nil {
		return nil, err
	}
	d, err := s.store.Describe(ctx, req.GetName())
	if err != nil {
		return nil, storeError(err)
	}
	resp := &coordinatorv1.DescribeResponse{Held: d.Held, LastToken: d.LastToken, Waiters: uint32(d.Waiters),
		Capacity: uint32(max(d.Capacity, 1)), WaitingWeight: uint64(d.WaitingWeight), Holders: leasesToProto(d.Holders)}
	if d.Held {
		resp.Lease = leaseToProto(d.Lease)
	}
	return resp, nil
}

// List implements coordinatorv1.CoordinatorServer.
func (s *Service) List(ctx context.Context, req *coordinatorv1.ListRequest) (*coordinatorv1.ListResponse, error) {
	var v validator
	v.prefix("prefix", req.GetPrefix())
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		v.fail("page_size", "is negative")
	case size == 0:
		size = defaultPageSize
	case size > MaxPageSize:
		size = MaxPageSize
	}
	cursor, err := base64.RawURLEncoding.DecodeString(req.GetPageToken())
	if err != nil {
		v.fail("page_token", "is not a token from a previous ListResponse")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	page, err := s.store.List(ctx, req.GetPrefix(), string(cursor), size)
	if err != nil {
		return nil, storeError(err)
	}
	resp := &coordinatorv1.ListResponse{NextPageToken: base64.RawURLEncoding.EncodeToString([]byte(page.Next))}
	for _, l := range page.Leases {
		resp.Leases = append(resp.Leases, leaseToProto(l))
	}
	return resp, nil
}

func leaseToProto(l store.Lease) *coordinatorv1.Lease {
	return &coordinatorv1.Lease{
		Name:      l.Name,
		Holder:    l.Holder,
		Token:     l.Token,
		Ttl:       durationpb.New(l.TTL),
		ExpiresAt: timestamppb.New(l.ExpiresAt),
		Value:     l.Value,
		Weight:    uint32(max(l.Weight, 1)),
		SessionId: l.Session,
	}
}

func leasesToProto(ls []store.Lease) []*coordinatorv1.Lease {
	if len(ls) == 0 {
		return nil
	}
	out := make([]*coordinatorv1.Lease, len(ls))
	for i, l := range ls {
		out[i] = leaseToProto(l)
	}
	return out
}
