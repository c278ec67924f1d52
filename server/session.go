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
	ss := s.newSession(stream)
	defer ss.cancelOps()
	go ss.out.run()
	go ss.receive()
	return ss.end(ss.dispatch())
}

// session is one Session stream, in three parts that hand work on through
// channels: the receiver (receive) reads the requests; the dispatcher
// (dispatch, on the handler's goroutine) starts each operation, on a worker
// or, when it may wait, on a goroutine of its own; the sender (sessionSender)
// writes the results. The dispatcher alone watches for the end of the stream
// (await), and end is its one shutdown.
type session struct {
	s      *Service
	stream coordinatorv1.Coordinator_SessionServer
	ctx    context.Context
	chain  []grpc.UnaryServerInterceptor
	// opsCtx ends the operations in flight early when the stream fails.
	opsCtx    context.Context
	cancelOps context.CancelFunc

	// From the receiver to the dispatcher.
	requests chan *coordinatorv1.SessionRequest
	recvErr  chan error

	// ops counts the operations in flight. slots holds one token per
	// operation without a wait in flight (at most sessionInFlight), jobs
	// hands such operations to idle workers, and waiting is the operations
	// that may wait, for cancel operations to find.
	ops     sync.WaitGroup
	slots   chan struct{}
	jobs    chan func()
	waiting waitingOps

	out *sessionSender
}

// sessionEnd is how a stream ends: the handler's error, and whether the
// operations in flight are abandoned (their contexts cancelled: waits are
// given up at once) rather than left to finish.
type sessionEnd struct {
	err     error
	abandon bool
}

func (s *Service) newSession(stream coordinatorv1.Coordinator_SessionServer) *session {
	ctx := stream.Context()
	opsCtx, cancelOps := context.WithCancel(ctx)
	return &session{
		s:         s,
		stream:    stream,
		ctx:       ctx,
		chain:     sessionops.Interceptors(ctx),
		opsCtx:    opsCtx,
		cancelOps: cancelOps,
		requests:  make(chan *coordinatorv1.SessionRequest),
		recvErr:   make(chan error, 1),
		slots:     make(chan struct{}, sessionInFlight),
		jobs:      make(chan func()),
		out:       newSessionSender(stream),
	}
}

// receive is the receiver: it hands each request to the dispatcher until
// Recv fails (io.EOF once the client is done sending). Recv blocks, so it
// runs on its own goroutine and the dispatcher can also watch for the end.
// It ends when the handler returns: gRPC then cancels the stream, which
// fails the pending Recv.
func (ss *session) receive() {
	for {
		req, err := ss.stream.Recv()
		if err != nil {
			ss.recvErr <- err
			return
		}
		select {
		case ss.requests <- req:
		case <-ss.ctx.Done():
			return
		}
	}
}

// dispatch is the dispatcher: it starts the operations of each request
// until the stream must end, and says how.
func (ss *session) dispatch() sessionEnd {
	for {
		req, end := ss.await(true)
		if end != nil {
			return *end
		}
		if n := len(req.GetOperations()); n > MaxSessionOperations {
			return sessionEnd{err: InvalidField("operations", fmt.Sprintf("has %d operations; at most %d are allowed in one message", n, MaxSessionOperations)), abandon: true}
		}
		for _, op := range req.GetOperations() {
			if end := ss.start(op); end != nil {
				return *end
			}
		}
	}
}

