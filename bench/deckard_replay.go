package main

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// deckardReplay issues the storage queries and cache scripts that one
// Deckard replica's own housekeeper issues (takenet/deckard,
// internal/queue/queue_housekeeper.go and internal/cmd/deckard/main.go), on
// its schedule: each task waits its delay (1 s) after it ran, and TTL, max
// elements and recovery share one mutex. It is the "before" of the
// housekeeper-storage suite, on the same data and storage as the
// housekeeper, so that the two are measured side by side.
type deckardReplay struct {
	messages, configs *mongo.Collection
	rdb               *redis.Client
	prefix            string
	mu                sync.Mutex // Deckard's backgroundTaskLocker
}

// The Redis side of Deckard's housekeeping, written again from its
// behaviour (redis_cache_scripts.go): removeElementScript ZREMs the ids
// from every key; addElementsScript adds (score, id) pairs to KEYS[1] unless
// an id is in one of KEYS.
var (
	replayRemove = redis.NewScript(`
local total = 0
for _, key in ipairs(KEYS) do
  total = total + redis.call('ZREM', key, unpack(ARGV))
end
return total`)
	replayAdd = redis.NewScript(`
local add = {}
for i = 1, #ARGV, 2 do
  local present = false
  for _, key in ipairs(KEYS) do
    if redis.call('ZSCORE', key, ARGV[i + 1]) then present = true break end
  end
  if not present then add[#add + 1] = ARGV[i]; add[#add + 1] = ARGV[i + 1] end
end
if #add > 0 then redis.call('ZADD', KEYS[1], unpack(add)) end
return #add / 2`)
)

func (d *deckardReplay) key(name string) string { return d.prefix + ":{" + name + "}" }

func (d *deckardReplay) queueKeys(queue string) []string {
	base := d.prefix + ":queue:{" + queue + "}"
	return []string{base, base + ":tmp", base + ":lock_ack", base + ":lock_nack", base + ":lock_ack:score", base + ":lock_nack:score"}
}

