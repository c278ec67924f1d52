package server

import (
	"context"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/store"
)

// keepAliveInFlight bounds the renewals one KeepAlive stream runs at once, so
// that a client renewing thousands of leases gets them done in parallel
// without one stream taking every store connection.
const keepAliveInFlight = 32

// KeepAlive implements coordinatorv1.CoordinatorServer. Requests are renewed
// concurrently; each gets exactly one response naming its lease. A request
// that is invalid or whose lease is gone is answered with lost; the stream
// itself stays up for the other leases. Shutdown ends the stream at once,
// even while it waits for the client's next request.
func (s *Service) KeepAlive(stream coordinatorv1.Coordinator_KeepAliveServer) error {
	ctx := stream.Context()
	var (
		sendMu  sync.Mutex
		sendErr error
		wg      sync.WaitGroup
	)
	send := func(resp *coordinatorv1.KeepAliveResponse) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if sendErr == nil {
			sendErr = stream.Send(resp)
		}
	}
	defer wg.Wait()

	// Recv blocks, so it runs on its own goroutine and the loop below can
	// also watch for shutdown. It ends when the handler returns: gRPC then
	// cancels the stream, which fails the pending Recv.
	requests := make(chan *coordinatorv1.KeepAliveRequest)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			req, err := stream.Recv()
			if err != nil {
				return // io.EOF: the client is done sending; anything else: the stream is gone
			}
			select {
			case requests <- req:
			case <-ctx.Done():
				return
			}
		}
	}()

	slots := make(chan struct{}, keepAliveInFlight)
	for {
		var req *coordinatorv1.KeepAliveRequest
		select {
		case req = <-requests:
		case <-recvDone:
			return nil // answer what is in flight (deferred wg.Wait)
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			return errStopping
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			return errStopping
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			send(s.keepAliveOne(ctx, req))
		}()
	}
}

func (s *Service) keepAliveOne(ctx context.Context, req *coordinatorv1.KeepAliveRequest) *coordinatorv1.KeepAliveResponse {
	resp := &coordinatorv1.KeepAliveResponse{Id: req.GetId(), Name: req.GetName()}
	ttl, err := s.validateRenew(req.GetName(), req.GetHolder(), req.GetToken(), req.GetTtl())
	if err == nil {
		// A renewal that takes longer than the lease lasts helps nobody, and
		// would hold one of the stream's slots while the store hangs.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ttl)
		defer cancel()
		var lease store.Lease
		if lease, err = s.renew(ctx, req.GetName(), req.GetHolder(), req.GetToken(), ttl); err == nil {
			resp.Result = &coordinatorv1.KeepAliveResponse_Lease{Lease: leaseToProto(lease)}
			return resp
		}
	}
	st := status.Convert(err)
	reason := reasonOf(st)
	if endsLease[reason] {
		resp.Result = &coordinatorv1.KeepAliveResponse_Lost{Lost: &coordinatorv1.LeaseLost{
			Holder: req.GetHolder(), Token: req.GetToken(), Reason: reason, Message: st.Message(), Code: int32(st.Code()),
		}}
		return resp
	}
	failed := &coordinatorv1.RenewalFailed{
		Holder: req.GetHolder(), Token: req.GetToken(), Reason: reason, Message: st.Message(), Code: int32(st.Code()),
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			failed.RetryAfter = ri.GetRetryDelay()
		}
	}
	resp.Result = &coordinatorv1.KeepAliveResponse_Failed{Failed: failed}
	return resp
}
