package server

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// heldStream is an operation stream whose first Send waits until release is
// closed, so that a test knows what the sender holds meanwhile.
type heldStream struct {
	coordinatorv1.Coordinator_StreamServer
	holding chan struct{} // closed when the first Send waits
	release chan struct{}
	sent    chan *coordinatorv1.StreamResponse
	first   bool
}

func newHeldStream() *heldStream {
	return &heldStream{holding: make(chan struct{}), release: make(chan struct{}), sent: make(chan *coordinatorv1.StreamResponse, 1000), first: true}
}

func (s *heldStream) Send(resp *coordinatorv1.StreamResponse) error {
	if s.first {
		s.first = false
		close(s.holding)
		<-s.release
	}
	s.sent <- resp
	return nil
}

// sendWhileHeld pushes one result, waits until its Send is held, pushes
// the others, lets the sender go, and returns the messages it sent.
func sendWhileHeld(t *testing.T, results []*coordinatorv1.StreamResult) [][]uint64 {
	t.Helper()
	stream := newHeldStream()
	out := newStreamSender(stream)
	first := make(chan struct{})
	go func() {
		defer close(first)
		out.push(results[0]) // the sender until nothing is left
	}()
	select {
	case <-stream.holding:
	case <-time.After(10 * time.Second):
		t.Fatal("the first result was not sent")
	}
	for _, r := range results[1:] {
		out.push(r) // returns at once: the queue holds them all
	}
	close(stream.release)
	<-first
	close(stream.sent)
	var msgs [][]uint64
	for resp := range stream.sent {
		var ids []uint64
		for _, r := range resp.GetResults() {
			ids = append(ids, r.GetId())
		}
		msgs = append(msgs, ids)
	}
	return msgs
}

func ids(from, to uint64) []uint64 {
	var out []uint64
	for id := from; id <= to; id++ {
		out = append(out, id)
	}
	return out
}

// What is ready while the sender is busy goes out in one message when it
// is free: every result, in order, in as few messages as the size bound
// allows.
func TestStreamSenderSendsWhatIsReadyInOneMessage(t *testing.T) {
	ready := maxQueuedResults // what the queue holds while the first is sent
	results := make([]*coordinatorv1.StreamResult, 1+ready)
	for i := range results {
		results[i] = &coordinatorv1.StreamResult{Id: uint64(i + 1)}
	}
	got := sendWhileHeld(t, results)
	if want := [][]uint64{{1}, ids(2, uint64(1+ready))}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("messages %v; want %v", got, want)
	}
}

// A message stops growing past maxStreamResponseBytes: the results held
// back go in the next.
func TestStreamSenderBoundsAMessage(t *testing.T) {
	big := func(id uint64) *coordinatorv1.StreamResult {
		return &coordinatorv1.StreamResult{Id: id, Result: &coordinatorv1.StreamResult_Acquire{
			Acquire: &coordinatorv1.TryAcquireResponse{Holder: strings.Repeat("h", 100_000)},
		}}
	}
	size := proto.Size(big(2))
	perMessage := (maxStreamResponseBytes + size - 1) / size // the one that passes the bound goes in too
	n := 2*perMessage + 1
	if n > maxQueuedResults {
		t.Fatalf("%d results do not fit in the sender's queue", n)
	}
	results := make([]*coordinatorv1.StreamResult, 1+n)
	for i := range results {
		results[i] = big(uint64(i + 1))
	}
	got := sendWhileHeld(t, results)
	p := uint64(perMessage)
	want := [][]uint64{{1}, ids(2, 1+p), ids(2+p, 1+2*p), {2 + 2*p}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("messages of %d-byte results %v; want %v", size, got, want)
	}
}

// failingStream is an operation stream whose Sends wait until release is
// closed, then fail.
type failingStream struct {
	coordinatorv1.Coordinator_StreamServer
	holding chan struct{} // closed when the first Send waits
	release chan struct{}
	once    sync.Once
}

func (s *failingStream) Send(*coordinatorv1.StreamResponse) error {
	s.once.Do(func() { close(s.holding) })
	<-s.release
	return errors.New("the stream broke")
}

// While a Send is held, pushes return at once until maxQueuedResults
// results wait; the next waits for room, so that a client that reads
// nothing holds up the operations. When the Send fails, that push and
// those after return, their results dropped, and the failure is kept.
func TestStreamSenderHoldsUpPushesPastItsBoundUntilTheSendEnds(t *testing.T) {
	stream := &failingStream{holding: make(chan struct{}), release: make(chan struct{})}
	out := newStreamSender(stream)
	first := make(chan struct{})
	go func() {
		defer close(first)
		out.push(&coordinatorv1.StreamResult{Id: 1})
	}()
	<-stream.holding
	for i := range maxQueuedResults {
		out.push(&coordinatorv1.StreamResult{Id: uint64(i + 2)})
	}
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		out.push(&coordinatorv1.StreamResult{Id: maxQueuedResults + 2})
	}()
	select {
	case <-blocked:
		t.Fatal("a push past the bound returned while the Send was held")
	case <-time.After(100 * time.Millisecond):
	}
	close(stream.release)
	for _, done := range []chan struct{}{first, blocked} {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a push did not return after the Send failed")
		}
	}
	select {
	case <-out.failed:
	default:
		t.Fatal("failed is not closed after a failed Send")
	}
	if err := out.failure(); err == nil {
		t.Fatal("failure() is nil after a failed Send")
	}
	out.push(&coordinatorv1.StreamResult{Id: 1000}) // dropped, at once
}
