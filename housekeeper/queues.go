package housekeeper

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// One script per batch kind; each file's header lists its KEYS, ARGV and
// reply. Script.Run sends EVALSHA and falls back to EVAL on NOSCRIPT.
// Every fenced script starts with fence.lua, prepended to it: the fencing
// check of KEYS[1] against ARGV[1], and Redis' time.
var (
	//go:embed scripts/fence.lua
	fenceSrc string
	//go:embed scripts/unlock.lua
	unlockSrc string
	//go:embed scripts/timeout.lua
	timeoutSrc string

	unlockScript  = redis.NewScript(fenceSrc + unlockSrc)
	timeoutScript = redis.NewScript(fenceSrc + timeoutSrc)
)

// ErrFenced is returned (wrapped) by a batch whose fencing token is below the
// highest token the queue has already seen for that task: the batch moved
// nothing, and the lease it was taken under is stale.
var ErrFenced = errors.New("housekeeper: fencing token is stale")

// LockType tells the two lock sets of a queue apart.
type LockType string

const (
	LockAck  LockType = "ack"  // <prefix>:queue:{Q}:lock_ack, unlocked with the saved score or now
	LockNack LockType = "nack" // <prefix>:queue:{Q}:lock_nack, unlocked with the saved score or 0
)

// task is one of the housekeeper's jobs; it names leases, fences and metrics.
type task string

const (
	taskUnlock  task = "unlock"
	taskTimeout task = "timeout"
)

// scanCount is the COUNT hint of discovery's SCAN calls.
const scanCount = 1000

// Queues runs the housekeeper's batches on the Deckard queues under one key
// prefix. It is safe for concurrent use.
type Queues struct {
	rdb redis.UniversalClient
	ks  keyspace
}

// NewQueues returns the queues under prefix (DefaultPrefix when empty) of
// rdb, which may be a *redis.Client, *redis.ClusterClient or *redis.Ring.
func NewQueues(rdb redis.UniversalClient, prefix string) (*Queues, error) {
	if rdb == nil {
		return nil, errors.New("housekeeper: nil Redis client")
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("housekeeper: prefix %q must not contain '{' or '}': it would change the keys' hash tag", prefix)
	}
	return &Queues{rdb: rdb, ks: keyspace{prefix: prefix}}, nil
}

// UnlockBatch moves up to limit messages of queue's lock set whose unlock
// time has passed (by Redis' clock) back to the active pool, with their saved
// score or else now (LockAck) or 0 (LockNack), in one atomic script. It
// returns how many it moved; fewer than limit means none due is left. A token
// below the highest one this queue's unlock fence has seen moves nothing and
// returns an error wrapping ErrFenced.
func (q *Queues) UnlockBatch(ctx context.Context, queue string, lock LockType, token uint64, limit int) (moved int, err error) {
	if err := checkBatch(queue, limit); err != nil {
		return 0, err
	}
	var set, scores kind
	var dflt string
	switch lock {
	case LockAck:
		set, scores, dflt = kindLockAck, kindLockAckScore, "now"
	case LockNack:
		set, scores, dflt = kindLockNack, kindLockNackScore, "0"
	default:
		return 0, fmt.Errorf("housekeeper: unknown lock type %q", lock)
	}
	keys := []string{q.ks.fence(queue, taskUnlock), q.ks.set(queue, set), q.ks.set(queue, scores), q.ks.set(queue, kindActive)}
	n, err := unlockScript.Run(ctx, q.rdb, keys, strconv.FormatUint(token, 10), limit, dflt).Int()
	return n, batchErr(err, taskUnlock, queue, token)
}

// TimeoutBatch moves up to limit in-flight messages of queue whose ack
// deadline has passed (by Redis' clock) back to the active pool with score 0,
// in one atomic script. Its reply and fencing are UnlockBatch's, with the
// queue's timeout fence.
func (q *Queues) TimeoutBatch(ctx context.Context, queue string, token uint64, limit int) (moved int, err error) {
	if err := checkBatch(queue, limit); err != nil {
		return 0, err
	}
	keys := []string{q.ks.fence(queue, taskTimeout), q.ks.set(queue, kindTmp), q.ks.set(queue, kindActive)}
	n, err := timeoutScript.Run(ctx, q.rdb, keys, strconv.FormatUint(token, 10), limit).Int()
	return n, batchErr(err, taskTimeout, queue, token)
}

func checkBatch(queue string, limit int) error {
	if err := checkQueue(queue); err != nil {
		return err
	}
	if limit < 1 {
		return fmt.Errorf("housekeeper: batch limit %d must be positive", limit)
	}
	return nil
}

