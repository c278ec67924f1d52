package client

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// renewer renews every session, and every lease and leadership of its own,
// of a Client: over the Client's operation stream (renew and renew_session
// operations), or, with WithUnaryCalls or a coordinator without Stream,
// leases over one KeepAlive stream of its own and sessions with unary
// RenewSession calls. A lease attached to a session is not in it: it takes
// its session's validity at each of its renewals, and ends with it.
//
// One scheduler goroutine keeps the leases in a heap ordered by when each
// next needs attention: its renewal (about ttl/3 after the last successful
// one was sent, or a backoff after a failure) or its local deadline. A due
// renewal is queued on the session, or on the KeepAlive stream, whose
// sender goroutine sends the queue; either stamps each renewal with the
// time it was sent. A lease has at most one renewal in flight. A renewed
// lease's deadline becomes the time its renewal was sent + the granted TTL
// − a drift margin; a lease still unrenewed at its deadline ends with
// ErrExpired there, whatever is in flight, before the coordinator's own
// expiry. A refusal (LEASE_NOT_HELD, or PERMISSION_DENIED, INVALID_FIELD)
// ends it with ErrLost at once; any other failure, or the stream breaking
// with the renewal in flight, is retried while the deadline allows.
//
// The goroutines run only while the Client holds leases: the scheduler
// starts with the first and exits with the last, and the KeepAlive stream
// goroutine is started when a first renewal is due and stops with the
// scheduler.
type renewer struct {
	c *Client

	mu      sync.Mutex
	closed  bool
	leases  map[leaseKey]*lease
	queue   leaseHeap
	pending []*lease // renewals to send, in order

	// The running scheduler, if any: its context and wake-up channel.
	run       context.Context
	cancelRun context.CancelFunc
	wake      chan struct{}
	// The running stream goroutine of this scheduler, if any, and the
	// stream it has open (nil while connecting).
	stream *streamRun
	cur    *kaConn

	wg sync.WaitGroup
}

type leaseKey struct {
	name  string
	token uint64
}

// streamRun identifies one stream goroutine.
type streamRun struct{}

// kaConn is one KeepAlive stream.
type kaConn struct {
	st   grpc.BidiStreamingClient[coordinatorv1.KeepAliveRequest, coordinatorv1.KeepAliveResponse]
	poke chan struct{}
}

func (s *renewer) init(c *Client) {
	s.c = c
	s.leases = map[leaseKey]*lease{}
}

// add starts renewing l.
func (s *renewer) add(l *lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.leases[leaseKey{l.name, l.token}] = l
	heap.Push(&s.queue, l)
	if s.run == nil {
		// Stopped by close, or when the last lease ends.
		ctx, cancel := context.WithCancel(s.c.closing)
		s.run, s.cancelRun, s.wake = ctx, cancel, make(chan struct{}, 1)
		s.wg.Add(1)
		go s.schedule(ctx, s.wake)
	} else if l.index == 0 {
		// Due before the one the scheduler sleeps for. Any other is due
		// after it, and waking the scheduler for nothing costs every
		// acquisition a wake-up and a turn of s.mu.
		s.poke()
	}
	return nil
}

// end ends l with err unless it has ended already; it returns the error l
// had ended with before, or nil.
func (s *renewer) end(l *lease, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.done {
		return l.err()
	}
	s.endLocked(l, err)
	return nil
}

// endLocked ends l with err unless it has ended already.
func (s *renewer) endLocked(l *lease, err error) {
	if l.done {
		return
	}
	l.done = true
	l.finish(err)
	if s.leases[leaseKey{l.name, l.token}] == l {
		delete(s.leases, leaseKey{l.name, l.token})
	}
	if l.index >= 0 {
		heap.Remove(&s.queue, l.index)
	}
	if l.session != nil {
		delete(l.session.attached, l)
	}
	// A session's leases end with it, for the same reason.
	attached := l.attached
	l.attached = nil
	for a := range attached {
		s.endLocked(a, err)
	}
	// The scheduler stops once no lease is left. A lease that ends sooner
	// can only make it wake early, which costs less than waking it at every
	// release (an attached lease is not even in its queue).
	if len(s.leases) == 0 {
		s.poke()
	}
}

// attach makes l a lease of the session sl: valid as long as sl, and ended
// with it. It fails when sl has ended.
func (s *renewer) attach(sl, l *lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl.done {
		return fmt.Errorf("coordinator: %s: %w", sl.describe(), sl.err())
	}
	if sl.attached == nil {
		sl.attached = map[*lease]struct{}{}
	}
	sl.attached[l] = struct{}{}
	l.session = sl
	l.ttl, l.confirmed, l.deadline = sl.ttl, sl.confirmed, sl.deadline
	return nil
}

