package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// streamRecorder records the StreamRequest a Client sends, and can hold
// one of them back, so that a test knows what is queued meanwhile.
type streamRecorder struct {
	mu      sync.Mutex
	sizes   []int         // operations per message, in order
	hold    chan struct{} // the next message waits for it to close
	holding chan struct{} // closed when that message waits
}

func (r *streamRecorder) option() Option {
	return WithDialOptions(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != coordinatorv1.Coordinator_Stream_FullMethodName {
			return cs, err
		}
		return &recordedStream{ClientStream: cs, r: r}, nil
	}))
}

// holdNext makes the next message wait until the returned function is
// called; holding is closed when it waits.
func (r *streamRecorder) holdNext() (holding <-chan struct{}, release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hold, r.holding = make(chan struct{}), make(chan struct{})
	hold := r.hold
	return r.holding, func() { close(hold) }
}

// since returns the sizes of the messages sent after the first n.
func (r *streamRecorder) since(n int) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sizes[n:])
}

func (r *streamRecorder) sent() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sizes)
}

type recordedStream struct {
	grpc.ClientStream
	r *streamRecorder
}

func (s *recordedStream) SendMsg(m any) error {
	s.r.mu.Lock()
	s.r.sizes = append(s.r.sizes, len(m.(*coordinatorv1.StreamRequest).GetOperations()))
	hold, holding := s.r.hold, s.r.holding
	s.r.hold, s.r.holding = nil, nil
	s.r.mu.Unlock()
	if hold != nil {
		close(holding)
		<-hold
	}
	return s.ClientStream.SendMsg(m)
}

// queued is how many operations wait in c's stream queue.
func queued(c *Client) int {
	c.stream.mu.Lock()
	defer c.stream.mu.Unlock()
	return len(c.stream.queue)
}

// Many goroutines' operations through one Client go over one stream, and
// those that are queued together share a message: while one message is
// being written, the operations of 64 goroutines queue behind it, and all
// of them go out in the next message, for their acquires as for their
// releases; and 64 goroutines taking and releasing locks in a loop send
// exactly their operations, in fewer messages.
func TestConcurrentOperationsShareMessages(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "redis"))
	ctx := testCtx(t)
	var rec streamRecorder
	// A TTL long enough that no renewal joins the queue.
	c := dial(t, coord, rec.option())
	const goroutines = 64

	// run starts do(i) on goroutines+1 goroutines while a message is held
	// back, and checks that every operation but those in the held message
	// goes out in the next one.
	run := func(what string, do func(i int) error) {
		t.Helper()
		before := rec.sent()
		holding, release := rec.holdNext()
		release = sync.OnceFunc(release)
		defer release() // also when a check fails, so that the Client can close
		errs := make(chan error, goroutines+1)
		go func() { errs <- do(goroutines) }() // the one whose message is held
		select {
		case <-holding:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no message sent", what)
		}
		for i := range goroutines {
			go func() { errs <- do(i) }()
		}
		held := rec.since(before)[0]
		eventually(t, fmt.Sprintf("%s: %d operations queued behind the held message", what, goroutines+1-held),
			func() bool { return queued(c) == goroutines+1-held })
		release()
		for range goroutines + 1 {
			if err := <-errs; err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		if got, want := rec.since(before), []int{held, goroutines + 1 - held}; !slices.Equal(got, want) {
			t.Fatalf("%s: messages of %v operations; want %v, the queued ones together", what, got, want)
		}
	}

	leases := make([]*Lease, goroutines+1)
	run("acquires", func(i int) error {
		l, err := c.TryLock(ctx, fmt.Sprintf("shared/%d", i))
		leases[i] = l
		return err
	})
	run("releases", func(i int) error {
		_, err := leases[i].Release(ctx)
		return err
	})

	// And under load: rounds of a TryLock and a Release on every goroutine
	// go out as exactly their operations, in fewer messages.
	const rounds = 20
	before := rec.sent()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				l, err := c.TryLock(ctx, fmt.Sprintf("shared/%d/%d", g, i))
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	sizes := rec.since(before)
	ops := 0
	for _, n := range sizes {
		ops += n
	}
	t.Logf("%d operations in %d messages", ops, len(sizes))
	if ops != 2*goroutines*rounds || len(sizes) >= ops {
		t.Fatalf("%d operations in %d messages; want %d, in fewer messages", ops, len(sizes), 2*goroutines*rounds)
	}
	if got := startedStreams(t, coord, "Stream"); got != 1 {
		t.Fatalf("%d operation streams; want 1", got)
	}
}

