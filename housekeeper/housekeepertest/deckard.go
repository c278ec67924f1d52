package housekeepertest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Set names one of the sorted sets Deckard keeps per queue, by its key suffix.
type Set string

const (
	Active        Set = ""                 // <prefix>:queue:{Q}: id -> priority
	Tmp           Set = ":tmp"             // pulled, not acked: id -> ack deadline (unix ms)
	LockAck       Set = ":lock_ack"        // acked with a lock: id -> unlock time (unix ms)
	LockNack      Set = ":lock_nack"       // nacked with a lock: id -> unlock time (unix ms)
	LockAckScore  Set = ":lock_ack:score"  // id -> score to restore on unlock
	LockNackScore Set = ":lock_nack:score" // id -> score to restore on unlock
)

// Sets are all six sets of a queue.
var Sets = []Set{Active, Tmp, LockAck, LockNack, LockAckScore, LockNackScore}

// String names the set as the queue gauges do ("active" for Active).
func (s Set) String() string {
	if s == Active {
		return "active"
	}
	return string(s[1:])
}

// Deckard lays out queues under Prefix exactly as Deckard does (takenet/deckard,
// internal/queue/cache/redis_cache.go). It is written independently of the
// housekeeper's own key code, so that tests check one against the other.
type Deckard struct {
	Prefix string
}

// Key is the key of queue's set.
func (d Deckard) Key(queue string, s Set) string {
	return d.Prefix + ":queue:{" + queue + "}" + string(s)
}

// Put adds id to queue's set with score: ZADD, as Deckard writes it.
func (d Deckard) Put(ctx context.Context, c redis.Cmdable, queue string, s Set, id string, score float64) {
	c.ZAdd(ctx, d.Key(queue, s), redis.Z{Score: score, Member: id})
}

// Seed runs fn's writes in one pipeline, failing t on any error.
func (d Deckard) Seed(t testing.TB, c redis.Cmdable, fn func(p redis.Pipeliner)) {
	t.Helper()
	if _, err := c.Pipelined(t.Context(), func(p redis.Pipeliner) error {
		fn(p)
		return nil
	}); err != nil {
		t.Fatalf("seed Deckard queues: %v", err)
	}
}

// Snapshot is the content of a queue's six sets: set -> id -> score.
type Snapshot map[Set]map[string]float64

// Snapshot reads queue's six sets.
func (d Deckard) Snapshot(t testing.TB, c redis.Cmdable, queue string) Snapshot {
	t.Helper()
	ctx := t.Context()
	cmds := make(map[Set]*redis.ZSliceCmd, len(Sets))
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, s := range Sets {
			cmds[s] = p.ZRangeWithScores(ctx, d.Key(queue, s), 0, -1)
		}
		return nil
	}); err != nil {
		t.Fatalf("snapshot queue %q: %v", queue, err)
	}
	out := make(Snapshot, len(Sets))
	for s, cmd := range cmds {
		m := make(map[string]float64)
		for _, z := range cmd.Val() {
			m[z.Member.(string)] = z.Score
		}
		out[s] = m
	}
	return out
}

// NowMs is Redis' clock, unix ms: the clock Deckard's times are read against.
func NowMs(t testing.TB, c redis.Cmdable) int64 {
	t.Helper()
	now, err := c.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("redis TIME: %v", err)
	}
	return now.UnixMilli()
}