func batchErr(err error, t task, queue string, token uint64) error {
	if err == nil {
		return nil
	}
	if highest, ok := strings.CutPrefix(err.Error(), "FENCED "); ok {
		return fmt.Errorf("%w: %s of queue %q with token %d, which has seen token %s", ErrFenced, t, queue, token, highest)
	}
	return fmt.Errorf("housekeeper: %s batch of queue %q: %w", t, queue, err)
}

// workSet is one set the housekeeper works: a queue's tmp (timeout task),
// lock_ack or lock_nack (unlock task).
type workSet struct {
	queue string
	kind  kind // kindTmp, kindLockAck or kindLockNack
}

func (w workSet) task() task {
	if w.kind == kindTmp {
		return taskTimeout
	}
	return taskUnlock
}

func (w workSet) String() string { return w.queue + kindSuffixes[w.kind] }

// discover returns every set the housekeeper works on, found by one SCAN of
// the prefix's queue keys that have a suffix. Keys that are not exactly a
// queue set are skipped.
func (q *Queues) discover(ctx context.Context) (map[workSet]struct{}, error) {
	found := make(map[workSet]struct{})
	err := q.scan(ctx, q.ks.pattern(":*"), func(key string) {
		if queue, k, ok := q.ks.parse(key); ok && isWorkKind(k) {
			found[workSet{queue, k}] = struct{}{}
		}
	})
	return found, err
}

// indexChunk is how many members one ZADD or ZREM of the index carries.
const indexChunk = 1000

// publish makes the index hold exactly found: the sets no longer found are
// removed, and the new ones added with sequence numbers above every earlier
// one's, so that readers can ask for what is new since the highest number
// they have seen.
func (q *Queues) publish(ctx context.Context, found map[workSet]struct{}) error {
	listed, err := q.rdb.ZRange(ctx, q.ks.index(), 0, -1).Result()
	if err != nil {
		return fmt.Errorf("housekeeper: read the set index: %w", err)
	}
	have := make(map[string]bool, len(listed))
	var gone []any
	for _, key := range listed {
		have[key] = true
		if queue, k, ok := q.ks.parse(key); !ok || !isWorkKind(k) {
			gone = append(gone, key)
		} else if _, ok := found[workSet{queue, k}]; !ok {
			gone = append(gone, key)
		}
	}
	var added []string
	for w := range found {
		if key := q.ks.set(w.queue, w.kind); !have[key] {
			added = append(added, key)
		}
	}
	for start := 0; start < len(gone); start += indexChunk {
		if err := q.rdb.ZRem(ctx, q.ks.index(), gone[start:min(start+indexChunk, len(gone))]...).Err(); err != nil {
			return fmt.Errorf("housekeeper: update the set index: %w", err)
		}
	}
	if len(added) == 0 {
		return nil
	}
	last, err := q.rdb.IncrBy(ctx, q.ks.indexSeq(), int64(len(added))).Result()
	if err != nil {
		return fmt.Errorf("housekeeper: number the new sets: %w", err)
	}
	seq := last - int64(len(added))
	for start := 0; start < len(added); start += indexChunk {
		chunk := added[start:min(start+indexChunk, len(added))]
		zs := make([]redis.Z, len(chunk))
		for i, key := range chunk {
			seq++
			zs[i] = redis.Z{Score: float64(seq), Member: key}
		}
		// NX: of two instances publishing at once, the first number stands.
		if err := q.rdb.ZAddNX(ctx, q.ks.index(), zs...).Err(); err != nil {
			return fmt.Errorf("housekeeper: update the set index: %w", err)
		}
	}
	return nil
}

