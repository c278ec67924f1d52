package housekeeper_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	"github.com/coordinator-dev/coordinator/housekeeper"
	"github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

// TestCutOffInstanceStopsBeforeItsLeaseExpires runs a housekeeper on real
// coordinator leases, then takes the coordinator away: the instance must stop
// working its queues before its leases could have expired on the server (so
// a successor elsewhere could never overlap with it), and resume once the
// coordinator is back.
func TestCutOffInstanceStopsBeforeItsLeaseExpires(t *testing.T) {
	const leaseTTL = time.Second
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	c, err := client.New(coord.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	reg := prometheus.NewRegistry()
	locker := &countingLocker{Locker: housekeeper.CoordinatorLocker(c), tries: make(map[string]int)}
	r, err := housekeeper.New(rdb, locker, housekeeper.Config{
		Prefix: d.Prefix, UnlockInterval: 50 * time.Millisecond, TimeoutInterval: 50 * time.Millisecond,
		LeaseTTL: leaseTTL, Registerer: reg, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	seed := func(n int) {
		now := housekeepertest.NowMs(t, rdb)
		d.Seed(t, rdb, func(p redis.Pipeliner) {
			for q := range 5 {
				for i := range n {
					d.Put(context.Background(), p, fmt.Sprintf("q%d", q), housekeepertest.Tmp, fmt.Sprintf("m%d-%d", now, i), float64(now-1))
				}
			}
		})
	}
	inFlight := func() int {
		total := 0
		for q := range 5 {
			total += len(d.Snapshot(t, rdb, fmt.Sprintf("q%d", q))[housekeepertest.Tmp])
		}
		return total
	}

	seed(10)
	testwait.Until(t, 10*time.Second, "the first messages to time out", func() bool { return inFlight() == 0 })

	coord.Kill()
	cutOff := time.Now()
	// Past this, every lease granted or renewed before the cut-off has
	// expired on the server, and a successor could hold it. This waits for
	// a moment on the wall clock, not for an event: nothing to poll.
	time.Sleep(time.Until(cutOff.Add(leaseTTL)))
	seed(10)
	// Wait for the instance to go through its cycles at least twice more,
	// trying for every queue's lease, unless (wrongly) it moves messages.
	tried := locker.snapshot()
	testwait.Until(t, 10*time.Second, "two more cycles over every queue", func() bool {
		now := locker.snapshot()
		for q := range 5 {
			name := fmt.Sprintf("housekeeper/timeout/q%d", q)
			if now[name] < tried[name]+2 {
				return inFlight() != 50
			}
		}
		return true
	})
	if n := inFlight(); n != 50 {
		t.Fatalf("%d of 50 messages moved after the instance's leases ran out", 50-n)
	}
	if lost := metric(t, reg, "housekeeper_leases_lost_total", "task", "timeout"); lost < 1 {
		t.Fatalf("housekeeper_leases_lost_total{task=timeout} = %v; the leases were not given up", lost)
	}

	coord.Restart()
	testwait.Until(t, 15*time.Second, "work to resume with the coordinator back", func() bool { return inFlight() == 0 })
}

// countingLocker counts the TryLock calls of each name.
type countingLocker struct {
	housekeeper.Locker
	mu    sync.Mutex
	tries map[string]int
}

func (l *countingLocker) TryLock(ctx context.Context, name string, ttl time.Duration) (housekeeper.Lease, error) {
	l.mu.Lock()
	l.tries[name]++
	l.mu.Unlock()
	return l.Locker.TryLock(ctx, name, ttl)
}

func (l *countingLocker) snapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.tries)
}

// pastDeadline is a lease whose Done has not closed (the goroutine that
// would close it has not run yet) but whose local deadline has passed, as
// after a process pause.
type pastDeadline struct{ housekeeper.Lease }

func (pastDeadline) Deadline() time.Time { return time.Now().Add(-time.Millisecond) }

type pausedLocker struct{ inner housekeeper.Locker }

func (l pausedLocker) TryLock(ctx context.Context, name string, ttl time.Duration) (housekeeper.Lease, error) {
	lease, err := l.inner.TryLock(ctx, name, ttl)
	if err != nil {
		return nil, err
	}
	return pastDeadline{lease}, nil
}

// TestLeasePastItsDeadlineIsNotUsed: a lease whose local deadline passed is
// treated as lost before any batch, even if its Done channel has not closed
// yet.
func TestLeasePastItsDeadlineIsNotUsed(t *testing.T) {
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	now := housekeepertest.NowMs(t, rdb)
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		d.Put(context.Background(), p, "q", housekeepertest.Tmp, "m", float64(now-1))
	})
	reg := prometheus.NewRegistry()
	clock := clockwork.NewFakeClock()
	r, err := housekeeper.NewWithClock(rdb, pausedLocker{housekeepertest.NewLocker()}, housekeeper.Config{
		Prefix: d.Prefix, UnlockInterval: time.Hour, TimeoutInterval: time.Second,
		Registerer: reg, Logger: testLogger(t),
	}, clock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(ctx) })
	settle(t, clock, 2) // the first cycles, which get the lease and must not use it
	cancel()
	wg.Wait()
	if n := len(d.Snapshot(t, rdb, "q")[housekeepertest.Tmp]); n != 1 {
		t.Fatal("a batch ran on a lease past its deadline")
	}
	if lost := metric(t, reg, "housekeeper_leases_lost_total", "task", "timeout"); lost < 1 {
		t.Fatalf("housekeeper_leases_lost_total{task=timeout} = %v", lost)
	}
}