// A coordinator restart breaks the stream under a waiting Lock: it waits
// again on the next stream, as the same holder, and gets the lock when it
// is released.
func TestLockWaitsAgainAfterTheStreamBreaks(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "redis"))
	ctx := testCtx(t)
	holderClient, waiterClient := dial(t, coord), dial(t, coord)
	held, err := holderClient.TryLock(ctx, "broken")
	if err != nil {
		t.Fatal(err)
	}
	waiters := func(n int) func() bool {
		return func() bool {
			d, err := holderClient.Describe(ctx, "broken")
			return err == nil && d.Waiters == n
		}
	}
	type result struct {
		lease *Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiterClient.Lock(ctx, "broken")
		got <- result{l, err}
	}()
	eventually(t, "the Lock waits", waiters(1))
	coord.Restart()
	eventually(t, "the Lock waits again after the restart", waiters(1))
	if _, err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Lock across a stream break: %v", r.err)
		}
		if r.lease.Token() <= held.Token() {
			t.Fatalf("token %d after %d", r.lease.Token(), held.Token())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the Lock was not granted after the release")
	}
}

// A Lock given up while the coordinator still queues it (the stream stays
// open) leaves the queue at once (a cancel operation); one granted before
// the cancel arrived is given up at once, not left to expire.
func TestAnAbandonedLockLeavesTheQueue(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	holderClient, waiterClient, third := dial(t, coord), dial(t, coord), dial(t, coord)
	held, err := holderClient.TryLock(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := waiterClient.Lock(lctx, "late")
		done <- err
	}()
	eventually(t, "the Lock waits", func() bool {
		d, err := holderClient.Describe(ctx, "late")
		return err == nil && d.Waiters == 1
	})
	cancel()
	if err := <-done; !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled Lock = %v; want not acquired, cancelled", err)
	}
	eventually(t, "the abandoned Lock left the queue while the name is held", func() bool {
		d, err := holderClient.Describe(ctx, "late")
		return err == nil && d.Waiters == 0
	})
	if _, err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The abandoned wait may be granted the lock; it is released at once.
	eventually(t, "the lock free for a third client", func() bool {
		l, err := third.TryLock(ctx, "late")
		if err == nil {
			_, _ = l.Release(ctx)
		}
		return err == nil
	})
}

// Proclaiming in a term that ended fails, and starts no new term.
func TestProclaimNeverStartsANewTerm(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	c := dial(t, coord)
	e, err := c.Campaign(ctx, "vacated", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.API().Resign(ctx, &coordinatorv1.ResignRequest{Election: "vacated", Candidate: e.Candidate(), Term: e.Term()}); err != nil {
		t.Fatal(err)
	}
	if err := e.Proclaim(ctx, []byte("v2")); !errors.Is(err, ErrLost) {
		t.Fatalf("Proclaim after the term ended = %v; want ErrLost", err)
	}
	if info, err := c.Leader(ctx, "vacated"); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader = %+v, %v; want none: a proclamation must not start a term", info, err)
	}
}

// A request that the operation stream cannot carry (a name that is not
// UTF-8 cannot be encoded; a campaign value too large for a message) is
// refused alone, InvalidArgument, and the stream goes on for the others.
func TestARequestTheStreamCannotCarryIsRefusedAlone(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	ctx := testCtx(t)
	c := dial(t, coord)
	if _, err := c.TryLock(ctx, "before"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "bad\xff"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("TryLock of a name that is not UTF-8 = %v; want InvalidArgument", err)
	}
	if _, err := c.Campaign(ctx, "big", make([]byte, maxStreamOpBytes)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Campaign with a value of %d bytes = %v; want InvalidArgument", maxStreamOpBytes, err)
	}
	if _, err := c.TryLock(ctx, "after"); err != nil {
		t.Fatal(err)
	}
	if got := startedStreams(t, coord, "Stream"); got != 1 {
		t.Errorf("%d operation streams; want the one, unbroken", got)
	}
}
