package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/sessionops"
)

// Session streams. Each operation runs on a goroutine of its own through the
// unary handler of the same name (and the interceptors added for it, see
// package sessionops), so it has exactly that call's semantics, limits
// and errors; its result goes out as soon as it is ready. One sender
// goroutine writes the results: whatever is ready when it is free to send
// goes out in one SessionResponse, so that many operations in flight cost
// few messages.
//
// Limits: a message carries at most MaxSessionOperations operations; more fail the
// stream with InvalidArgument (field "operations"), as a malformed message
// does: a client that sends them is broken, and guessing which of its
// operations it meant would hide that. At most sessionInFlight operations
// without a wait run at once per stream; past that the stream stops reading
// until one is done (flow control pushes back on the client). Operations
// with a wait do not count there: the limiter's waiting-call caps (per
// connection and in total) apply to them as to the unary calls.
//
// End: when the client closes its side, the operations in flight finish
// (waits included) and their results are sent before the stream ends OK.
// When the client cancels the stream or the connection is lost, waits are
// given up at once (the waiters leave their queues) and nothing more is
// sent; leases already granted stay until released or expired. Stop ends
// the stream with Unavailable, after sending the results of what was in
// flight (waits end at once with Unavailable).

const (
	// sessionInFlight bounds the operations without a wait one stream runs
	// at once.
	sessionInFlight = 1024
	// maxSessionResults and maxSessionResponseBytes bound one
	// SessionResponse (the byte bound is soft: one result may pass it).
	maxSessionResults       = 1000
	maxSessionResponseBytes = 1 << 20
)

// Session implements coordinatorv1.CoordinatorServer.
func (s *Service) Session(stream coordinatorv1.Coordinator_SessionServer) error {
	ctx := stream.Context()
	chain := sessionops.Interceptors(ctx)
	// opsCtx ends the operations in flight early when the stream fails.
	opsCtx, cancelOps := context.WithCancel(ctx)
	defer cancelOps()

	out := newSessionSender(stream)
	go out.run()
	var ops sync.WaitGroup
	// finish waits for the operations in flight, sends their results, and
	// ends the stream with err.
	// Operations without a wait run on the stream's workers, goroutines
	// that outlive one operation: a fresh goroutine per operation would grow
	// its stack through the handler and interceptors every time (about 6%
	// of the coordinator's CPU under load). There are at most
	// sessionInFlight of them, one per slot.
	jobs := make(chan func())
	runOnWorker := func(job func()) {
		select {
		case jobs <- job: // an idle worker takes it
		default:
			go func() {
				job()
				for job := range jobs {
					job()
				}
			}()
		}
	}
	finish := func(err error) error {
		ops.Wait()
		close(jobs)
		close(out.results)
		<-out.done
		if err == nil && out.err != nil {
			return out.err
		}
		return err
	}

	// Recv blocks, so it runs on its own goroutine and the loop below can
	// also watch for shutdown. It ends when the handler returns: gRPC then
	// cancels the stream, which fails the pending Recv.
	requests := make(chan *coordinatorv1.SessionRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case requests <- req:
			case <-ctx.Done():
				return
			}
		}
	}()

	slots := make(chan struct{}, sessionInFlight)
	var waiting waitingOps
	for {
		var req *coordinatorv1.SessionRequest
		select {
		case req = <-requests:
		case err := <-recvErr:
			switch {
			case errors.Is(err, io.EOF): // the client is done sending
				return finish(nil)
			case ctx.Err() != nil:
				cancelOps()
				return finish(status.FromContextError(ctx.Err()).Err())
			}
			// The codec's InvalidArgument for a message it could not decode,
			// a message over the size limit, or the transport's failure.
			cancelOps()
			return finish(err)
		case <-ctx.Done():
			cancelOps()
			return finish(status.FromContextError(ctx.Err()).Err())
		case <-out.failed:
			cancelOps()
			return finish(nil)
		case <-s.stopping:
			return finish(errStopping)
		}
		if n := len(req.GetOperations()); n > MaxSessionOperations {
			cancelOps()
			return finish(InvalidField("operations", fmt.Sprintf("has %d operations; at most %d are allowed in one message", n, MaxSessionOperations)))
		}
		for _, op := range req.GetOperations() {
			if c, ok := op.GetOperation().(*coordinatorv1.SessionOperation_Cancel); ok {
				waiting.cancel(c.Cancel)
				continue
			}
			waits := opWaits(op)
			if !waits {
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					cancelOps()
					return finish(status.FromContextError(ctx.Err()).Err())
				case <-out.failed:
					cancelOps()
					return finish(nil)
				case <-s.stopping:
					return finish(errStopping)
				}
			}
			ops.Add(1)
			if waits {
				opCtx, cancel := context.WithCancel(opsCtx)
				forget := waiting.add(op.GetId(), cancel)
				go func() {
					defer ops.Done()
					defer forget()
					out.push(s.sessionOp(opCtx, chain, op))
				}()
				continue
			}
			runOnWorker(func() {
				defer ops.Done()
				defer func() { <-slots }()
				out.push(s.sessionOp(opsCtx, chain, op))
			})
		}
	}
}

