package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/internal/redisurl"
)

// sessionsTTL is the session's TTL in the sessions suite: the SDK renews
// about every TTL/3, so a window of 10s sees two rounds.
const sessionsTTL = 15 * time.Second

// sessionsSuite measures what keeping leases alive costs Redis: one Go SDK
// Client holds n leases, all in its default session (the one way the SDK
// holds leases), for each n; Redis counts the commands (INFO commandstats,
// those inside scripts included) over -idle-window while nothing else
// happens. Redis must be the suite's alone, as under `make bench`.
func sessionsSuite(env benchEnv) error {
	rdb, err := redisurl.NewClient(env.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	c, err := env.startCoordinator("redis")
	if err != nil {
		return err
	}
	defer c.stop()
	ctx := context.Background()

	fmt.Printf("\n== sessions: Redis commands/s that keep n leases alive, one Go SDK Client, TTL %s, counted over %s\n", sessionsTTL, env.idleWindow)
	fmt.Printf("%-8s  %22s\n", "leases", "in one session /s")
	for _, n := range []int{1, 100, 10000} {
		attached, err := holdAndCount(ctx, env, rdb, c.addr, n)
		if err != nil {
			return err
		}
		fmt.Printf("%-8d  %22.1f\n", n, attached)
	}
	fmt.Println("   in one session: the session's renewals; a name's key is refreshed from the session once per half of")
	fmt.Println("   max(idle retention, 1h), one script a name, which a window this short does not see (bench/README.md)")
	return nil
}

// holdAndCount acquires n leases through a new Client, in its default
// session, waits a renewal period, and returns the Redis commands per
// second over the window; then it closes the Client.
func holdAndCount(ctx context.Context, env benchEnv, rdb redis.UniversalClient, addr string, n int) (float64, error) {
	c, err := client.New(addr, client.WithTTL(sessionsTTL), client.WithIdentity(fmt.Sprintf("bench-sessions-%d", n)))
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Close() }()
	run := time.Now().UnixNano()
	if err := closedLoopN(n, 64, func(i int) error {
		_, err := c.TryLock(ctx, fmt.Sprintf("bench/sessions/%d/%d", run, i))
		return err
	}); err != nil {
		return 0, err
	}
	// One renewal period, so that the acquisitions' commands are behind.
	time.Sleep(sessionsTTL / 3)
	before, err := commandStats(ctx, rdb)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(env.idleWindow)
	after, err := commandStats(ctx, rdb)
	if err != nil {
		return 0, err
	}
	return float64(commandsIn(commandsBetween(before, after))) / time.Since(start).Seconds(), nil
}
