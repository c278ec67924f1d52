package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
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
// and errors; its result goes out as soon as it is ready, with whatever
// else is ready when it finds the stream free to send: many operations in
// flight cost few messages.
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
	go ss.receive()
	return ss.end(ss.await())
}

// opStream is one operation stream, in three parts: the receiver (receive)
// reads the requests and starts each operation, on a worker or, when it
// may wait, on a goroutine of its own; each operation sends its own result
// (streamSender), with whatever else is ready; the handler's goroutine
// watches for the end of the stream (await), and end is its one shutdown.
// No operation changes goroutines between its arrival and its result but
// once, from the receiver to its worker: on a loaded machine every
// hand-off to a parked goroutine is a wake-up, and wake-ups are most of an
// operation's latency.
type opStream struct {
	s      *Service
	stream coordinatorv1.Coordinator_StreamServer
	ctx    context.Context
	chain  []grpc.UnaryServerInterceptor
	// opsCtx ends the operations in flight early when the stream fails.
	opsCtx    context.Context
	cancelOps context.CancelFunc

	// received is how the receiver ends the stream: when Recv fails, or a
	// request is refused.
	received chan streamEnd

	// ops counts the operations in flight. slots holds one token per
	// operation without a wait in flight (at most streamInFlight), jobs
	// hands such operations to idle workers, and waiting is the operations
	// that may wait, for cancel operations to find.
	ops     sync.WaitGroup
	slots   chan struct{}
	jobs    chan func()
	waiting waitingOps

	// stopped, once set by end, keeps the receiver from starting more
	// operations (stop is closed with it, for a receiver waiting for a
	// slot): end then waits for those in flight.
	mu      sync.Mutex
	stopped bool
	stop    chan struct{}

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
		received:  make(chan streamEnd, 1),
		slots:     make(chan struct{}, streamInFlight),
		jobs:      make(chan func()),
		stop:      make(chan struct{}),
		out:       newStreamSender(stream),
	}
}

// receive is the receiver: it starts the operations of each request, in
// order, until Recv fails (io.EOF once the client is done sending), a
// request is refused, or end stops it. Recv blocks, so it runs on a
// goroutine of its own and the handler's can watch for the end. It ends
// when the handler returns at the latest: gRPC then cancels the stream,
// which fails the pending Recv.
func (ss *opStream) receive() {
	for {
		req, err := ss.stream.Recv()
		if err != nil {
			ss.received <- ss.recvEnd(err)
			return
		}
		if n := len(req.GetOperations()); n > MaxStreamOperations {
			ss.received <- streamEnd{err: InvalidField("operations", fmt.Sprintf("has %d operations; at most %d are allowed in one message", n, MaxStreamOperations)), abandon: true}
			return
		}
		for _, op := range req.GetOperations() {
			if !ss.start(op) {
				return
			}
		}
	}
}

// recvEnd is the end of a stream whose Recv failed with err.
func (ss *opStream) recvEnd(err error) streamEnd {
	switch {
	case errors.Is(err, io.EOF): // the client is done sending
		return streamEnd{}
	case ss.ctx.Err() != nil:
		return ss.cancelled()
	}
	// The codec's InvalidArgument for a message it could not decode, a
	// message over the size limit, or the transport's failure.
	return streamEnd{err: err, abandon: true}
}

// start starts op: a cancel at once, an operation that may wait on a
// goroutine of its own (the limiter's waiting-call caps bound those), any
// other on a worker once it has a slot (while all are taken the receiver
// stops reading: flow control pushes back on the client). It reports false
// when the stream is ending and op was not started.
func (ss *opStream) start(op *coordinatorv1.StreamOperation) bool {
	if c, ok := op.GetOperation().(*coordinatorv1.StreamOperation_Cancel); ok {
		ss.waiting.cancel(c.Cancel)
		return true
	}
	if opWaits(op) {
		if !ss.enter() {
			return false
		}
		opCtx, cancel := context.WithCancel(ss.opsCtx)
		forget := ss.waiting.add(op.GetId(), cancel)
		go func() {
			defer ss.ops.Done()
			defer forget()
			ss.out.push(ss.s.streamOp(opCtx, ss.chain, op))
		}()
		return true
	}
	select {
	case ss.slots <- struct{}{}:
	case <-ss.stop:
		return false
	}
	if !ss.enter() {
		<-ss.slots
		return false
	}
	ss.runOnWorker(func() {
		defer ss.ops.Done()
		defer func() { <-ss.slots }()
		ss.out.push(ss.s.streamOp(ss.opsCtx, ss.chain, op))
	})
	return true
}

// enter counts an operation in flight, unless end stopped the stream.
func (ss *opStream) enter() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.stopped {
		return false
	}
	ss.ops.Add(1)
	return true
}

// await blocks until the stream must end, and says how: the one place
// that watches for the end.
func (ss *opStream) await() streamEnd {
	select {
	case e := <-ss.received:
		return e
	case <-ss.ctx.Done():
		return ss.cancelled()
	case <-ss.out.failed:
		return streamEnd{abandon: true}
	case <-ss.s.stopping:
		// Waits end at once with Unavailable; the results of what was in
		// flight are sent.
		return streamEnd{err: errStopping}
	}
}

