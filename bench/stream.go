package main

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// opStream carries the operations of every worker over one operation
// stream, as a client library would: workers queue operations, one sender
// packs all that are queued into one StreamRequest, one receiver hands each
// result to its operation by id.
type opStream struct {
	stream grpc.BidiStreamingClient[coordinatorv1.StreamRequest, coordinatorv1.StreamResponse]
	cancel context.CancelFunc
	ops    chan *coordinatorv1.StreamOperation
	nextID atomic.Uint64

	mu      sync.Mutex
	waiting map[uint64]chan *coordinatorv1.StreamResult
	err     error // the stream's end, once it ended
	done    chan struct{}
	wg      sync.WaitGroup
}

// maxStreamOps is the most operations one StreamRequest may carry.
const maxStreamOps = 1000

func openStream(client coordinatorv1.CoordinatorClient) (*opStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := client.Stream(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &opStream{
		stream: stream, cancel: cancel,
		ops:     make(chan *coordinatorv1.StreamOperation, maxStreamOps),
		waiting: map[uint64]chan *coordinatorv1.StreamResult{},
		done:    make(chan struct{}),
	}
	s.wg.Go(s.send)
	s.wg.Go(s.receive)
	return s, nil
}

func (s *opStream) send() {
	for {
		var op *coordinatorv1.StreamOperation
		select {
		case op = <-s.ops:
		case <-s.done:
			return
		}
		req := &coordinatorv1.StreamRequest{Operations: []*coordinatorv1.StreamOperation{op}}
	more:
		for len(req.Operations) < maxStreamOps {
			select {
			case op := <-s.ops:
				req.Operations = append(req.Operations, op)
			default:
				break more
			}
		}
		if err := s.stream.Send(req); err != nil {
			// The receiver sees why the stream ended.
			return
		}
	}
}

func (s *opStream) receive() {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.mu.Lock()
			s.err = err
			close(s.done)
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		for _, r := range resp.GetResults() {
			if ch, ok := s.waiting[r.GetId()]; ok {
				delete(s.waiting, r.GetId())
				ch <- r
			}
		}
		s.mu.Unlock()
	}
}

// do runs one operation and returns its result, or the stream's end.
func (s *opStream) do(ctx context.Context, op *coordinatorv1.StreamOperation) (*coordinatorv1.StreamResult, error) {
	op.Id = s.nextID.Add(1)
	ch := make(chan *coordinatorv1.StreamResult, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, err
	}
	s.waiting[op.GetId()] = ch
	s.mu.Unlock()
	select {
	case s.ops <- op:
	case <-s.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-ch:
		if err := resultError(r); err != nil {
			return nil, err
		}
		return r, nil
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return nil, s.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// resultError is the error of a failed operation. The field is read by
// name, so that this compiles against gen/ with or without it.
func resultError(r *coordinatorv1.StreamResult) error {
	m := r.ProtoReflect()
	fd := m.Descriptor().Fields().ByName("error")
	if fd == nil || !m.Has(fd) {
		return nil
	}
	if st, ok := m.Get(fd).Message().Interface().(*spb.Status); ok {
		return status.ErrorProto(st)
	}
	return errors.New("stream: an operation failed")
}

// close ends the stream (by its context: CloseSend may not run beside the
// sender's Send).
func (s *opStream) close() {
	s.cancel()
	s.wg.Wait()
}

// streamCycle is grpcCycle over the operation stream.
func streamCycle(s *opStream, names []string) func(ctx context.Context, worker, i int) error {
	return func(ctx context.Context, worker, _ int) error {
		name, holder := names[worker], holderName(worker)
		granted, token, err := streamAcquire(ctx, s, name, holder)
		if err != nil {
			return err
		}
		if !granted {
			return errNotAcquired
		}
		return streamRelease(ctx, s, name, holder, token)
	}
}

// streamTry is one contended attempt over the operation stream.
func streamTry(s *opStream, names []string) func(ctx context.Context, worker int) (bool, error) {
	return func(ctx context.Context, worker int) (bool, error) {
		name, holder := names[worker], holderName(worker)
		granted, token, err := streamAcquire(ctx, s, name, holder)
		if err != nil || !granted {
			return false, err
		}
		return true, streamRelease(ctx, s, name, holder, token)
	}
}

func streamAcquire(ctx context.Context, s *opStream, name, holder string) (bool, uint64, error) {
	r, err := s.do(ctx, &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Acquire{
		Acquire: &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: benchTTLpb},
	}})
	if err != nil {
		return false, 0, err
	}
	a := r.GetAcquire()
	if a == nil {
		return false, 0, errors.New("stream: an acquire answered with another result")
	}
	return a.GetAcquired(), a.GetLease().GetToken(), nil
}

func streamRelease(ctx context.Context, s *opStream, name, holder string, token uint64) error {
	_, err := s.do(ctx, &coordinatorv1.StreamOperation{Operation: &coordinatorv1.StreamOperation_Release{
		Release: &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: token},
	}})
	return err
}