// start starts op: a cancel at once, an operation that may wait on a
// goroutine of its own (the limiter's waiting-call caps bound those), any
// other on a worker once it has a slot.
func (ss *session) start(op *coordinatorv1.SessionOperation) *sessionEnd {
	if c, ok := op.GetOperation().(*coordinatorv1.SessionOperation_Cancel); ok {
		ss.waiting.cancel(c.Cancel)
		return nil
	}
	if opWaits(op) {
		ss.ops.Add(1)
		opCtx, cancel := context.WithCancel(ss.opsCtx)
		forget := ss.waiting.add(op.GetId(), cancel)
		go func() {
			defer ss.ops.Done()
			defer forget()
			ss.out.push(ss.s.sessionOp(opCtx, ss.chain, op))
		}()
		return nil
	}
	select {
	case ss.slots <- struct{}{}:
	default: // all taken: wait for one (flow control pushes back on the client), or for the end
		if _, end := ss.await(false); end != nil {
			return end
		}
	}
	ss.ops.Add(1)
	ss.runOnWorker(func() {
		defer ss.ops.Done()
		defer func() { <-ss.slots }()
		ss.out.push(ss.s.sessionOp(ss.opsCtx, ss.chain, op))
	})
	return nil
}

// await blocks until the dispatcher has a request (forRequest) or a slot
// (otherwise), or the stream must end: the one place that watches for the
// end, which it returns.
func (ss *session) await(forRequest bool) (*coordinatorv1.SessionRequest, *sessionEnd) {
	var (
		requests <-chan *coordinatorv1.SessionRequest
		recvErr  <-chan error
		slots    chan<- struct{}
	)
	if forRequest {
		requests, recvErr = ss.requests, ss.recvErr
	} else {
		slots = ss.slots
	}
	select {
	case req := <-requests:
		return req, nil
	case slots <- struct{}{}:
		return nil, nil
	case err := <-recvErr:
		switch {
		case errors.Is(err, io.EOF): // the client is done sending
			return nil, &sessionEnd{}
		case ss.ctx.Err() != nil:
			return nil, ss.cancelled()
		}
		// The codec's InvalidArgument for a message it could not decode, a
		// message over the size limit, or the transport's failure.
		return nil, &sessionEnd{err: err, abandon: true}
	case <-ss.ctx.Done():
		return nil, ss.cancelled()
	case <-ss.out.failed:
		return nil, &sessionEnd{abandon: true}
	case <-ss.s.stopping:
		// Waits end at once with Unavailable; the results of what was in
		// flight are sent.
		return nil, &sessionEnd{err: errStopping}
	}
}

// cancelled is the end of a stream the client cancelled or lost.
func (ss *session) cancelled() *sessionEnd {
	return &sessionEnd{err: status.FromContextError(ss.ctx.Err()).Err(), abandon: true}
}

// runOnWorker runs an operation without a wait on one of the stream's
// workers, goroutines that outlive one operation: a fresh goroutine per
// operation would grow its stack through the handler and interceptors every
// time (about 6% of the coordinator's CPU under load). There are at most
// sessionInFlight of them, one per slot.
func (ss *session) runOnWorker(job func()) {
	select {
	case ss.jobs <- job: // an idle worker takes it
	default:
		go ss.worker(job)
	}
}

// worker runs job, then the jobs handed to it, until the stream ends.
func (ss *session) worker(job func()) {
	job()
	for job := range ss.jobs {
		job()
	}
}

// end is the stream's one shutdown: it gives up the operations in flight
// when the end abandons them, waits for them, lets the sender send their
// results, stops the workers, and returns the stream's error (the sender's
// when a Send failed).
func (ss *session) end(e sessionEnd) error {
	if e.abandon {
		ss.cancelOps()
	}
	ss.ops.Wait()
	close(ss.jobs)
	close(ss.out.results)
	<-ss.out.done
	if e.err == nil && ss.out.err != nil {
		return ss.out.err
	}
	return e.err
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
	if tp, ts := op.GetTraceParent(), op.GetTraceState(); tp != "" || ts != "" {
		var v validator
		v.optionalText("trace_parent", tp, MaxTraceParentBytes)
		v.optionalText("trace_state", ts, MaxTraceStateBytes)
		if err := v.Err(); err != nil {
			res.Result = sessionError(err)
			return res
		}
		ctx = sessionops.WithTraceContext(ctx, sessionops.TraceContext{Parent: tp, State: ts})
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