// renewed records a successful renewal of l sent at sent (by KeepAlive or
// a proclamation). It ends l with ErrExpired instead when its deadline had
// passed already, and reports whether l is still held.
func (s *renewer) renewed(l *lease, sent time.Time, ttl time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewedLocked(l, sent, ttl)
}

func (s *renewer) renewedLocked(l *lease, sent time.Time, ttl time.Duration) bool {
	if l.done {
		return false
	}
	if !s.c.clock.Now().Before(l.deadline) {
		s.endLocked(l, s.expired(l))
		return false
	}
	l.granted(sent, ttl)
	for a := range l.attached {
		a.ttl, a.confirmed, a.deadline = l.ttl, l.confirmed, l.deadline
	}
	if l.index >= 0 {
		heap.Fix(&s.queue, l.index)
	}
	s.poke()
	return true
}

func (s *renewer) expired(l *lease) error {
	why := "no renewal was answered"
	if l.lastErr != "" {
		why = "the last renewal failed: " + l.lastErr
	}
	return fmt.Errorf("%w: %s: %s", ErrExpired, l.describe(), why)
}

// close ends every lease with ErrClosed, stops the goroutines and returns
// the leases that were held.
func (s *renewer) close() []*lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	held := make([]*lease, 0, len(s.leases))
	for _, l := range s.leases {
		held = append(held, l)
	}
	for _, l := range held {
		s.endLocked(l, ErrClosed)
	}
	s.stopLocked()
	return held
}

// stopLocked stops the scheduler and its stream.
func (s *renewer) stopLocked() {
	if s.run != nil {
		s.cancelRun()
	}
	s.run, s.cancelRun, s.wake, s.stream, s.cur = nil, nil, nil, nil, nil
	s.pending = nil
}

// poke wakes the scheduler.
func (s *renewer) poke() {
	if s.wake == nil {
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// schedule is the scheduler goroutine.
func (s *renewer) schedule(ctx context.Context, wake <-chan struct{}) {
	defer s.wg.Done()
	timer := s.c.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next, ok := s.tick(ctx)
		if !ok {
			return
		}
		timer.Reset(s.c.clock.Until(next))
		select {
		case <-timer.Chan():
		case <-wake:
		case <-ctx.Done():
			return
		}
	}
}

// tick ends the leases past their deadline, queues the renewals that are
// due, and returns when to look again; false when the scheduler must exit.
func (s *renewer) tick(ctx context.Context) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil { // stopped while waiting for the lock
		return time.Time{}, false
	}
	now := s.c.clock.Now()
	for len(s.queue) > 0 {
		l := s.queue[0]
		if l.due().After(now) {
			break
		}
		if !now.Before(l.deadline) {
			s.endLocked(l, s.expired(l))
			continue
		}
		l.wantSend = true
		s.pending = append(s.pending, l)
		heap.Fix(&s.queue, 0)
	}
	if len(s.leases) == 0 {
		s.stopLocked()
		return time.Time{}, false
	}
	if len(s.pending) > 0 && !s.c.unary && s.c.stream.usable() {
		s.sendOnStreamLocked()
	}
	if len(s.pending) > 0 {
		s.renewSessionsUnaryLocked(ctx)
	}
	if len(s.pending) > 0 {
		switch {
		case s.cur != nil:
			select {
			case s.cur.poke <- struct{}{}:
			default:
			}
		case s.stream == nil:
			s.stream = &streamRun{}
			s.wg.Add(1)
			go s.runStream(ctx, s.stream)
		}
	}
	return s.queue[0].due(), true
}

// runStream keeps a KeepAlive stream open, reconnecting with backoff, until
// ctx (the scheduler's) ends.
func (s *renewer) runStream(ctx context.Context, me *streamRun) {
	defer s.wg.Done()
	b := newCallBackoff()
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		st, err := s.c.api.KeepAlive(sctx, grpc.WaitForReady(true))
		if err != nil {
			cancel()
			if ctx.Err() == nil {
				s.c.log.Warn("coordinator: could not open the KeepAlive stream; retrying", "err", err)
			}
			sleep(ctx, retryIn(b, err))
			continue
		}
		conn := &kaConn{st: st, poke: make(chan struct{}, 1)}
		s.mu.Lock()
		if s.stream != me {
			s.mu.Unlock()
			cancel()
			return
		}
		s.cur = conn
		if len(s.pending) > 0 {
			conn.poke <- struct{}{}
		}
		s.mu.Unlock()

		answered, err := serveStream(cancel,
			func() { s.sendLoop(sctx, cancel, conn) },
			func() (bool, error) { return s.recvLoop(conn) })

		s.mu.Lock()
		if s.cur == conn {
			s.cur = nil
		}
		s.dropInflight(conn, err)
		s.poke()
		s.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		s.c.log.Warn("coordinator: KeepAlive stream broke; reconnecting", "err", err)
		if answered {
			b.Reset()
		}
		sleep(ctx, retryIn(b, err))
	}
}

