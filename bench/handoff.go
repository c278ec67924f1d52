package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
)

// handoffSuite measures how long a released name takes to reach the next
// waiter, with a short and with a long queue on one name: a handoff should
// cost the same whatever the queue's length.
func handoffSuite(env benchEnv) error {
	fmt.Printf("handoff: release sent -> next waiter's grant received, one name, %s per measurement\n", env.duration)
	for _, kind := range []string{"redis", "memory"} {
		c, err := env.startCoordinator(kind)
		if err != nil {
			return err
		}
		for _, waiters := range []int{10, 2000} {
			if err = handoffBench(c, kind, waiters, env.duration); err != nil {
				break
			}
		}
		c.stop()
		if err != nil {
			return err
		}
	}
	return nil
}

// handoffBench queues waiters callers on one name, then lets the lease go
// round for d: each caller that is granted releases at once and queues again
// at the tail, so the queue keeps its length.
func handoffBench(c *coordinator, kind string, waiters int, d time.Duration) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := fmt.Sprintf("bench/handoff/%d", waiters)
	ttl := durationpb.New(time.Minute)
	wait := durationpb.New(5 * time.Minute)
	first, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: "setup", Ttl: ttl})
	if err != nil || !first.GetAcquired() {
		return fmt.Errorf("handoff setup: %v, %w", first, err)
	}
	clients, err := c.clients(waiters)
	if err != nil {
		return err
	}

	var (
		released  atomic.Int64 // unix ns at which the last release was sent
		measuring atomic.Bool
		mu        sync.Mutex
		latencies []time.Duration
		firstErr  error
		wg        sync.WaitGroup
	)
	for w := range waiters {
		holder := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := clients[w].TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: ttl, Wait: wait})
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						cancel()
					}
					return
				}
				if !resp.GetAcquired() {
					continue
				}
				granted := time.Now()
				if measuring.Load() {
					mu.Lock()
					latencies = append(latencies, granted.Sub(time.Unix(0, released.Load())))
					mu.Unlock()
				}
				released.Store(time.Now().UnixNano())
				// Not cut off by ctx: a lease left held would stall the next
				// measurement's cleanup for a minute.
				_, _ = clients[w].Release(context.WithoutCancel(ctx), &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: resp.GetLease().GetToken()})
			}
		})
	}
	queued := func() (int, error) {
		desc, err := c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: name})
		return int(desc.GetWaiters()), err
	}
	setupDeadline := time.Now().Add(time.Minute)
	for n, err := queued(); n < waiters; n, err = queued() {
		if err != nil || time.Now().After(setupDeadline) {
			cancel()
			wg.Wait()
			return fmt.Errorf("handoff setup: %d of %d waiters queued: %w", n, waiters, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	measuring.Store(true)
	released.Store(time.Now().UnixNano())
	if _, err := c.client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: "setup", Token: first.GetLease().GetToken()}); err != nil {
		return err
	}
	time.Sleep(d)
	measuring.Store(false)
	cancel()
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("handoff with %d waiters: %w", waiters, firstErr)
	}
	fmt.Printf("  %-6s store, %5d waiters: %6d handoffs (%5.0f/s)  p50 %9s  p99 %9s\n", kind, waiters, len(latencies),
		float64(len(latencies))/d.Seconds(), percentile(latencies, 0.5).Round(time.Microsecond), percentile(latencies, 0.99).Round(time.Microsecond))
	return nil
}
