package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/housekeeper"
	"github.com/coordinator-dev/coordinator/internal/redisurl"
)

const (
	hkQueues   = 200
	hkMessages = 250 // per queue, all due, half with a saved score
)

// housekeeperSuite measures messages unlocked per second on 200 queues: by
// the batch script called directly in a loop (the floor), and by one and by
// three housekeeper instances taking a coordinator lease per queue.
func housekeeperSuite(env benchEnv) error {
	rdb, err := redisurl.NewClient(env.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	coord, err := env.startCoordinator("redis")
	if err != nil {
		return err
	}
	defer coord.stop()

	prefix := fmt.Sprintf("bench-deckard-%d", time.Now().UnixNano())
	queues, err := housekeeper.NewQueues(rdb, prefix)
	if err != nil {
		return err
	}
	total := hkQueues * hkMessages
	fmt.Printf("housekeeper unlock, %d queues x %d due messages (batches of %d)\n", hkQueues, hkMessages, housekeeper.DefaultBatchSize)

	if err := seedLocked(rdb, prefix); err != nil {
		return err
	}
	start := time.Now()
	for q := range hkQueues {
		for {
			n, err := queues.UnlockBatch(context.Background(), queueName(q), housekeeper.LockAck, 1, housekeeper.DefaultBatchSize)
			if err != nil {
				return err
			}
			if n < housekeeper.DefaultBatchSize {
				break
			}
		}
	}
	direct := float64(total) / time.Since(start).Seconds()
	fmt.Printf("  %-34s %9.0f msgs/s\n", "batch script direct, one loop", direct)

	for _, instances := range []int{1, 3} {
		if err := seedLocked(rdb, prefix); err != nil {
			return err
		}
		rate, err := runInstances(coord.addr, rdb, prefix, instances, total)
		if err != nil {
			return err
		}
		fmt.Printf("  %-34s %9.0f msgs/s  (%.2f of direct)\n", fmt.Sprintf("%d housekeeper instance(s)", instances), rate, rate/direct)
	}
	return nil
}

func queueName(q int) string { return fmt.Sprintf("queue-%03d", q) }

// seedLocked acks every message of every queue with a lock that is already
// due, as Deckard would, half of them with a saved score.
func seedLocked(rdb redis.UniversalClient, prefix string) error {
	ctx := context.Background()
	now := time.Now().UnixMilli() - 1000
	for q := range hkQueues {
		queue := queueName(q)
		lock := fmt.Sprintf("%s:queue:{%s}:lock_ack", prefix, queue)
		var members, scores []redis.Z
		for i := range hkMessages {
			id := fmt.Sprintf("m%d", i)
			members = append(members, redis.Z{Score: float64(now), Member: id})
			if i%2 == 0 {
				scores = append(scores, redis.Z{Score: float64(i) - 0.5, Member: id})
			}
		}
		if err := rdb.ZAdd(ctx, lock, members...).Err(); err != nil {
			return err
		}
		if err := rdb.ZAdd(ctx, lock+":score", scores...).Err(); err != nil {
			return err
		}
	}
	return nil
}

// runInstances runs housekeeper Runners, each with a coordinator client of
// its own, until every message is unlocked, and returns messages per second.
func runInstances(addr string, rdb redis.UniversalClient, prefix string, instances, total int) (float64, error) {
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var clients []*client.Client
	defer func() {
		cancel()
		wg.Wait()
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	start := time.Now()
	for i := range instances {
		c, err := client.New(addr, client.WithIdentity(fmt.Sprintf("bench-hk-%d", i)))
		if err != nil {
			return 0, err
		}
		clients = append(clients, c)
		r, err := housekeeper.New(rdb, housekeeper.CoordinatorLocker(c), housekeeper.Config{
			Prefix: prefix, UnlockInterval: 50 * time.Millisecond, TimeoutInterval: time.Hour,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg,
		})
		if err != nil {
			return 0, err
		}
		wg.Go(func() { _ = r.Run(ctx) })
	}
	// Progress is read from the Runners' own counters, so that watching
	// costs Redis nothing.
	unlocked := func() (float64, error) {
		families, err := reg.Gather()
		if err != nil {
			return 0, err
		}
		var n float64
		for _, f := range families {
			if f.GetName() == "housekeeper_messages_unlocked_total" {
				for _, m := range f.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n, nil
	}
	for {
		n, err := unlocked()
		if err != nil {
			return 0, err
		}
		if n >= float64(total) {
			return float64(total) / time.Since(start).Seconds(), nil
		}
		if time.Since(start) > time.Minute {
			return 0, fmt.Errorf("only %.0f of %d messages unlocked after a minute", n, total)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