// sendLoop sends the queued renewals on conn until its stream ends.
func (s *renewer) sendLoop(ctx context.Context, cancel context.CancelFunc, conn *kaConn) {
	for {
		select {
		case <-conn.poke:
		case <-ctx.Done():
			return
		}
		for _, req := range s.take(conn) {
			if err := conn.st.Send(req); err != nil {
				cancel() // Recv reports why
				return
			}
		}
	}
}

// take marks the queued renewals as sent on conn now and returns them.
func (s *renewer) take(conn *kaConn) []*coordinatorv1.KeepAliveRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != conn {
		return nil
	}
	now := s.c.clock.Now()
	reqs := make([]*coordinatorv1.KeepAliveRequest, 0, len(s.pending))
	for _, l := range s.pending {
		if l.done || !l.wantSend {
			continue
		}
		l.wantSend = false
		l.inflight, l.sentAt = conn, now
		reqs = append(reqs, &coordinatorv1.KeepAliveRequest{
			Name: l.name, Holder: l.holder, Token: l.token, Ttl: durationpb.New(l.ttl),
		})
	}
	s.pending = nil
	return reqs
}

// recvLoop handles responses until the stream ends; it reports whether any
// arrived, and why the stream ended.
func (s *renewer) recvLoop(conn *kaConn) (bool, error) {
	answered := false
	for {
		resp, err := conn.st.Recv()
		if err != nil {
			return answered, err
		}
		answered = true
		s.handle(conn, resp)
	}
}

// handle applies one KeepAlive response.
func (s *renewer) handle(conn *kaConn, resp *coordinatorv1.KeepAliveResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var (
		key    leaseKey
		holder string
	)
	switch r := resp.GetResult().(type) {
	case *coordinatorv1.KeepAliveResponse_Lease:
		key, holder = leaseKey{r.Lease.GetName(), r.Lease.GetToken()}, r.Lease.GetHolder()
	case *coordinatorv1.KeepAliveResponse_Lost:
		key, holder = leaseKey{resp.GetName(), r.Lost.GetToken()}, r.Lost.GetHolder()
	case *coordinatorv1.KeepAliveResponse_Failed:
		key, holder = leaseKey{resp.GetName(), r.Failed.GetToken()}, r.Failed.GetHolder()
	default:
		return
	}
	l := s.leases[key]
	if l == nil || l.holder != holder || l.inflight != conn {
		return // ended meanwhile, or an answer to an older stream
	}
	l.inflight = nil
	switch r := resp.GetResult().(type) {
	case *coordinatorv1.KeepAliveResponse_Lease:
		ttl := l.ttl
		if d := r.Lease.GetTtl(); d.IsValid() && d.AsDuration() > 0 {
			ttl = d.AsDuration()
		}
		s.renewedLocked(l, l.sentAt, ttl)
	case *coordinatorv1.KeepAliveResponse_Lost:
		s.endLocked(l, fmt.Errorf("%w: %s: %s: %s", ErrLost, l.describe(), r.Lost.GetReason(), r.Lost.GetMessage()))
	case *coordinatorv1.KeepAliveResponse_Failed:
		// STORE_UNAVAILABLE, DATA_LOSS_QUARANTINE…: this renewal failed; the
		// lease holds until its deadline. Try again.
		s.failed(l, r.Failed.GetReason().String()+": "+r.Failed.GetMessage())
	}
}

// failed schedules another try of a renewal that failed transiently.
func (s *renewer) failed(l *lease, why string) {
	if l.retry == nil {
		l.retry = renewalBackoff(l.ttl)
	}
	l.lastErr = why
	l.nextRenew = s.c.clock.Now().Add(l.retry.Next())
	if l.index >= 0 {
		heap.Fix(&s.queue, l.index)
	}
	s.poke()
}

// dropInflight counts the renewals in flight on a stream that ended as
// failed; they are retried at once on the next stream.
func (s *renewer) dropInflight(conn *kaConn, err error) {
	why := "the KeepAlive stream broke"
	if st, ok := status.FromError(err); ok && st.Code() != codes.OK {
		why += ": " + st.Code().String() + ": " + st.Message()
	} else if err != nil && !errors.Is(err, context.Canceled) {
		why += ": " + err.Error()
	}
	for _, l := range s.leases {
		if l.inflight == conn {
			l.inflight = nil
			l.lastErr = why
			l.nextRenew = s.c.clock.Now()
			heap.Fix(&s.queue, l.index)
		}
	}
}

// leaseHeap orders leases by due.
type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].due().Before(h[j].due()) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.index = len(*h)
	*h = append(*h, l)
}

