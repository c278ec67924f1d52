package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/internal/redisurl"
)

// soakConfig shapes the soak: how long it churns, and how fast names are
// forgotten, so that a few minutes cover several retention periods.
type soakConfig struct {
	duration  time.Duration
	retention time.Duration
	maxTTL    time.Duration
	sample    time.Duration
}

// soakSample is one reading of what must stay flat.
type soakSample struct {
	at         time.Duration
	redisKeys  int64
	redisBytes int64
	rss        float64
	goroutines float64
	cycles     int64
}

// soakSuite runs a coordinator process on the Redis store under churn for
// cfg.duration: random lock names used once, waiters on hot names,
// elections with observers, and clients that vanish mid-stream without
// releasing anything. It samples the coordinator's Redis keys and memory,
// and the coordinator process's RSS and goroutines; once the retention has
// passed, they must stay flat.
func soakSuite(env benchEnv, cfg soakConfig) error {
	fmt.Printf("\n== soak: %s of churn on the Redis store, idle names forgotten after %s, max TTL %s\n",
		cfg.duration, cfg.retention, cfg.maxTTL)
	// A coordinator child with its default caps, its metrics on (RSS and
	// goroutines are read there) and short TTLs and retention.
	coord, err := env.startCoordinatorWith(coordOpts{store: "redis", metrics: true, caps: true, env: []string{
		"COORDINATOR_MAX_TTL=" + cfg.maxTTL.String(),
		"COORDINATOR_IDLE_NAME_TTL=" + cfg.retention.String(),
	}})
	if err != nil {
		return err
	}
	defer coord.stop()
	prefix := coord.prefix
	rdb, err := redisurl.NewClient(env.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()

	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration)
	defer cancel()
	var cycles atomic.Int64
	var wg sync.WaitGroup
	churn := func(n int, f func(ctx context.Context, worker int)) {
		for w := range n {
			wg.Go(func() { f(ctx, w) })
		}
	}
	churn(8, func(ctx context.Context, _ int) { soakLockOnce(ctx, coord.addr, cfg, &cycles) })
	churn(2, func(ctx context.Context, w int) { soakWaiters(ctx, coord.addr, w, cfg, &cycles) })
	churn(2, func(ctx context.Context, w int) { soakElections(ctx, coord.addr, w, cfg, &cycles) })
	churn(2, func(ctx context.Context, _ int) { soakVanishingClients(ctx, coord.addr, cfg, &cycles) })

	var samples []soakSample
	started := time.Now()
	ticker := time.NewTicker(cfg.sample)
	defer ticker.Stop()
	fmt.Printf("%8s %10s %12s %12s %11s %10s\n", "t", "redis keys", "redis bytes", "coord RSS", "goroutines", "cycles")
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-ticker.C:
		}
		s, err := soakRead(rdb, prefix, coord.metricsURL)
		if err != nil {
			return fmt.Errorf("soak sample: %w", err)
		}
		s.at, s.cycles = time.Since(started).Round(time.Second), cycles.Load()
		samples = append(samples, s)
		fmt.Printf("%8s %10d %12d %10.1fMB %11.0f %10d\n", s.at, s.redisKeys, s.redisBytes, s.rss/1e6, s.goroutines, s.cycles)
	}
	wg.Wait()
	return soakVerdict(samples, cfg)
}

// soakVerdict compares the samples taken once a name's key may have
// outlived its last use by as much as it ever does (the longest TTL, the
// retention and a quarter of it more: redisstore/doc.go): the largest must
// not exceed the first by more than the slack that noise explains.
//
// Redis's keys and bytes are judged per cycle of churn in that window
// before each sample: a name's keys live for the window after its last use,
// so their count follows the churn rate, which moves by half on a shared
// machine within one run; a leak grows per cycle too. The raw figures are
// printed beside them.
func soakVerdict(samples []soakSample, cfg soakConfig) error {
	window := cfg.retention*5/4 + cfg.maxTTL
	var steady []soakSample
	var churn []float64 // cycles in the window before each steady sample
	for i, s := range samples {
		if s.at >= window {
			steady = append(steady, s)
			churn = append(churn, max(float64(s.cycles)-cyclesAt(samples[:i], s.at-window), 1))
		}
	}
	if len(steady) < 2 {
		fmt.Println("soak: too short to judge flatness; run it longer than the retention")
		return nil
	}
	first, peak := steady[0], steady[0]
	firstKeys, firstBytes := float64(first.redisKeys)/churn[0], float64(first.redisBytes)/churn[0]
	peakKeys, peakBytes := firstKeys, firstBytes
	for i, s := range steady[1:] {
		peak.redisKeys = max(peak.redisKeys, s.redisKeys)
		peak.redisBytes = max(peak.redisBytes, s.redisBytes)
		peak.rss = max(peak.rss, s.rss)
		peak.goroutines = max(peak.goroutines, s.goroutines)
		peakKeys = max(peakKeys, float64(s.redisKeys)/churn[i+1])
		peakBytes = max(peakBytes, float64(s.redisBytes)/churn[i+1])
	}
	growth := func(a, b float64) float64 { return b / max(a, 1e-9) }
	fmt.Printf("soak: after the retention, peak/first: redis keys %.2f, redis bytes %.2f, coordinator RSS %.2f, goroutines %.2f\n",
		growth(float64(first.redisKeys), float64(peak.redisKeys)), growth(float64(first.redisBytes), float64(peak.redisBytes)),
		growth(first.rss, peak.rss), growth(first.goroutines, peak.goroutines))
	fmt.Printf("soak: per cycle of churn in the %s before each sample (what is judged): redis keys %.2f, redis bytes %.2f\n",
		window, growth(firstKeys, peakKeys), growth(firstBytes, peakBytes))
	// The churn is random, so the steady state wobbles; growth without
	// bound would show as a ratio well above this after a few retentions.
	const slack = 1.5
	var errs []error
	for _, c := range []struct {
		what        string
		first, peak float64
	}{
		{"redis keys per cycle of churn", firstKeys, peakKeys},
		{"redis bytes per cycle of churn", firstBytes, peakBytes},
		{"coordinator RSS", first.rss, peak.rss},
		{"coordinator goroutines", first.goroutines, peak.goroutines},
	} {
		if growth(c.first, c.peak) > slack {
			errs = append(errs, fmt.Errorf("%s grew from %.1f to %.1f after the retention", c.what, c.first, c.peak))
		}
	}
	return errors.Join(errs...)
}