// run runs the tasks on Deckard's schedule until ctx ends.
func (d *deckardReplay) run(ctx context.Context, tasks ...func(context.Context)) {
	var wg sync.WaitGroup
	for _, task := range tasks {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				d.mu.Lock()
				task(ctx)
				d.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

func (d *deckardReplay) recovering(ctx context.Context) bool {
	v, _ := d.rdb.Get(ctx, d.key("recovery")).Result()
	return v == "true"
}

// remove is Queue.Remove: storage in chunks of 100 ids, then the cache in
// chunks of 4,000.
func (d *deckardReplay) remove(ctx context.Context, queue string, ids []string) {
	for i := 0; i < len(ids); i += 100 {
		chunk := ids[i:min(i+100, len(ids))]
		if _, err := d.messages.DeleteMany(ctx, bson.M{"queue": queue, "id": bson.M{"$in": chunk}}); err != nil {
			return
		}
	}
	for i := 0; i < len(ids); i += 4000 {
		chunk := ids[i:min(i+4000, len(ids))]
		args := make([]any, len(chunk))
		for j, id := range chunk {
			args[j] = id
		}
		_ = replayRemove.Run(ctx, d.rdb, d.queueKeys(queue), args...).Err()
	}
}

type replayDoc struct {
	InternalID bson.ObjectID `bson:"_id"`
	ID         string        `bson:"id"`
	Queue      string        `bson:"queue"`
	Score      float64       `bson:"score"`
}

func (d *deckardReplay) find(ctx context.Context, filter any, opts *options.FindOptionsBuilder) []replayDoc {
	cur, err := d.messages.Find(ctx, filter, opts.SetBatchSize(10_000)) // Deckard asks for batches of up to 10,000: no getMore for these reads
	if err != nil {
		return nil
	}
	var out []replayDoc
	if err := cur.All(ctx, &out); err != nil {
		return nil
	}
	return out
}

// ttl is RemoveTTLMessages.
func (d *deckardReplay) ttl(ctx context.Context) {
	if d.recovering(ctx) {
		return
	}
	docs := d.find(ctx, bson.M{"expiry_date": bson.M{"$lte": time.Now()}},
		options.Find().SetSort(bson.D{{Key: "expiry_date", Value: 1}}).SetLimit(10000).SetProjection(bson.M{"id": 1, "queue": 1, "_id": 0}))
	byQueue := map[string][]string{}
	for _, m := range docs {
		byQueue[m.Queue] = append(byQueue[m.Queue], m.ID)
	}
	for queue, ids := range byQueue {
		if ctx.Err() != nil {
			return
		}
		d.remove(ctx, queue, ids)
	}
}

// maxElements is RemoveExceedingMessages.
func (d *deckardReplay) maxElements(ctx context.Context) {
	if d.recovering(ctx) {
		return
	}
	cur, err := d.configs.Find(ctx, bson.M{})
	if err != nil {
		return
	}
	var configs []struct {
		Queue string `bson:"_id"`
		Max   int64  `bson:"max_elements"`
	}
	if cur.All(ctx, &configs) != nil {
		return
	}
	for _, c := range configs {
		if c.Max <= 0 || ctx.Err() != nil {
			continue
		}
		total, err := d.messages.CountDocuments(ctx, bson.M{"queue": c.Queue})
		if err != nil || total <= c.Max {
			continue
		}
		docs := d.find(ctx, bson.M{"queue": c.Queue},
			options.Find().SetSort(bson.D{{Key: "expiry_date", Value: 1}}).SetLimit(total-c.Max).SetProjection(bson.M{"id": 1, "_id": 0}))
		ids := make([]string, len(docs))
		for i, m := range docs {
			ids[i] = m.ID
		}
		d.remove(ctx, c.Queue, ids)
	}
}

// recovery is RecoveryMessagesPool (with tryToStartRecovery); it reports
// whether the recovery is finished.
func (d *deckardReplay) recovery(ctx context.Context) bool {
	breakpoint, _ := d.rdb.Get(ctx, d.key("recovery_storage_breakpoint")).Result()
	if breakpoint == "recovery_finished" {
		return true
	}
	if breakpoint == "" && !d.recovering(ctx) {
		d.rdb.Set(ctx, d.key("recovery"), "true", 0)
		last := d.find(ctx, bson.M{}, options.Find().SetSort(bson.D{{Key: "_id", Value: -1}}).SetLimit(1).SetProjection(bson.M{"_id": 1}))
		if len(last) == 0 {
			d.rdb.Set(ctx, d.key("recovery_storage_breakpoint"), "recovery_finished", 0)
			d.rdb.Set(ctx, d.key("recovery"), "false", 0)
			return true
		}
		d.rdb.Set(ctx, d.key("recovery_breakpoint"), last[0].InternalID.Hex(), 0)
	}
	upTo, _ := d.rdb.Get(ctx, d.key("recovery_breakpoint")).Result()
	idFilter := bson.M{}
	if breakpoint != "" {
		gt, _ := bson.ObjectIDFromHex(breakpoint)
		idFilter["$gt"] = gt
	}
	if upTo != "" {
		lte, _ := bson.ObjectIDFromHex(upTo)
		idFilter["$lte"] = lte
	}
	filter := bson.M{}
	if len(idFilter) > 0 {
		filter["_id"] = idFilter
	}
	docs := d.find(ctx, filter,
		options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(4000).
			SetProjection(bson.M{"id": 1, "score": 1, "queue": 1, "last_score": 1, "last_usage": 1, "lock_ms": 1}))
	byQueue := map[string][]any{}
	for _, m := range docs {
		byQueue[m.Queue] = append(byQueue[m.Queue], min(max(m.Score, 0), 9007199254740992), m.ID)
	}
	for queue, args := range byQueue {
		keys := d.queueKeys(queue)
		for i := 0; i < len(args); i += 4000 { // 2,000 messages a call
			_ = replayAdd.Run(ctx, d.rdb, []string{keys[0], keys[3], keys[2], keys[1]}, args[i:min(i+4000, len(args))]...).Err()
		}
	}
	if len(docs) > 0 {
		d.rdb.Set(ctx, d.key("recovery_storage_breakpoint"), docs[len(docs)-1].InternalID.Hex(), 0)
	}
	if len(docs) < 4000 {
		d.rdb.Set(ctx, d.key("recovery"), "false", 0)
		d.rdb.Set(ctx, d.key("recovery_storage_breakpoint"), "recovery_finished", 0)
		return true
	}
	return false
}