func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	l.index = -1
	*h = old[:len(old)-1]
	return l
}

// sendOnStreamLocked queues the pending renewals as renew (a lease's) and
// renew_session (a session's) operations on the Client's operation stream.
// A renewal the stream refuses (it closed, or the coordinator turned out to
// lack it) stays pending, for the KeepAlive stream or a unary call.
func (s *renewer) sendOnStreamLocked() {
	kept := s.pending[:0]
	for _, l := range s.pending {
		if l.done || !l.wantSend {
			continue
		}
		op := renewOp(l)
		o, err := s.c.stream.submit(op, false, func(o *streamOp, res *coordinatorv1.StreamResult, err error) {
			s.streamAnswered(l, o, res, err)
		})
		if err != nil {
			kept = append(kept, l)
			continue
		}
		l.wantSend = false
		l.inflight = o
	}
	clear(s.pending[len(kept):])
	s.pending = kept
}

// renewOp is the stream operation that renews l.
func renewOp(l *lease) *coordinatorv1.StreamOperation {
	if l.kind == kindSession {
		return &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_RenewSession{
			RenewSession: &coordinatorv1.RenewSessionRequest{SessionId: l.name},
		}}
	}
	return &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Renew{Renew: &coordinatorv1.RenewRequest{
		Name: l.name, Holder: l.holder, Token: l.token, Ttl: durationpb.New(l.ttl),
	}}}
}

// streamAnswered applies the outcome of the renewal operation o of l.
func (s *renewer) streamAnswered(l *lease, o *streamOp, res *coordinatorv1.StreamResult, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.done || l.inflight != o {
		return
	}
	l.inflight = nil
	if err == nil {
		err = resultError(res)
	}
	var ttl *durationpb.Duration
	if err == nil {
		switch {
		case l.kind == kindSession && res.GetRenewSession().GetSession() != nil:
			ttl = res.GetRenewSession().GetSession().GetTtl()
		case l.kind != kindSession && res.GetRenew().GetLease() != nil:
			ttl = res.GetRenew().GetLease().GetTtl()
		default:
			err = unexpected(res, "renew")
		}
	}
	s.answeredLocked(l, o.sent, ttl, err)
}

// unaryRenewal marks a session renewal in flight as a unary RenewSession.
type unaryRenewal struct{}

// renewSessionsUnaryLocked renews the pending sessions with unary
// RenewSession calls (WithUnaryCalls, or a coordinator without the
// operation stream: KeepAlive renews leases, not sessions), one goroutine a
// renewal, each bounded by the session's deadline.
func (s *renewer) renewSessionsUnaryLocked(ctx context.Context) {
	kept := s.pending[:0]
	for _, l := range s.pending {
		if l.done || !l.wantSend {
			continue
		}
		if l.kind != kindSession {
			kept = append(kept, l)
			continue
		}
		mark := &unaryRenewal{}
		l.wantSend, l.inflight = false, mark
		sent, until := s.c.clock.Now(), s.c.clock.Until(l.deadline)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			rctx, cancel := context.WithTimeout(ctx, until)
			resp, err := s.c.api.RenewSession(rctx, &coordinatorv1.RenewSessionRequest{SessionId: l.name})
			cancel()
			if ctx.Err() != nil {
				return // the scheduler stopped: the Client closes, or nothing is held
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if l.done || l.inflight != mark {
				return
			}
			l.inflight = nil
			s.answeredLocked(l, sent, resp.GetSession().GetTtl(), err)
		}()
	}
	clear(s.pending[len(kept):])
	s.pending = kept
}

// answeredLocked applies the outcome of a renewal of l sent at sent: the
// TTL granted, or the error.
func (s *renewer) answeredLocked(l *lease, sent time.Time, ttl *durationpb.Duration, err error) {
	var broke *streamBrokeError
	switch {
	case errors.As(err, &broke) || errors.Is(err, errUseUnary):
		// Retried at once: on the next stream, over KeepAlive or unary.
		l.lastErr = err.Error()
		l.nextRenew = s.c.clock.Now()
		heap.Fix(&s.queue, l.index)
		s.poke()
	case err != nil:
		st := status.Convert(err)
		if reason := ErrorReason(err); endsLease(reason) {
			s.endLocked(l, fmt.Errorf("%w: %s: %s: %s", ErrLost, l.describe(), reason, st.Message()))
		} else {
			// STORE_UNAVAILABLE, DATA_LOSS_QUARANTINE, the stream could not
			// be opened…: this renewal failed; the lease holds until its
			// deadline. Try again.
			s.failed(l, st.Code().String()+": "+st.Message())
		}
	default:
		s.renewedLocked(l, sent, durationOr(ttl, l.ttl))
	}
}