// cyclesAt is the cycle count at t, interpolated between the samples
// around it (zero at the start).
func cyclesAt(samples []soakSample, t time.Duration) float64 {
	var prevAt time.Duration
	var prev float64
	for _, s := range samples {
		if s.at >= t {
			if s.at == prevAt {
				return float64(s.cycles)
			}
			return prev + (float64(s.cycles)-prev)*float64(t-prevAt)/float64(s.at-prevAt)
		}
		prevAt, prev = s.at, float64(s.cycles)
	}
	return prev
}

// soakRead reads the coordinator's share of Redis (its keys under prefix and
// their memory) and the coordinator process's RSS and goroutines.
func soakRead(rdb redis.UniversalClient, prefix, metricsURL string) (soakSample, error) {
	var s soakSample
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		s.redisKeys++
		if n, err := rdb.MemoryUsage(ctx, iter.Val()).Result(); err == nil {
			s.redisBytes += n
		}
	}
	if err := iter.Err(); err != nil {
		return s, err
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		return s, err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			s.rss = v
		case "go_goroutines":
			s.goroutines = v
		}
	}
	return s, sc.Err()
}

// soakLockOnce locks names that are never used again, as a job-per-name
// workload does. (Leases left to expire come from soakVanishingClients: a
// live client would keep renewing them.)
func soakLockOnce(ctx context.Context, addr string, cfg soakConfig, cycles *atomic.Int64) {
	c, err := client.New(addr, client.WithTTL(cfg.maxTTL))
	if err != nil {
		return
	}
	defer closeClient(c)
	for ctx.Err() == nil {
		lease, err := c.TryLock(ctx, fmt.Sprintf("soak/job/%d", rand.Uint64()))
		if err != nil {
			continue
		}
		_, _ = lease.Release(ctx)
		cycles.Add(1)
	}
}

// soakWaiters queues workers on a few hot names, so waiters park and hand
// off all the time.
func soakWaiters(ctx context.Context, addr string, worker int, cfg soakConfig, cycles *atomic.Int64) {
	c, err := client.New(addr, client.WithTTL(cfg.maxTTL))
	if err != nil {
		return
	}
	defer closeClient(c)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			name := fmt.Sprintf("soak/hot/%d", (worker*16+i)%4)
			for ctx.Err() == nil {
				lease, err := c.Lock(ctx, name)
				if err != nil {
					continue
				}
				time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
				_, _ = lease.Release(ctx)
				cycles.Add(1)
			}
		})
	}
	wg.Wait()
}

// soakElections campaigns on rotating elections while observers come and
// go.
func soakElections(ctx context.Context, addr string, worker int, cfg soakConfig, cycles *atomic.Int64) {
	c, err := client.New(addr, client.WithTTL(cfg.maxTTL))
	if err != nil {
		return
	}
	defer closeClient(c)
	for round := 0; ctx.Err() == nil; round++ {
		election := fmt.Sprintf("soak/election/%d-%d", worker, round%50)
		octx, stop := context.WithTimeout(ctx, 2*time.Second)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() { drain(c.Observe(octx, election)) })
		}
		if l, err := c.Campaign(octx, election, []byte("soak")); err == nil {
			time.Sleep(100 * time.Millisecond)
			_, _ = l.Resign(ctx)
		}
		stop()
		wg.Wait()
		cycles.Add(1)
	}
}

// soakVanishingClients connects, takes leases, opens streams, and drops the
// connection without releasing anything, as a crashed worker does.
func soakVanishingClients(ctx context.Context, addr string, cfg soakConfig, cycles *atomic.Int64) {
	for ctx.Err() == nil {
		c, err := client.New(addr, client.WithTTL(cfg.maxTTL), client.WithCloseTimeout(0))
		if err != nil {
			return
		}
		cctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := range 4 {
			_, _ = c.TryLock(cctx, fmt.Sprintf("soak/vanish/%d", rand.Uint64()))
			wg.Go(func() { drain(c.Observe(cctx, fmt.Sprintf("soak/election/vanish-%d", i))) })
		}
		time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond)
		cancel()
		closeClient(c) // with no close timeout: nothing is released, leases expire
		wg.Wait()
		cycles.Add(1)
	}
}

// closeClient closes c when its worker is done.
func closeClient(c *client.Client) { _ = c.Close() }

// drain reads events until the channel closes.
func drain[T any](events <-chan T) {
	for range events { //nolint:revive // only the reading matters
	}
}
