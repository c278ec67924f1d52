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
	"github.com/coordinator-dev/coordinator/server/streamops"
)

// operation streams. Each operation runs on a goroutine of its own through the
// unary handler of the same name (and the interceptors added for it, see
// package streamops), so it has exactly that call's semantics, limits
// and errors; its result goes out as soon as it is ready. One sender
// goroutine writes the results: whatever is ready when it is free to send
// goes out in one StreamResponse, so that many operations in flight cost
// few messages.
//
// Limits: a message carries at most MaxStreamOperations operations; more fail the
// stream with InvalidArgument (field "operations"), as a malformed message
// does: a client that sends them is broken, and guessing which of its
// operations it meant would hide that. At most streamInFlight operations
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
	// streamInFlight bounds the operations without a wait one stream runs
	// at once.
	streamInFlight = 1024
	// maxStreamResults and maxStreamResponseBytes bound one
	// StreamResponse (the byte bound is soft: one result may pass it).
	maxStreamResults       = 1000
	maxStreamResponseBytes = 1 << 20
)

// Stream implements coordinatorv1.CoordinatorServer.
func (s *Service) Stream(stream coordinatorv1.Coordinator_StreamServer) error {
	ss := s.newOpStream(stream)
	defer ss.cancelOps()
	go ss.out.run()
	go ss.receive()
	return ss.end(ss.dispatch())
}

// opStream is one operation stream, in three parts that hand work on through
// channels: the receiver (receive) reads the requests; the dispatcher
// (dispatch, on the handler's goroutine) starts each operation, on a worker
// or, when it may wait, on a goroutine of its own; the sender (streamSender)
// writes the results. The dispatcher alone watches for the end of the stream
// (await), and end is its one shutdown.
type opStream struct {
	s      *Service
	stream coordinatorv1.Coordinator_StreamServer
	ctx    context.Context
	chain  []grpc.UnaryServerInterceptor
	// opsCtx ends the operations in flight early when the stream fails.
	opsCtx    context.Context
	cancelOps context.CancelFunc

	// From the receiver to the dispatcher.
	requests chan *coordinatorv1.StreamRequest
	recvErr  chan error

	// ops counts the operations in flight. slots holds one token per
	// operation without a wait in flight (at most streamInFlight), jobs
	// hands such operations to idle workers, and waiting is the operations
	// that may wait, for cancel operations to find.
	ops     sync.WaitGroup
	slots   chan struct{}
	jobs    chan func()
	waiting waitingOps

	out *streamSender
}

// streamEnd is how a stream ends: the handler's error, and whether the
// operations in flight are abandoned (their contexts cancelled: waits are
// given up at once) rather than left to finish.
type streamEnd struct {
	err     error
	abandon bool
}

func (s *Service) newOpStream(stream coordinatorv1.Coordinator_StreamServer) *opStream {
	ctx := stream.Context()
	opsCtx, cancelOps := context.WithCancel(ctx)
	return &opStream{
		s:         s,
		stream:    stream,
		ctx:       ctx,
		chain:     streamops.Interceptors(ctx),
		opsCtx:    opsCtx,
		cancelOps: cancelOps,
		requests:  make(chan *coordinatorv1.StreamRequest),
		recvErr:   make(chan error, 1),
		slots:     make(chan struct{}, streamInFlight),
		jobs:      make(chan func()),
		out:       newStreamSender(stream),
	}
}

