package storemodel_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/server/store/redisstore"
	"github.com/coordinator-dev/coordinator/server/store/storemodel"
)

// The Redis store against the model, on the test Redis (redistest). Redis
// keeps its own time, so the sequences either never let time pass (long
// TTLs, leases ended by release and close) or let it pass for real, in
// windows whose every end falls half-way between two Advances.

// redisFactory makes Redis stores, each under a key prefix of its own,
// whose keys are deleted when it is closed.
func redisFactory(t *testing.T) storemodel.Factory {
	o, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	o.ContextTimeoutEnabled = true
	client := redis.NewClient(o)
	t.Cleanup(func() { _ = client.Close() })
	return func(lockDelay time.Duration) (storemodel.Subject, error) {
		var b [6]byte
		_, _ = rand.Read(b[:])
		prefix := "cotest:model:" + hex.EncodeToString(b[:])
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := redisstore.New(ctx, client, redisstore.Options{KeyPrefix: prefix, NewStore: true, LockDelay: lockDelay,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return storemodel.Subject{}, err
		}
		return storemodel.Subject{
			Store: s, Now: time.Now, Slack: 250 * time.Millisecond, LazySessions: true,
			Close: func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
				deleteKeys(t, client, prefix)
			},
		}, nil
	}
}

func deleteKeys(t *testing.T, c *redis.Client, prefix string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := c.Del(ctx, iter.Val()).Err(); err != nil {
			t.Errorf("DEL %s: %v", iter.Val(), err)
		}
	}
	if err := iter.Err(); err != nil {
		t.Errorf("SCAN %s:*: %v", prefix, err)
	}
}

// EnvRedisOps, when set, makes the Redis checks run random sequences
// after their fixed seeds until that many operations ran (six sequences at
// a time), for a longer look than make test takes.
const EnvRedisOps = "COORDINATOR_MODEL_REDIS_OPS"

func redisOptions(t *testing.T, opts storemodel.Options) storemodel.Options {
	if v := os.Getenv(EnvRedisOps); v != "" {
		total, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvRedisOps, v, err)
		}
		opts.Total, opts.Parallel = total, 6
	}
	return opts
}

// TestRedisStore checks the Redis store against the model without time
// passing: every lease, waiter and session outlives the sequence.
func TestRedisStore(t *testing.T) {
	t.Parallel()
	opts := storemodel.Options{Ops: 150, ShrinkRuns: 300}
	for seed := range uint64(40) {
		opts.Seeds = append(opts.Seeds, seed)
	}
	t.Log(storemodel.Check(t, redisFactory(t), storemodel.LongTTLs, redisOptions(t, opts)))
}

// TestRedisStoreExpiry checks the Redis store against the model with time
// passing for real: expiries, lock delays, waiters' and sessions' ends,
// each half-way between two steps of a 400ms unit.
func TestRedisStoreExpiry(t *testing.T) {
	t.Parallel()
	const unit = 400 * time.Millisecond
	opts := storemodel.Options{Ops: 60, Seeds: []uint64{1, 2}, Window: unit, ShrinkRuns: 60}
	t.Log(storemodel.Check(t, redisFactory(t), storemodel.RealTime(unit), redisOptions(t, opts)))
}
