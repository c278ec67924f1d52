package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

func TestSemaphoreSharesEachAsALeaseOfItsOwn(t *testing.T) {
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		c := dial(t, coord)
		ctx := testCtx(t)
		sem := c.Semaphore("jobs/migrate", 3)
		a, err := sem.TryAcquire(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sem.TryAcquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if a.Weight() != 2 || b.Weight() != 1 || b.Token() <= a.Token() || a.Holder() == b.Holder() {
			t.Fatalf("shares %v and %v; want weights 2 and 1, increasing tokens, two holders", a, b)
		}
		if _, err := sem.TryAcquire(ctx, 1); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("a share past the capacity: %v; want ErrNotAcquired", err)
		}
		// b stays while a is released.
		if released, err := a.Release(ctx); err != nil || !released {
			t.Fatalf("Release = %t, %v; want released", released, err)
		}
		d, err := c.Describe(ctx, "jobs/migrate")
		if err != nil || len(d.Holders) != 1 || d.Holders[0].Token != b.Token() || d.Holders[0].Weight != 1 || d.Capacity != 3 || b.Err() != nil {
			t.Fatalf("Describe = %+v, %v; want b alone, capacity 3", d, err)
		}
		// Another capacity while held: FailedPrecondition CAPACITY_MISMATCH.
		_, err = c.Semaphore("jobs/migrate", 5).TryAcquire(ctx, 1)
		if status.Code(err) != codes.FailedPrecondition || ErrorReason(err) != "CAPACITY_MISMATCH" {
			t.Fatalf("another capacity: %v; want FailedPrecondition CAPACITY_MISMATCH", err)
		}
		if _, err := sem.TryAcquire(ctx, 4); err == nil {
			t.Fatal("a weight above the capacity was asked for")
		}
	})
}

// TestSemaphoreAcquireWaitsAndNeverOverGrants: workers of random weights
// share a capacity through Acquire; the weight held at once, counted where
// they act, never passes it, and every worker gets its turn.
func TestSemaphoreAcquireWaitsAndNeverOverGrants(t *testing.T) {
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		c := dial(t, coord)
		ctx := testCtx(t)
		const capacity, workers = 4, 12
		sem := c.Semaphore("pool", capacity)
		var held, most atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				n := int64(1 + w%capacity)
				l, err := sem.Acquire(ctx, n)
				if err != nil {
					t.Error(err)
					return
				}
				now := held.Add(n)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				if now > capacity {
					t.Errorf("%d held at once, capacity %d", now, capacity)
				}
				time.Sleep(20 * time.Millisecond)
				held.Add(-n)
				if _, err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if most.Load() < 2 {
			t.Errorf("at most %d held at once: the shares never overlapped", most.Load())
		}
	})
}

func TestRWMutexReadersShareAWriterWaitsItsTurn(t *testing.T) {
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		c := dial(t, coord)
		ctx := testCtx(t)
		rw := c.RWMutex("config")
		r1, err := rw.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := rw.TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rw.TryLock(ctx); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("TryLock beside readers: %v; want ErrNotAcquired", err)
		}
		writer := make(chan *Lease, 1)
		go func() {
			w, err := rw.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			writer <- w
		}()
		eventually(t, "the writer waits", func() bool {
			d, err := c.API().Describe(ctx, &coordinatorv1.DescribeRequest{Name: "config"})
			return err == nil && d.GetWaiters() == 1
		})
		if _, err := rw.TryRLock(ctx); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("a reader after a waiting writer: %v; want ErrNotAcquired", err)
		}
		for _, r := range []*Lease{r1, r2} {
			if _, err := r.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var w *Lease
		select {
		case w = <-writer:
		case <-time.After(20 * time.Second):
			t.Fatal("the writer was not granted after the readers left")
		}
		if w == nil {
			return
		}
		if w.Weight() != RWCapacity || w.Token() <= r2.Token() {
			t.Fatalf("writer %v; want weight %d and a token above the readers'", w, RWCapacity)
		}
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := rw.RLock(rctx); !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("RLock while written: %v; want ErrNotAcquired after the deadline", err)
		}
		if _, err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if r, err := rw.RLock(ctx); err != nil || r.Token() <= w.Token() {
			t.Fatalf("a reader after the writer: %v, %v", r, err)
		}
	})
}

func TestObserveReportsASemaphoresHolders(t *testing.T) {
	forEachStore(t, func(t *testing.T, coord *coordtest.Coordinator) {
		c := dial(t, coord)
		ctx := testCtx(t)
		sem := c.Semaphore("observed-pool", 4)
		a, err := sem.TryAcquire(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		events := c.Observe(ctx, "observed-pool")
		next := func(want int) LeaderEvent {
			t.Helper()
			select {
			case ev := <-events:
				if ev.Kind != Holders || len(ev.Holders) != want || ev.Capacity != 4 {
					t.Fatalf("event %+v; want Holders with %d of capacity 4", ev, want)
				}
				return ev
			case <-time.After(20 * time.Second):
				t.Fatal("no event")
				return LeaderEvent{}
			}
		}
		if ev := next(1); ev.Holders[0].Token != a.Token() || ev.Holders[0].Weight != 3 {
			t.Fatalf("initial %+v; want a of weight 3", ev)
		}
		b, err := sem.TryAcquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		next(2)
		if _, err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if ev := next(1); ev.Holders[0].Token != b.Token() {
			t.Fatalf("after a's release %+v; want b alone", ev)
		}
	})
}
