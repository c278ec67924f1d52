package housekeeper_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/housekeeper"
	"github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
	"github.com/coordinator-dev/coordinator/internal/coordtest"
	"github.com/coordinator-dev/coordinator/internal/redistest"
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
	defer c.Close()
	rdb := redistest.Client(t)
	d := newDeckard(t, rdb)
	reg := prometheus.NewRegistry()
	r, err := housekeeper.New(rdb, housekeeper.CoordinatorLocker(c), housekeeper.Config{
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
	waitFor(t, 10*time.Second, "the first messages to time out", func() bool { return inFlight() == 0 })

	coord.Kill()
	cutOff := time.Now()
	// Past this, every lease granted or renewed before the cut-off has
	// expired on the server, and a successor could hold it.
	time.Sleep(time.Until(cutOff.Add(leaseTTL)))
	seed(10)
	time.Sleep(500 * time.Millisecond)
	if n := inFlight(); n != 50 {
		t.Fatalf("%d of 50 messages moved after the instance's leases ran out", 50-n)
	}
	if lost := metric(t, reg, "housekeeper_leases_lost_total", "task", "timeout"); lost < 1 {
		t.Fatalf("housekeeper_leases_lost_total{task=timeout} = %v; the leases were not given up", lost)
	}

	coord.Restart()
	waitFor(t, 15*time.Second, "work to resume with the coordinator back", func() bool { return inFlight() == 0 })
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
	r, err := housekeeper.New(rdb, pausedLocker{housekeepertest.NewLocker()}, housekeeper.Config{
		Prefix: d.Prefix, UnlockInterval: time.Hour, TimeoutInterval: 20 * time.Millisecond,
		Registerer: reg, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_ = r.Run(ctx)
	if n := len(d.Snapshot(t, rdb, "q")[housekeepertest.Tmp]); n != 1 {
		t.Fatal("a batch ran on a lease past its deadline")
	}
	if lost := metric(t, reg, "housekeeper_leases_lost_total", "task", "timeout"); lost < 1 {
		t.Fatalf("housekeeper_leases_lost_total{task=timeout} = %v", lost)
	}
}