// readIndex returns the sets published with a sequence number above after
// (all of them when after is 0) and the highest number read (after when
// none).
func (q *Queues) readIndex(ctx context.Context, after int64) (map[workSet]struct{}, int64, error) {
	zs, err := q.rdb.ZRangeByScoreWithScores(ctx, q.ks.index(), &redis.ZRangeBy{Min: "(" + strconv.FormatInt(after, 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, after, fmt.Errorf("housekeeper: read the set index: %w", err)
	}
	found := make(map[workSet]struct{}, len(zs))
	highest := after
	for _, z := range zs {
		highest = max(highest, int64(z.Score))
		key, _ := z.Member.(string)
		if queue, k, ok := q.ks.parse(key); ok && isWorkKind(k) {
			found[workSet{queue, k}] = struct{}{}
		}
	}
	return found, highest, nil
}

func isWorkKind(k kind) bool { return k == kindTmp || k == kindLockAck || k == kindLockNack }

// head is the earliest entry of a set, as a probe read it.
type head struct {
	empty bool
	id    string
	score float64 // due time, unix ms by Redis' clock
}

// probeChunk is how many sets one probe pipeline reads.
const probeChunk = 500

// heads reads the earliest entry of each set (ZRANGE 0 0 WITHSCORES: one
// command a set) and Redis' clock, in one pipeline per probeChunk sets.
// errs[i] is set's own failure (a key of another type, say), which leaves
// the other sets' heads good; err is a failure of the whole read.
func (q *Queues) heads(ctx context.Context, sets []workSet) (redisNow time.Time, out []head, errs []error, err error) {
	out, errs = make([]head, len(sets)), make([]error, len(sets))
	for start := 0; start < len(sets); start += probeChunk {
		chunk := sets[start:min(start+probeChunk, len(sets))]
		var clock *redis.TimeCmd
		cmds := make([]*redis.ZSliceCmd, len(chunk))
		_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if start == 0 {
				clock = p.Time(ctx)
			}
			for i, s := range chunk {
				cmds[i] = p.ZRangeWithScores(ctx, q.ks.set(s.queue, s.kind), 0, 0)
			}
			return nil
		})
		if clock != nil {
			if redisNow, err = clock.Result(); err != nil {
				return time.Time{}, nil, nil, fmt.Errorf("housekeeper: read %d sets: %w", len(sets), err)
			}
		}
		for i, c := range cmds {
			zs, err := c.Result()
			switch {
			case err != nil:
				errs[start+i] = fmt.Errorf("housekeeper: read set %s: %w", chunk[i], err)
			case len(zs) == 0:
				out[start+i] = head{empty: true}
			default:
				id, _ := zs[0].Member.(string)
				out[start+i] = head{id: id, score: zs[0].Score}
			}
		}
	}
	return redisNow, out, errs, nil
}

// batch runs one batch of w's task under token.
func (q *Queues) batch(ctx context.Context, w workSet, token uint64, limit int) (int, error) {
	switch w.kind {
	case kindTmp:
		return q.TimeoutBatch(ctx, w.queue, token, limit)
	case kindLockNack:
		return q.UnlockBatch(ctx, w.queue, LockNack, token, limit)
	default:
		return q.UnlockBatch(ctx, w.queue, LockAck, token, limit)
	}
}

// scan calls fn for every key matching match, on every master of a Cluster
// or shard of a Ring. A key may be reported more than once.
func (q *Queues) scan(ctx context.Context, match string, fn func(key string)) error {
	var mu sync.Mutex
	one := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, match, scanCount).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			fn(it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	each := func(ctx context.Context, c *redis.Client) error { return one(ctx, c) }
	var err error
	switch c := q.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, each)
	case *redis.Ring:
		err = c.ForEachShard(ctx, each)
	default:
		err = one(ctx, c)
	}
	if err != nil {
		return fmt.Errorf("housekeeper: scan %q: %w", match, err)
	}
	return nil
}

// queueSizes is the number of messages in each of a queue's sets.
type queueSizes struct {
	active, tmp, lockAck, lockNack int64
}

// sizesChunk is how many queues one pipeline measures.
const sizesChunk = 250

// sizes measures every queue under the prefix: one SCAN of the prefix's
// queue keys, then ZCARD of each queue's four sets, pipelined.
func (q *Queues) sizes(ctx context.Context) (map[string]queueSizes, error) {
	seen := make(map[string]struct{})
	if err := q.scan(ctx, q.ks.pattern("*"), func(key string) {
		if queue, _, ok := q.ks.parse(key); ok {
			seen[queue] = struct{}{}
		}
	}); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(seen))
	for queue := range seen {
		names = append(names, queue)
	}
	return q.measure(ctx, names)
}

// total is the number of messages in the queue, whatever their state.
func (s queueSizes) total() int64 { return s.active + s.tmp + s.lockAck + s.lockNack }

// measure reads the size of each of names' four message sets: ZCARDs,
// pipelined sizesChunk queues at a time.
func (q *Queues) measure(ctx context.Context, names []string) (map[string]queueSizes, error) {
	sets := [...]kind{kindActive, kindTmp, kindLockAck, kindLockNack}
	out := make(map[string]queueSizes, len(names))
	for start := 0; start < len(names); start += sizesChunk {
		chunk := names[start:min(start+sizesChunk, len(names))]
		cmds := make([]*redis.IntCmd, 0, len(chunk)*len(sets))
		if _, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, queue := range chunk {
				for _, k := range sets {
					cmds = append(cmds, p.ZCard(ctx, q.ks.set(queue, k)))
				}
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("housekeeper: measure queues: %w", err)
		}
		for i, queue := range chunk {
			c := cmds[i*len(sets):]
			out[queue] = queueSizes{active: c[0].Val(), tmp: c[1].Val(), lockAck: c[2].Val(), lockNack: c[3].Val()}
		}
	}
	return out, nil
}
