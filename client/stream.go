package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// opStream carries a Client's lease operations (acquire, release,
// acquire_group, release_group, campaign, resign) and the renewals of its
// sessions (renew_session) over one operation stream, shared by every
// goroutine.
//
// Operations are queued, and whatever is queued when the stream is free to
// send goes out as one StreamRequest (up to maxStreamOps operations and
// about maxStreamBatchBytes), so that an operation alone goes out at once
// and many from many goroutines share messages. The goroutine that queues
// an operation sends it itself when no other is sending and few operations
// are in flight (see maxInlineInFlight); otherwise the stream's sender
// goroutine does. Each operation is
// stamped, on the Client's clock, when the message carrying it is written:
// a session renewal's validity counts from there. Results are matched to
// operations by id.
//
// The stream is opened when the first operation is queued and closed after
// streamIdle with nothing queued or in flight; no goroutine runs then.
// When it breaks, the operations in flight fail with Unavailable (their
// outcome is unknown: an acquire may have been granted, which asking again
// as the same holder finds), and those still queued go out on the next
// stream, opened after a backoff. When a stream cannot be opened, the queued
// operations fail with its error, as their unary calls would.
type opStream struct {
	c    *Client
	idle time.Duration

	mu       sync.Mutex
	closed   bool
	queue    []*streamOp
	inflight map[uint64]*streamOp
	nextID   uint64
	running  bool
	cur      *streamConn // the open stream, nil while connecting or closing

	// run is the context of the stream goroutine: cancelled by close.
	run       context.Context
	cancelRun context.CancelFunc
	wg        sync.WaitGroup
}

// Bounds of one StreamRequest. The coordinator refuses more than
// maxStreamOps operations in a message, and messages over its size limit
// (96 KiB by default); an operation larger than maxStreamOpBytes (only an
// invalid Campaign value can be) is refused here, alone.
const (
	maxStreamOps        = 1000
	maxStreamBatchBytes = 64 << 10
	maxStreamOpBytes    = 70 << 10
	// defaultStreamIdle is how long the stream stays open with nothing in
	// flight.
	defaultStreamIdle = 30 * time.Second
)

// streamOp is one operation and its fate.
type streamOp struct {
	id   uint64
	op   *coordinatorv1.StreamOperation
	size int
	sent time.Time // on the Client's clock, once written
	// done receives the result or the error of the operation, once, with no
	// lock held.
	done func(o *streamOp, res *coordinatorv1.StreamResult, err error)
	// state: queued, sent (in flight) or finished. Guarded by stream.mu.
	state opState
	// noResult marks an operation the coordinator does not answer (a
	// cancel): it is finished once written.
	noResult bool
}

type opState int

const (
	opQueued opState = iota
	opSent
	opFinished
)

// streamConn is one open operation stream.
type streamConn struct {
	stream grpc.BidiStreamingClient[coordinatorv1.StreamRequest, coordinatorv1.StreamResponse]
	cancel context.CancelFunc // ends the stream
	poke   chan struct{}
	// sending says that a goroutine is writing the queue on the stream
	// (flush). Guarded by opStream.mu.
	sending bool
}

// maxInlineInFlight bounds the operations in flight below which the
// goroutine that queues an operation sends it itself, saving the wake-up
// of the sender goroutine (most of an operation's latency on a loaded
// machine). With so few in flight the coordinator is reading the stream
// (it stops only with a thousand of them running), so a Send on the
// caller's goroutine does not wait for flow control, which the caller's
// context could not cut short; with more, the sender goroutine sends, and
// its batches are what count.
const maxInlineInFlight = 16

func (s *opStream) init(c *Client, idle time.Duration) {
	s.c, s.idle = c, idle
	if s.idle <= 0 {
		s.idle = defaultStreamIdle
	}
	s.inflight = map[uint64]*streamOp{}
	// Not the Client's closing context: Close releases what is held over
	// the stream after it cancels that one.
	s.run, s.cancelRun = context.WithCancel(context.Background())
}

