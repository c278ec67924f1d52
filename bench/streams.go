package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

const (
	observers     = 2000
	leaderChanges = 100
)

// streamSuite measures the streaming calls: how fast a leader change reaches
// 2,000 observers.
func streamSuite(env benchEnv) error {
	fmt.Println("\n== streams: leader changes to 2,000 observers")
	for _, kind := range []string{"redis", "memory"} {
		c, err := env.startCoordinator(kind)
		if err != nil {
			return err
		}
		err = observeBench(c, kind)
		c.stop()
		if err != nil {
			return err
		}
	}
	return nil
}

// observeBench makes leaderChanges changes (elect, resign, elect, …) and
// times each from the call to the moment the last observer received it.
func observeBench(c *coordinator, kind string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const election = "bench/election"
	received := make([][]time.Time, leaderChanges+1) // [change][observer]; change 0 is the initial state
	for i := range received {
		received[i] = make([]time.Time, observers)
	}
	var counts [observers]atomic.Int32
	// pending[n] counts the observers yet to receive event n; all[n] is
	// closed when none is left, so that waiting costs no polling.
	var pending [leaderChanges + 1]atomic.Int32
	all := make([]chan struct{}, leaderChanges+1)
	for n := range all {
		pending[n].Store(observers)
		all[n] = make(chan struct{})
	}
	var wg sync.WaitGroup
	errs := make(chan error, observers)
	clients, err := c.clients(observers)
	if err != nil {
		return err
	}
	for o := range observers {
		stream, err := clients[o].Observe(ctx, &coordinatorv1.ObserveRequest{Election: election})
		if err != nil {
			return fmt.Errorf("observe: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := stream.Recv(); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				n := counts[o].Load()
				if int(n) < len(received) {
					received[n][o] = time.Now()
					if pending[n].Add(-1) == 0 {
						close(all[n])
					}
				}
				counts[o].Add(1)
			}
		}()
	}
	waitAll := func(n int32) error {
		timer := time.NewTimer(30 * time.Second)
		defer timer.Stop()
		select {
		case <-all[n-1]:
			return nil
		case err := <-errs:
			return err
		case <-timer.C:
			return fmt.Errorf("%d observers still waiting for event %d after 30s", pending[n-1].Load(), n)
		}
	}
	if err := waitAll(1); err != nil {
		return err
	}

	sent := make([]time.Time, leaderChanges+1)
	ttl := durationpb.New(time.Minute)
	var term uint64
	start := time.Now()
	for k := 1; k <= leaderChanges; k++ {
		sent[k] = time.Now()
		if k%2 == 1 {
			resp, err := c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: election, Candidate: "bench", Value: []byte("v"), Ttl: ttl})
			if err != nil || !resp.GetElected() {
				return fmt.Errorf("campaign: %v: %w", resp, err)
			}
			term = resp.GetLeader().GetTerm()
		} else if _, err := c.client.Resign(ctx, &coordinatorv1.ResignRequest{Election: election, Candidate: "bench", Term: term}); err != nil {
			return fmt.Errorf("resign: %w", err)
		}
		if err := waitAll(int32(k + 1)); err != nil {
			return err
		}
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()

	lastArrivals := make([]time.Duration, 0, leaderChanges)
	for k := 1; k <= leaderChanges; k++ {
		lastArrivals = append(lastArrivals, slices.MaxFunc(received[k], func(a, b time.Time) int { return a.Compare(b) }).Sub(sent[k]))
	}
	fmt.Printf("observe, %s store: %d observers, %d leader changes: %.0f notifications/s; change to last observer p50 %s p99 %s\n",
		kind, observers, leaderChanges, float64(observers*leaderChanges)/elapsed.Seconds(),
		percentile(lastArrivals, 0.5).Round(time.Microsecond), percentile(lastArrivals, 0.99).Round(time.Microsecond))
	return nil
}

// closedLoopN runs op(0..n-1) from workers goroutines and returns the first
// error.
func closedLoopN(n, workers int, op func(i int) error) error {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil {
					return
				}
				if err := op(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return nil
}