// waitingOps are the operations of a stream that may wait, by id, so that a
// cancel operation can give one up. Ids of operations in flight should
// differ; when a client reuses one, a cancel reaches the latest.
type waitingOps struct {
	mu sync.Mutex
	m  map[uint64]*context.CancelFunc
}

// add registers the wait of operation id, ended by cancel; the returned
// function forgets it (and releases its context) when the operation is done.
func (w *waitingOps) add(id uint64, cancel context.CancelFunc) (done func()) {
	entry := &cancel
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[uint64]*context.CancelFunc{}
	}
	w.m[id] = entry
	return func() {
		cancel()
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.m[id] == entry {
			delete(w.m, id)
		}
	}
}

// cancel gives up the wait of the operation with id, if it still waits.
func (w *waitingOps) cancel(id uint64) {
	w.mu.Lock()
	entry := w.m[id]
	w.mu.Unlock()
	if entry != nil {
		(*entry)()
	}
}

// opWaits reports whether op may wait: an acquire, or a campaign for a new
// term, with a wait.
func opWaits(op *coordinatorv1.SessionOperation) bool {
	switch o := op.GetOperation().(type) {
	case *coordinatorv1.SessionOperation_Acquire:
		return o.Acquire.GetWait().AsDuration() > 0
	case *coordinatorv1.SessionOperation_Campaign:
		return o.Campaign.GetTerm() == 0 && o.Campaign.GetWait().AsDuration() > 0
	}
	return false
}

// sessionOp runs one operation and returns its result.
func (s *Service) sessionOp(ctx context.Context, chain []grpc.UnaryServerInterceptor, op *coordinatorv1.SessionOperation) (res *coordinatorv1.SessionResult) {
	res = &coordinatorv1.SessionResult{Id: op.GetId()}
	kind, method, req, handler := s.sessionCall(op)
	defer func() {
		if p := recover(); p != nil {
			s.log.ErrorContext(ctx, "panic in a session operation", "op", kind, "panic", p)
			res.Result = sessionError(status.Error(codes.Internal, "internal error"))
		}
		code := codes.OK
		if e, ok := res.GetResult().(*coordinatorv1.SessionResult_Error); ok {
			code = codes.Code(e.Error.GetCode())
		}
		s.metrics.sessionOps.WithLabelValues(kind, code.String()).Inc()
	}()
	if req == nil {
		res.Result = sessionError(InvalidField("operation", "is required: one of acquire, renew, release, campaign or resign"))
		return res
	}
	resp, err := sessionops.Run(ctx, chain, &grpc.UnaryServerInfo{Server: s, FullMethod: method}, req, handler)
	if err != nil {
		res.Result = sessionError(err)
		return res
	}
	switch r := resp.(type) {
	case *coordinatorv1.TryAcquireResponse:
		res.Result = &coordinatorv1.SessionResult_Acquire{Acquire: r}
	case *coordinatorv1.RenewResponse:
		res.Result = &coordinatorv1.SessionResult_Renew{Renew: r}
	case *coordinatorv1.ReleaseResponse:
		res.Result = &coordinatorv1.SessionResult_Release{Release: r}
	case *coordinatorv1.CampaignResponse:
		res.Result = &coordinatorv1.SessionResult_Campaign{Campaign: r}
	case *coordinatorv1.ResignResponse:
		res.Result = &coordinatorv1.SessionResult_Resign{Resign: r}
	default:
		res.Result = sessionError(status.Errorf(codes.Internal, "internal error: %s answered %T", kind, resp))
	}
	return res
}