// submit queues op; done gets its outcome. It fails with ErrClosed or
// InvalidArgument (an operation too large), and then done is not called. With inline, submit may send
// what is queued itself (see maxInlineInFlight): callers that queue many
// operations at once, or hold a lock, leave it to the sender goroutine.
func (s *opStream) submit(op *coordinatorv1.StreamOperation, inline bool, done func(o *streamOp, res *coordinatorv1.StreamResult, err error)) (*streamOp, error) {
	o, flushOn, err := s.enqueue(op, inline, done)
	if flushOn != nil {
		s.flush(flushOn)
	}
	return o, err
}

// enqueue is submit's part under s.mu: it queues op, and returns the
// stream the caller is to flush itself, if any (having set its sending).
func (s *opStream) enqueue(op *coordinatorv1.StreamOperation, inline bool, done func(o *streamOp, res *coordinatorv1.StreamResult, err error)) (*streamOp, *streamConn, error) {
	size := proto.Size(op)
	if size > maxStreamOpBytes {
		return nil, nil, status.Errorf(codes.InvalidArgument, "coordinator: an operation of %d bytes is over the %d the operation stream carries", size, maxStreamOpBytes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, ErrClosed
	}
	s.nextID++
	o := &streamOp{id: s.nextID, op: op, size: size, done: done}
	op.Id = o.id
	s.queue = append(s.queue, o)
	var flushOn *streamConn
	switch {
	case s.cur == nil:
	case inline && !s.cur.sending && len(s.inflight) < maxInlineInFlight:
		s.cur.sending = true
		flushOn = s.cur
	default:
		poke(s.cur.poke)
	}
	if !s.running {
		s.running = true
		s.wg.Add(1)
		go s.serve()
	}
	return o, flushOn, nil
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// call runs op and waits for its result, until ctx ends. An operation that
// was sent when ctx ended is left to finish: late then gets its outcome,
// e.g. to give up a lease granted to an acquisition nobody waits for.
func (s *opStream) call(ctx context.Context, op *coordinatorv1.StreamOperation, late func(res *coordinatorv1.StreamResult, err error)) (*coordinatorv1.StreamResult, error) {
	type outcome struct {
		res *coordinatorv1.StreamResult
		err error
	}
	ch := make(chan outcome, 1)
	var (
		lateMu    sync.Mutex
		abandoned bool
	)
	o, err := s.submit(op, true, func(o *streamOp, res *coordinatorv1.StreamResult, err error) {
		ch <- outcome{res, err}
		lateMu.Lock()
		gone := abandoned
		lateMu.Unlock()
		if gone && late != nil {
			late(res, err)
		}
	})
	if err != nil {
		return nil, err
	}
	select {
	case out := <-ch:
		return out.res, out.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	switch o.state {
	case opQueued: // never sent: forget it
		o.state = opFinished
		if i := slices.Index(s.queue, o); i >= 0 {
			s.queue = slices.Delete(s.queue, i, i+1)
		}
	case opSent:
		lateMu.Lock()
		abandoned = true
		lateMu.Unlock()
		// A waiting acquire, acquire_group or campaign leaves the queue
		// at once, so the waiters behind it need not wait for its grant
		// and release; the coordinator ignores the cancel of an operation
		// that is not waiting. late still gets its outcome.
		s.queueCancelLocked(o.id)
	case opFinished: // answered meanwhile
		s.mu.Unlock()
		out := <-ch
		return out.res, out.err
	}
	s.mu.Unlock()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// queueCancelLocked queues a cancel of the operation id. It has no result:
// it is finished once written. Callers hold s.mu.
func (s *opStream) queueCancelLocked(id uint64) {
	if s.closed {
		return
	}
	s.nextID++
	op := &coordinatorv1.StreamOperation{Id: s.nextID, Operation: &coordinatorv1.StreamOperation_Cancel{Cancel: id}}
	s.queue = append(s.queue, &streamOp{id: s.nextID, op: op, size: proto.Size(op), noResult: true,
		done: func(*streamOp, *coordinatorv1.StreamResult, error) {}})
	if s.cur != nil {
		poke(s.cur.poke)
	}
}

// finish ends o with its outcome. Callers hold s.mu; done runs after.
func (s *opStream) finishLocked(o *streamOp, res *coordinatorv1.StreamResult, err error) func() {
	if o.state == opFinished {
		return func() {}
	}
	o.state = opFinished
	return func() { o.done(o, res, err) }
}

// serve is the stream goroutine: it opens a stream while operations are
// queued, and exits when nothing is left to do.
func (s *opStream) serve() {
	defer s.wg.Done()
	ctx := s.run
	b := newCallBackoff()
	for {
		s.mu.Lock()
		if len(s.queue) == 0 || s.closed {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		answered, err := s.stream(ctx)
		if answered {
			b.Reset()
		}
		if err == nil || ctx.Err() != nil {
			continue // closed while idle, or by close: look at the queue again
		}
		s.c.log.Warn("coordinator: operation stream ended; reconnecting if operations are queued", "err", err)
		sleep(ctx, retryIn(b, err))
	}
}

// stream serves one stream until it breaks or has been idle for s.idle. It
// reports whether any result arrived, and the error that ended it (nil when
// it was closed as idle).
func (s *opStream) stream(ctx context.Context) (bool, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := s.c.api.Stream(sctx)
	if err != nil {
		s.fail(err, true)
		return false, err
	}
	conn := &streamConn{stream: st, cancel: cancel, poke: make(chan struct{}, 1)}
	s.mu.Lock()
	s.cur = conn
	poke(conn.poke)
	s.mu.Unlock()

	// Send on a goroutine of its own, receive on this one; once Recv
	// fails, end the stream and wait for the sender, so that nothing of the
	// stream outlives it.
	var sending sync.WaitGroup
	sending.Go(func() { s.sendLoop(sctx, conn) })
	answered, err := s.recvLoop(conn)
	cancel()
	sending.Wait()
	// Before fail: no flush takes operations in flight on conn from now on,
	// and those taken before are in s.inflight for fail to end.
	s.mu.Lock()
	if s.cur == conn {
		s.cur = nil
	}
	s.mu.Unlock()
	if err == nil {
		err = io.ErrUnexpectedEOF // results were outstanding, or more may be queued
		s.mu.Lock()
		if len(s.inflight) == 0 {
			err = nil
		}
		s.mu.Unlock()
	}
	if ctx.Err() != nil {
		err = ErrClosed
	}
	if err != nil {
		s.fail(err, false)
	}
	return answered, err
}

// fail ends the operations in flight after the stream failed with err, and
// the queued ones when they cannot go on the next stream: when opening
// failed (opening, as their unary calls would fail), or the coordinator
// refuses the stream itself (Unauthenticated, PermissionDenied…).
func (s *opStream) fail(err error, opening bool) {
	code := status.Code(err)
	inflightErr, queuedErr := err, error(nil)
	switch {
	case errors.Is(err, ErrClosed):
		queuedErr = ErrClosed
	case opening || !transient(err) && code != codes.Internal && code != codes.Unknown:
		queuedErr = err
	default:
		inflightErr = &streamBrokeError{err: err}
	}
	var finish []func()
	s.mu.Lock()
	for id, o := range s.inflight {
		delete(s.inflight, id)
		finish = append(finish, s.finishLocked(o, nil, inflightErr))
	}
	if queuedErr != nil {
		for _, o := range s.queue {
			finish = append(finish, s.finishLocked(o, nil, queuedErr))
		}
		s.queue = nil
	}
	s.mu.Unlock()
	for _, f := range finish {
		f()
	}
}

// streamBrokeError is the error of an operation in flight when its stream
// broke: Unavailable, its outcome unknown.
type streamBrokeError struct{ err error }

func (e *streamBrokeError) Error() string {
	return "coordinator: the operation stream broke with the operation in flight: " + e.err.Error()
}

func (e *streamBrokeError) Unwrap() error { return e.err }

// GRPCStatus makes the error Unavailable for status.Code and transient.
func (e *streamBrokeError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

// sendLoop writes the queued operations on conn, when poked, until its
// stream ends, and closes it after s.idle with nothing queued or in flight.
func (s *opStream) sendLoop(ctx context.Context, conn *streamConn) {
	idle := time.NewTimer(s.idle)
	defer idle.Stop()
	for {
		select {
		case <-conn.poke:
		case <-idle.C:
			s.mu.Lock()
			quiet := len(s.queue) == 0 && len(s.inflight) == 0 && !conn.sending
			if quiet {
				s.cur = nil // what is queued from now on waits for the next stream
			}
			s.mu.Unlock()
			if quiet {
				if err := conn.stream.CloseSend(); err != nil {
					conn.cancel()
				}
				return
			}
			idle.Reset(s.idle)
			continue
		case <-ctx.Done():
			return
		}
		s.mu.Lock()
		mine := !conn.sending
		conn.sending = true
		s.mu.Unlock()
		if mine { // else the goroutine sending takes what was queued
			s.flush(conn)
		}
		idle.Reset(s.idle)
	}
}

// flush writes what is queued on conn until nothing is, or its stream
// fails (Recv then reports why). The caller set conn.sending; flush clears
// it, under the same lock as it finds the queue empty, so that an
// operation queued meanwhile is either taken here or finds it clear.
func (s *opStream) flush(conn *streamConn) {
	for {
		req := s.take(conn)
		if req == nil {
			return
		}
		if err := conn.stream.Send(req); err != nil {
			s.mu.Lock()
			conn.sending = false
			s.mu.Unlock()
			conn.cancel()
			return
		}
	}
}

// take moves the next batch of queued operations in flight on conn, stamped
// as sent now, and returns it; nil, clearing conn.sending, when nothing is
// queued or conn is no longer the stream.
func (s *opStream) take(conn *streamConn) *coordinatorv1.StreamRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != conn || len(s.queue) == 0 {
		conn.sending = false
		return nil
	}
	now := s.c.clock.Now()
	n, bytes := 0, 0
	for n < len(s.queue) && n < maxStreamOps && (n == 0 || bytes+s.queue[n].size <= maxStreamBatchBytes) {
		bytes += s.queue[n].size
		n++
	}
	req := &coordinatorv1.StreamRequest{Operations: make([]*coordinatorv1.StreamOperation, n)}
	for i, o := range s.queue[:n] {
		req.Operations[i] = o.op
		if o.noResult {
			o.state = opFinished
			continue
		}
		o.state, o.sent = opSent, now
		s.inflight[o.id] = o
	}
	s.queue = slices.Delete(s.queue, 0, n)
	return req
}

// recvLoop delivers results until the stream ends; it reports whether any
// arrived, and the stream's error (nil when it ended cleanly).
func (s *opStream) recvLoop(conn *streamConn) (bool, error) {
	answered := false
	for {
		resp, err := conn.stream.Recv()
		if errors.Is(err, io.EOF) {
			return answered, nil
		}
		if err != nil {
			return answered, err
		}
		answered = true
		var finish []func()
		s.mu.Lock()
		for _, r := range resp.GetResults() {
			if o, ok := s.inflight[r.GetId()]; ok {
				delete(s.inflight, r.GetId())
				finish = append(finish, s.finishLocked(o, r, nil))
			}
		}
		s.mu.Unlock()
		for _, f := range finish {
			f()
		}
	}
}

// close fails what is queued with ErrClosed, ends the stream (which gives
// up the coordinator's waits) and waits for the goroutines.
func (s *opStream) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancelRun()
	s.fail(ErrClosed, false)
	s.wg.Wait()
}

// resultError is the error a result carries, as the unary call returns it.
func resultError(res *coordinatorv1.StreamResult) error {
	if e := res.GetError(); e != nil {
		return status.ErrorProto(e)
	}
	return nil
}

// unexpected is the error of a result of the wrong kind.
func unexpected(res *coordinatorv1.StreamResult, want string) error {
	return status.Error(codes.Internal, fmt.Sprintf("coordinator: a %s operation was answered with %T", want, res.GetResult()))
}
