package server

import (
	"slices"
	"strings"
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
	go out.run()
	out.push(results[0])
	select {
	case <-stream.holding:
	case <-time.After(10 * time.Second):
		t.Fatal("the first result was not sent")
	}
	for _, r := range results[1:] {
		out.push(r) // never blocks: the channel holds them all
	}
	close(stream.release)
	close(out.results)
	<-out.done
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
	ready := cap(newStreamSender(nil).results) // what the channel holds while the first is sent
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
	if n > cap(newStreamSender(nil).results) {
		t.Fatalf("%d results do not fit in the sender's channel", n)
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