// receive is the receiver: it hands each request to the dispatcher until
// Recv fails (io.EOF once the client is done sending). Recv blocks, so it
// runs on its own goroutine and the dispatcher can also watch for the end.
// It ends when the handler returns: gRPC then cancels the stream, which
// fails the pending Recv.
func (ss *opStream) receive() {
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
func (ss *opStream) dispatch() streamEnd {
	for {
		req, end := ss.await(true)
		if end != nil {
			return *end
		}
		if n := len(req.GetOperations()); n > MaxStreamOperations {
			return streamEnd{err: InvalidField("operations", fmt.Sprintf("has %d operations; at most %d are allowed in one message", n, MaxStreamOperations)), abandon: true}
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
func (ss *opStream) start(op *coordinatorv1.StreamOperation) *streamEnd {
	if c, ok := op.GetOperation().(*coordinatorv1.StreamOperation_Cancel); ok {
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
			ss.out.push(ss.s.streamOp(opCtx, ss.chain, op))
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
		ss.out.push(ss.s.streamOp(ss.opsCtx, ss.chain, op))
	})
	return nil
}

// await blocks until the dispatcher has a request (forRequest) or a slot
// (otherwise), or the stream must end: the one place that watches for the
// end, which it returns.
func (ss *opStream) await(forRequest bool) (*coordinatorv1.StreamRequest, *streamEnd) {
	var (
		requests <-chan *coordinatorv1.StreamRequest
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
			return nil, &streamEnd{}
		case ss.ctx.Err() != nil:
			return nil, ss.cancelled()
		}
		// The codec's InvalidArgument for a message it could not decode, a
		// message over the size limit, or the transport's failure.
		return nil, &streamEnd{err: err, abandon: true}
	case <-ss.ctx.Done():
		return nil, ss.cancelled()
	case <-ss.out.failed:
		return nil, &streamEnd{abandon: true}
	case <-ss.s.stopping:
		// Waits end at once with Unavailable; the results of what was in
		// flight are sent.
		return nil, &streamEnd{err: errStopping}
	}
}

// cancelled is the end of a stream the client cancelled or lost.
func (ss *opStream) cancelled() *streamEnd {
	return &streamEnd{err: status.FromContextError(ss.ctx.Err()).Err(), abandon: true}
}

// runOnWorker runs an operation without a wait on one of the stream's
// workers, goroutines that outlive one operation: a fresh goroutine per
// operation would grow its stack through the handler and interceptors every
// time (about 6% of the coordinator's CPU under load). There are at most
// streamInFlight of them, one per slot.
func (ss *opStream) runOnWorker(job func()) {
	select {
	case ss.jobs <- job: // an idle worker takes it
	default:
		go ss.worker(job)
	}
}

// worker runs job, then the jobs handed to it, until the stream ends.
func (ss *opStream) worker(job func()) {
	job()
	for job := range ss.jobs {
		job()
	}
}

// end is the stream's one shutdown: it gives up the operations in flight
// when the end abandons them, waits for them, lets the sender send their
// results, stops the workers, and returns the stream's error (the sender's
// when a Send failed).
func (ss *opStream) end(e streamEnd) error {
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
func opWaits(op *coordinatorv1.StreamOperation) bool {
	switch o := op.GetOperation().(type) {
	case *coordinatorv1.StreamOperation_Acquire:
		return o.Acquire.GetWait().AsDuration() > 0
	case *coordinatorv1.StreamOperation_Campaign:
		return o.Campaign.GetTerm() == 0 && o.Campaign.GetWait().AsDuration() > 0
	}
	return false
}

// streamOp runs one operation and returns its result.
func (s *Service) streamOp(ctx context.Context, chain []grpc.UnaryServerInterceptor, op *coordinatorv1.StreamOperation) (res *coordinatorv1.StreamResult) {
	res = &coordinatorv1.StreamResult{Id: op.GetId()}
	kind, method, req, handler := s.streamCall(op)
	defer func() {
		if p := recover(); p != nil {
			s.log.ErrorContext(ctx, "panic in a stream operation", "op", kind, "panic", p)
			res.Result = streamError(status.Error(codes.Internal, "internal error"))
		}
		code := codes.OK
		if e, ok := res.GetResult().(*coordinatorv1.StreamResult_Error); ok {
			code = codes.Code(e.Error.GetCode())
		}
		s.metrics.streamOps.WithLabelValues(kind, code.String()).Inc()
	}()
	if req == nil {
		res.Result = streamError(InvalidField("operation", "is required: one of acquire, renew, release, campaign, resign or renew_session"))
		return res
	}
	if tp, ts := op.GetTraceParent(), op.GetTraceState(); tp != "" || ts != "" {
		var v validator
		v.optionalText("trace_parent", tp, MaxTraceParentBytes)
		v.optionalText("trace_state", ts, MaxTraceStateBytes)
		if err := v.Err(); err != nil {
			res.Result = streamError(err)
			return res
		}
		ctx = streamops.WithTraceContext(ctx, streamops.TraceContext{Parent: tp, State: ts})
	}
	resp, err := streamops.Run(ctx, chain, &grpc.UnaryServerInfo{Server: s, FullMethod: method}, req, handler)
	if err != nil {
		res.Result = streamError(err)
		return res
	}
	switch r := resp.(type) {
	case *coordinatorv1.TryAcquireResponse:
		res.Result = &coordinatorv1.StreamResult_Acquire{Acquire: r}
	case *coordinatorv1.RenewResponse:
		res.Result = &coordinatorv1.StreamResult_Renew{Renew: r}
	case *coordinatorv1.ReleaseResponse:
		res.Result = &coordinatorv1.StreamResult_Release{Release: r}
	case *coordinatorv1.CampaignResponse:
		res.Result = &coordinatorv1.StreamResult_Campaign{Campaign: r}
	case *coordinatorv1.ResignResponse:
		res.Result = &coordinatorv1.StreamResult_Resign{Resign: r}
	case *coordinatorv1.RenewSessionResponse:
		res.Result = &coordinatorv1.StreamResult_RenewSession{RenewSession: r}
	default:
		res.Result = streamError(status.Errorf(codes.Internal, "internal error: %s answered %T", kind, resp))
	}
	return res
}

// streamCall returns the kind of op (its metric label), the unary method
// it stands for, its request and the handler that runs it; a nil request
// when op carries none.
func (s *Service) streamCall(op *coordinatorv1.StreamOperation) (kind, method string, req any, handler grpc.UnaryHandler) {
	switch o := op.GetOperation().(type) {
	case *coordinatorv1.StreamOperation_Acquire:
		return "acquire", coordinatorv1.Coordinator_TryAcquire_FullMethodName, orEmpty(o.Acquire),
			func(ctx context.Context, req any) (any, error) {
				return s.TryAcquire(ctx, req.(*coordinatorv1.TryAcquireRequest))
			}
	case *coordinatorv1.StreamOperation_Renew:
		return "renew", coordinatorv1.Coordinator_Renew_FullMethodName, orEmpty(o.Renew),
			func(ctx context.Context, req any) (any, error) {
				return s.Renew(ctx, req.(*coordinatorv1.RenewRequest))
			}
	case *coordinatorv1.StreamOperation_Release:
		return "release", coordinatorv1.Coordinator_Release_FullMethodName, orEmpty(o.Release),
			func(ctx context.Context, req any) (any, error) {
				return s.Release(ctx, req.(*coordinatorv1.ReleaseRequest))
			}
	case *coordinatorv1.StreamOperation_Campaign:
		return "campaign", coordinatorv1.Coordinator_Campaign_FullMethodName, orEmpty(o.Campaign),
			func(ctx context.Context, req any) (any, error) {
				return s.Campaign(ctx, req.(*coordinatorv1.CampaignRequest))
			}
	case *coordinatorv1.StreamOperation_Resign:
		return "resign", coordinatorv1.Coordinator_Resign_FullMethodName, orEmpty(o.Resign),
			func(ctx context.Context, req any) (any, error) {
				return s.Resign(ctx, req.(*coordinatorv1.ResignRequest))
			}
	case *coordinatorv1.StreamOperation_RenewSession:
		return "renew_session", coordinatorv1.Coordinator_RenewSession_FullMethodName, orEmpty(o.RenewSession),
			func(ctx context.Context, req any) (any, error) {
				return s.RenewSession(ctx, req.(*coordinatorv1.RenewSessionRequest))
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

// streamError is the result of an operation that failed with err: its
// status, code, message and details, as the unary call returns it.
func streamError(err error) *coordinatorv1.StreamResult_Error {
	return &coordinatorv1.StreamResult_Error{Error: status.Convert(err).Proto()}
}

// streamSender writes a stream's results, as many as are ready in each
// message.
type streamSender struct {
	stream  coordinatorv1.Coordinator_StreamServer
	results chan *coordinatorv1.StreamResult
	failed  chan struct{} // closed when a Send failed; err says why
	done    chan struct{} // closed when run returned
	err     error
}

func newStreamSender(stream coordinatorv1.Coordinator_StreamServer) *streamSender {
	return &streamSender{
		stream:  stream,
		results: make(chan *coordinatorv1.StreamResult, 256),
		failed:  make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// push hands a result to the sender. It does not block for long: the sender
// takes results until the channel is closed, even after a failed Send.
func (o *streamSender) push(r *coordinatorv1.StreamResult) { o.results <- r }

// run sends results until results is closed.
func (o *streamSender) run() {
	defer close(o.done)
	for r := range o.results {
		resp := &coordinatorv1.StreamResponse{Results: []*coordinatorv1.StreamResult{r}}
		size := proto.Size(r)
	drain:
		for len(resp.Results) < maxStreamResults && size < maxStreamResponseBytes {
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
