package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// result is one measured run of a closed-loop load.
type result struct {
	ops      int
	elapsed  time.Duration
	p50, p99 time.Duration
	errs     int
	firstErr error
}

func (r result) perSecond() float64 { return float64(r.ops) / r.elapsed.Seconds() }

func (r result) String() string {
	s := fmt.Sprintf("%9.0f/s  p50 %8s  p99 %8s", r.perSecond(), r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond))
	if r.errs > 0 {
		s += fmt.Sprintf("  (%d errors, first: %v)", r.errs, r.firstErr)
	}
	return s
}

// closedLoop runs op from workers goroutines back to back for d and measures
// every call's latency. Calls are not cut off at the end: each worker stops
// after the call that crosses d.
func closedLoop(ctx context.Context, workers int, d time.Duration, op func(ctx context.Context, worker, i int) error) result {
	var (
		mu        sync.Mutex
		latencies []time.Duration
		res       result
		wg        sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			var errs int
			var firstErr error
			for i := 0; time.Now().Before(end); i++ {
				t0 := time.Now()
				if err := op(ctx, w, i); err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			latencies = append(latencies, local...)
			res.errs += errs
			if res.firstErr == nil {
				res.firstErr = firstErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.ops = len(latencies)
	res.p50, res.p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
	return res
}

// contended is one measured run of a contended load.
type contended struct {
	grants, attempts int
	elapsed          time.Duration
	errs             int
	firstErr         error
}

func (c contended) grantsPerSecond() float64   { return float64(c.grants) / c.elapsed.Seconds() }
func (c contended) attemptsPerSecond() float64 { return float64(c.attempts) / c.elapsed.Seconds() }

// contendedLoop runs try from workers goroutines back to back for d: each
// try is one attempt, granted (and released again) or refused, and a
// refused worker tries again at once.
func contendedLoop(ctx context.Context, workers int, d time.Duration, try func(ctx context.Context, worker int) (bool, error)) contended {
	var (
		mu  sync.Mutex
		res contended
		wg  sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for w := range workers {
		wg.Go(func() {
			var local contended
			for time.Now().Before(end) {
				granted, err := try(ctx, w)
				local.attempts++
				switch {
				case err != nil:
					local.errs++
					if local.firstErr == nil {
						local.firstErr = err
					}
				case granted:
					local.grants++
				}
			}
			mu.Lock()
			res.grants += local.grants
			res.attempts += local.attempts
			res.errs += local.errs
			if res.firstErr == nil {
				res.firstErr = local.firstErr
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}