// cancelled is the end of a stream the client cancelled or lost.
func (ss *opStream) cancelled() streamEnd {
	return streamEnd{err: status.FromContextError(ss.ctx.Err()).Err(), abandon: true}
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
// when the end abandons them, stops the receiver from starting more, waits
// for those in flight (each sends its own result), stops the workers, and
// returns the stream's error (the sender's when a Send failed).
func (ss *opStream) end(e streamEnd) error {
	if e.abandon {
		ss.cancelOps()
	}
	ss.mu.Lock()
	ss.stopped = true
	close(ss.stop)
	ss.mu.Unlock()
	// Every operation counted in ops was handed to its worker or goroutine
	// before enter let the next one in, so none sends on jobs once they
	// are done.
	ss.ops.Wait()
	close(ss.jobs)
	if err := ss.out.failure(); e.err == nil && err != nil {
		return err
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
	case *coordinatorv1.StreamOperation_AcquireGroup:
		return o.AcquireGroup.GetWait().AsDuration() > 0
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
		res.Result = streamError(InvalidField("operation", "is required: one of acquire, renew, release, campaign, resign, renew_session, acquire_group, renew_group or release_group"))
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
	case *coordinatorv1.AcquireGroupResponse:
		res.Result = &coordinatorv1.StreamResult_AcquireGroup{AcquireGroup: r}
	case *coordinatorv1.RenewGroupResponse:
		res.Result = &coordinatorv1.StreamResult_RenewGroup{RenewGroup: r}
	case *coordinatorv1.ReleaseGroupResponse:
		res.Result = &coordinatorv1.StreamResult_ReleaseGroup{ReleaseGroup: r}
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
	case *coordinatorv1.StreamOperation_AcquireGroup:
		return "acquire_group", coordinatorv1.Coordinator_AcquireGroup_FullMethodName, orEmpty(o.AcquireGroup),
			func(ctx context.Context, req any) (any, error) {
				return s.AcquireGroup(ctx, req.(*coordinatorv1.AcquireGroupRequest))
			}
	case *coordinatorv1.StreamOperation_RenewGroup:
		return "renew_group", coordinatorv1.Coordinator_RenewGroup_FullMethodName, orEmpty(o.RenewGroup),
			func(ctx context.Context, req any) (any, error) {
				return s.RenewGroup(ctx, req.(*coordinatorv1.RenewGroupRequest))
			}
	case *coordinatorv1.StreamOperation_ReleaseGroup:
		return "release_group", coordinatorv1.Coordinator_ReleaseGroup_FullMethodName, orEmpty(o.ReleaseGroup),
			func(ctx context.Context, req any) (any, error) {
				return s.ReleaseGroup(ctx, req.(*coordinatorv1.ReleaseGroupRequest))
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
// message. It has no goroutine of its own: an operation whose result finds
// no Send in progress sends it itself, with whatever else is ready, and one
// that finds a Send in progress leaves its result to that sender, which
// sends until nothing is left. A lone result then costs no hand-off to
// another goroutine, and results ready together share a message.
type streamSender struct {
	stream coordinatorv1.Coordinator_StreamServer
	failed chan struct{} // closed when a Send failed; failure says why

	mu      sync.Mutex
	space   sync.Cond // signalled when the queue shrinks, or a Send fails
	queue   []*coordinatorv1.StreamResult
	sending bool
	err     error
}

// maxQueuedResults bounds the results waiting for a Send in progress: past
// it, push waits, so that a client that does not read its results holds up
// the operations that produced them, their slots, and so the receiver.
const maxQueuedResults = 256

func newStreamSender(stream coordinatorv1.Coordinator_StreamServer) *streamSender {
	o := &streamSender{stream: stream, failed: make(chan struct{})}
	o.space.L = &o.mu
	return o
}

// push sends r, or leaves it to the Send in progress. After a failed Send
// results are dropped: the stream is gone.
func (o *streamSender) push(r *coordinatorv1.StreamResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.queue) >= maxQueuedResults && o.err == nil {
		o.space.Wait()
	}
	if o.err != nil {
		return
	}
	o.queue = append(o.queue, r)
	if o.sending {
		return
	}
	o.sending = true
	defer func() { o.sending = false }()
	for len(o.queue) > 0 {
		resp := o.takeLocked()
		o.space.Broadcast()
		o.mu.Unlock()
		err := o.stream.Send(resp)
		o.mu.Lock()
		if err != nil {
			o.err, o.queue = err, nil
			close(o.failed)
			o.space.Broadcast()
			return
		}
	}
}

// takeLocked removes the next message's results from the queue: as many as
// maxStreamResults and maxStreamResponseBytes allow, at least one.
func (o *streamSender) takeLocked() *coordinatorv1.StreamResponse {
	n, size := 0, 0
	for n < len(o.queue) && n < maxStreamResults && size < maxStreamResponseBytes {
		size += proto.Size(o.queue[n])
		n++
	}
	resp := &coordinatorv1.StreamResponse{Results: slices.Clone(o.queue[:n])}
	o.queue = slices.Delete(o.queue, 0, n)
	return resp
}

// failure is the error of the Send that failed, if one did.
func (o *streamSender) failure() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}