// sessionCall returns the kind of op (its metric label), the unary method
// it stands for, its request and the handler that runs it; a nil request
// when op carries none.
func (s *Service) sessionCall(op *coordinatorv1.SessionOperation) (kind, method string, req any, handler grpc.UnaryHandler) {
	switch o := op.GetOperation().(type) {
	case *coordinatorv1.SessionOperation_Acquire:
		return "acquire", coordinatorv1.Coordinator_TryAcquire_FullMethodName, orEmpty(o.Acquire),
			func(ctx context.Context, req any) (any, error) {
				return s.TryAcquire(ctx, req.(*coordinatorv1.TryAcquireRequest))
			}
	case *coordinatorv1.SessionOperation_Renew:
		return "renew", coordinatorv1.Coordinator_Renew_FullMethodName, orEmpty(o.Renew),
			func(ctx context.Context, req any) (any, error) {
				return s.Renew(ctx, req.(*coordinatorv1.RenewRequest))
			}
	case *coordinatorv1.SessionOperation_Release:
		return "release", coordinatorv1.Coordinator_Release_FullMethodName, orEmpty(o.Release),
			func(ctx context.Context, req any) (any, error) {
				return s.Release(ctx, req.(*coordinatorv1.ReleaseRequest))
			}
	case *coordinatorv1.SessionOperation_Campaign:
		return "campaign", coordinatorv1.Coordinator_Campaign_FullMethodName, orEmpty(o.Campaign),
			func(ctx context.Context, req any) (any, error) {
				return s.Campaign(ctx, req.(*coordinatorv1.CampaignRequest))
			}
	case *coordinatorv1.SessionOperation_Resign:
		return "resign", coordinatorv1.Coordinator_Resign_FullMethodName, orEmpty(o.Resign),
			func(ctx context.Context, req any) (any, error) {
				return s.Resign(ctx, req.(*coordinatorv1.ResignRequest))
			}
	}
	return "none", "", nil, nil
}

// orEmpty stands an empty request in for a missing one, which the handler
// then refuses field by field.
func orEmpty[T any](p *T) *T {
	if p == nil {
		return new(T)
	}
	return p
}

// sessionError is the result of an operation that failed with err: its
// status, code, message and details, as the unary call returns it.
func sessionError(err error) *coordinatorv1.SessionResult_Error {
	return &coordinatorv1.SessionResult_Error{Error: status.Convert(err).Proto()}
}

// sessionSender writes a stream's results, as many as are ready in each
// message.
type sessionSender struct {
	stream  coordinatorv1.Coordinator_SessionServer
	results chan *coordinatorv1.SessionResult
	failed  chan struct{} // closed when a Send failed; err says why
	done    chan struct{} // closed when run returned
	err     error
}

func newSessionSender(stream coordinatorv1.Coordinator_SessionServer) *sessionSender {
	return &sessionSender{
		stream:  stream,
		results: make(chan *coordinatorv1.SessionResult, 256),
		failed:  make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// push hands a result to the sender. It does not block for long: the sender
// takes results until the channel is closed, even after a failed Send.
func (o *sessionSender) push(r *coordinatorv1.SessionResult) { o.results <- r }

// run sends results until results is closed.
func (o *sessionSender) run() {
	defer close(o.done)
	for r := range o.results {
		resp := &coordinatorv1.SessionResponse{Results: []*coordinatorv1.SessionResult{r}}
		size := proto.Size(r)
	drain:
		for len(resp.Results) < maxSessionResults && size < maxSessionResponseBytes {
			select {
			case r, ok := <-o.results:
				if !ok {
					break drain
				}
				resp.Results = append(resp.Results, r)
				size += proto.Size(r)
			default:
				break drain
			}
		}
		if err := o.stream.Send(resp); err != nil {
			o.err = err
			close(o.failed)
			for range o.results {
				// dropped: the stream is gone
			}
			return
		}
	}
}
