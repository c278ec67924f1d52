package client

import (
	"bytes"
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// EventKind says what changed in an election.
type EventKind int

// The kinds of LeaderEvent.
const (
	// Elected: a new leader, with a new term, took office.
	Elected EventKind = iota + 1
	// Proclaimed: the sitting leader published a new value.
	Proclaimed
	// Vacant: the election has no leader (it resigned or its term expired).
	Vacant
	// Holders: the name has a capacity above 1 (a semaphore or read-write
	// lock) and its grants changed; LeaderEvent.Holders is the whole set.
	Holders
)

// String is the kind's name: ELECTED, PROCLAIMED or VACANT.
func (k EventKind) String() string {
	switch k {
	case Elected:
		return "ELECTED"
	case Proclaimed:
		return "PROCLAIMED"
	case Vacant:
		return "VACANT"
	case Holders:
		return "HOLDERS"
	}
	return "UNKNOWN"
}

// LeaderEvent is a change of an election's leadership.
type LeaderEvent struct {
	Kind EventKind
	// Leader is the leader after the change; zero when Kind is Vacant or
	// Holders.
	Leader LeaderInfo
	// Holders, when Kind is Holders, are the semaphore's live grants in
	// token order (none when it fell free), and Capacity its capacity.
	Holders  []LeaseInfo
	Capacity int64
}

// Observe streams the changes of election's leadership. The first event is
// the current state (Elected with the sitting leader, or Vacant), then
// every change in order. On a name of capacity above 1 (a semaphore or
// read-write lock) every event is Holders, with the whole set of grants. A term always ends (Vacant) before the next begins
// (Elected), and the same state is never delivered twice in a row.
//
// Observe reconnects with backoff when the stream breaks (the coordinator
// restarted, or ended the stream because the consumer fell behind), and
// bridges the gap consistently: on reconnecting it compares the current
// state with the last one delivered, and delivers only what changed — a
// proclamation, or Vacant then Elected when the term changed — so events
// never arrive out of order, though changes made while disconnected
// (short terms) may be skipped.
//
// The channel is closed when ctx ends, when the Client is closed, or when
// the coordinator refuses the request (an invalid election name, a missing
// or wrong token; the error is logged). Receive from it until it is closed,
// or cancel ctx: a consumer that stops reading blocks the stream, whose
// coordinator then ends it.
func (c *Client) Observe(ctx context.Context, election string) <-chan LeaderEvent {
	ch := make(chan LeaderEvent)
	if !c.track() {
		close(ch)
		return ch
	}
	ctx, cancel := c.callCtx(ctx)
	go func() {
		defer c.wg.Done()
		defer close(ch)
		defer cancel()
		c.observe(ctx, election, ch)
	}()
	return ch
}

func (c *Client) observe(ctx context.Context, election string, ch chan<- LeaderEvent) {
	var last *LeaderEvent // last delivered
	b := newCallBackoff()
	deliver := func(ev LeaderEvent) bool {
		select {
		case ch <- ev:
			last = &ev
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		err := func() error {
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			st, err := c.api.Observe(sctx, &coordinatorv1.ObserveRequest{Election: election}, grpc.WaitForReady(true))
			if err != nil {
				return err
			}
			for {
				ev, err := st.Recv()
				if err != nil {
					return err
				}
				b.Reset()
				for _, out := range transition(last, ev.GetEvent()) {
					if !deliver(out) {
						return ctx.Err()
					}
				}
			}
		}()
		if ctx.Err() != nil {
			return
		}
		if permanent(err) {
			c.log.Error("coordinator: observing an election failed; giving up", "election", election, "err", err)
			return
		}
		c.log.Warn("coordinator: observe stream broke; reconnecting", "election", election, "err", err)
		sleep(ctx, retryIn(b, err))
	}
}

// permanent reports whether an Observe stream that ended with err must not
// be retried.
func permanent(err error) bool {
	if errors.Is(err, io.EOF) {
		return false
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.Unauthenticated, codes.PermissionDenied, codes.Unimplemented, codes.NotFound:
		return true
	}
	return false
}

// transition returns the events that take a consumer who last saw last
// (nil: nothing yet) to the state ev reports.
func transition(last *LeaderEvent, ev *coordinatorv1.LeaderEvent) []LeaderEvent {
	if ev.GetKind() == coordinatorv1.LeaderEvent_KIND_HOLDERS {
		cur := LeaderEvent{Kind: Holders, Capacity: int64(max(ev.GetCapacity(), 1))}
		for _, l := range ev.GetHolders() {
			cur.Holders = append(cur.Holders, leaseInfo(l))
		}
		if last != nil && last.Kind == Holders && sameHolders(last, &cur) {
			return nil
		}
		return []LeaderEvent{cur}
	}
	if last != nil && last.Kind == Holders {
		last = nil // a semaphore turned back into a lock: start over
	}
	if ev.GetKind() == coordinatorv1.LeaderEvent_KIND_VACANT || ev.GetLeader() == nil {
		if last != nil && last.Kind == Vacant {
			return nil
		}
		return []LeaderEvent{{Kind: Vacant}}
	}
	cur := leaderInfo(ev.GetLeader())
	switch {
	case last == nil || last.Kind == Vacant:
		return []LeaderEvent{{Kind: Elected, Leader: cur}}
	case last.Leader.Term != cur.Term:
		return []LeaderEvent{{Kind: Vacant}, {Kind: Elected, Leader: cur}}
	case !bytes.Equal(last.Leader.Value, cur.Value):
		return []LeaderEvent{{Kind: Proclaimed, Leader: cur}}
	}
	return nil // what was delivered last
}

func sameHolders(a, b *LeaderEvent) bool {
	if a.Capacity != b.Capacity || len(a.Holders) != len(b.Holders) {
		return false
	}
	for i := range a.Holders {
		if a.Holders[i].Token != b.Holders[i].Token || a.Holders[i].Holder != b.Holders[i].Holder {
			return false
		}
	}
	return true
}
