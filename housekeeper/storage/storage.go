// Package storage reads and deletes Deckard's messages in its MongoDB
// storage, as the housekeeper's storage tasks (TTL, max elements, recovery
// and the queue metrics) need them. It knows Deckard's layout
// (takenet/deckard, internal/queue/storage/mongo_storage.go) and nothing of
// Redis, views or schedules.
//
// Every query is shaped so that one call does a whole task's read or delete
// for many queues at once: Deckard's own housekeeper issues one query per
// queue (a count, a find, a delete per chunk of 100 ids), which is what
// costs a storage that scans. Deletions are conditional where a race could
// otherwise remove what should stay: DeleteExpired deletes only what is
// still expired when the delete runs, and Excess chooses a queue's excess
// so that racing trims cannot take a queue below its max_elements (see
// Excess).
package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Deckard's defaults (its mongo.database, mongo.collection and
// mongo.queue_configuration_collection settings).
const (
	DefaultDatabase                = "deckard"
	DefaultCollection              = "queue"
	DefaultConfigurationCollection = "queue_configuration"
)

// deleteChunk is how many ids one DeleteMany names: a storage that scans
// pays per query, not per id, and 10,000 ObjectIDs are about 170 KB of BSON.
const deleteChunk = 10_000

// Config says where Deckard keeps its messages. Empty names take Deckard's
// defaults.
type Config struct {
	URI                     string // a mongodb:// or mongodb+srv:// connection string, as Deckard's storage.uri
	Database                string // DefaultDatabase
	Collection              string // DefaultCollection: the messages
	ConfigurationCollection string // DefaultConfigurationCollection: per-queue max_elements
}

// Storage is Deckard's MongoDB storage. It is safe for concurrent use.
type Storage struct {
	client   *mongo.Client
	messages *mongo.Collection
	configs  *mongo.Collection
	// noMinAccumulator is set once the server refused $min in $group
	// (FerretDB v1 does): Stats then reads every message's prefix and
	// last_usage in one find.
	noMinAccumulator bool
}

// Open connects to cfg.URI and checks the connection with a ping, bounded by
// ctx.
func Open(ctx context.Context, cfg Config) (*Storage, error) {
	if cfg.URI == "" {
		return nil, errors.New("storage: empty URI")
	}
	if !strings.HasPrefix(cfg.URI, "mongodb://") && !strings.HasPrefix(cfg.URI, "mongodb+srv://") {
		return nil, errors.New("storage: URI must start with mongodb:// or mongodb+srv://")
	}
	if cfg.Database == "" {
		cfg.Database = DefaultDatabase
	}
	if cfg.Collection == "" {
		cfg.Collection = DefaultCollection
	}
	if cfg.ConfigurationCollection == "" {
		cfg.ConfigurationCollection = DefaultConfigurationCollection
	}
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.URI).SetAppName("housekeeper"))
	if err != nil {
		return nil, fmt.Errorf("storage: connect: %w", err)
	}
	if err := client.Ping(ctx, nil); err != nil {
		_ = client.Disconnect(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("storage: ping: %w", err)
	}
	return New(client.Database(cfg.Database), cfg.Collection, cfg.ConfigurationCollection, client), nil
}

// New returns the storage of db's collections (Deckard's defaults for empty
// names). owner, when not nil, is disconnected by Close.
func New(db *mongo.Database, collection, configurationCollection string, owner *mongo.Client) *Storage {
	if collection == "" {
		collection = DefaultCollection
	}
	if configurationCollection == "" {
		configurationCollection = DefaultConfigurationCollection
	}
	return &Storage{client: owner, messages: db.Collection(collection), configs: db.Collection(configurationCollection)}
}

// Close disconnects the client Open made.
func (s *Storage) Close(ctx context.Context) error {
	if s.client == nil {
		return nil
	}
	return s.client.Disconnect(ctx)
}

// Ref names one stored message: its storage id and Deckard's (queue, id).
type Ref struct {
	InternalID bson.ObjectID `bson:"_id"`
	Queue      string        `bson:"queue"`
	ID         string        `bson:"id"`
}

// Expired returns at most limit messages whose expiry_date is at or before
// now, earliest expiry first: Deckard's TTL query, with _id breaking ties so
// that every caller sees the same order.
func (s *Storage) Expired(ctx context.Context, now time.Time, limit int) ([]Ref, error) {
	opts := options.Find().
		SetSort(bson.D{{Key: "expiry_date", Value: 1}, {Key: "_id", Value: 1}}).
		SetLimit(int64(limit)).
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "queue", Value: 1}, {Key: "id", Value: 1}})
	return s.refs(ctx, "expired messages", bson.D{{Key: "expiry_date", Value: bson.D{{Key: "$lte", Value: now}}}}, opts)
}

// DeleteExpired deletes those of refs whose expiry_date is still at or
// before now when the delete runs (an Add that renewed a message meanwhile
// keeps it), and returns the ones it deleted.
func (s *Storage) DeleteExpired(ctx context.Context, refs []Ref, now time.Time) ([]Ref, error) {
	return s.delete(ctx, refs, bson.E{Key: "expiry_date", Value: bson.D{{Key: "$lte", Value: now}}})
}

// Delete deletes refs and returns the ones it deleted (those already gone
// are not).
func (s *Storage) Delete(ctx context.Context, refs []Ref) ([]Ref, error) {
	return s.delete(ctx, refs)
}

// delete deletes refs matching cond, a chunk a query, and returns the ones
// deleted: all of a chunk when the count says so, else those a second read
// no longer finds.
func (s *Storage) delete(ctx context.Context, refs []Ref, cond ...bson.E) ([]Ref, error) {
	var deleted []Ref
	for start := 0; start < len(refs); start += deleteChunk {
		chunk := refs[start:min(start+deleteChunk, len(refs))]
		ids := make([]bson.ObjectID, len(chunk))
		for i, r := range chunk {
			ids[i] = r.InternalID
		}
		filter := append(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, cond...)
		res, err := s.messages.DeleteMany(ctx, filter)
		if err != nil {
			return deleted, fmt.Errorf("storage: delete %d messages: %w", len(chunk), err)
		}
		if int(res.DeletedCount) == len(chunk) {
			deleted = append(deleted, chunk...)
			continue
		}
		// Some stayed (renewed, or deleted by someone else first): those
		// still stored are not this call's.
		left, err := s.refs(ctx, "messages left after a delete", bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
			options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			return deleted, err
		}
		stayed := make(map[bson.ObjectID]bool, len(left))
		for _, r := range left {
			stayed[r.InternalID] = true
		}
		for _, r := range chunk {
			if !stayed[r.InternalID] {
				deleted = append(deleted, r)
			}
		}
	}
	return deleted, nil
}

// Excess returns at most limit messages of queue beyond its max newest:
// ranked by expiry_date, then _id, latest first, every message after the
// first max. These are the count − max messages with the earliest
// expiry_date that Deckard's max-elements task deletes, chosen in one read
// rather than a count and then a find: whatever the queue holds when the
// read runs, what it returns leaves max messages ranked above each of them.
// So trims that race (two instances, or one that lost its turn without
// knowing it) can delete the same messages twice but never one that ranks
// among the newest max: a queue is never trimmed below max_elements.
func (s *Storage) Excess(ctx context.Context, queue string, max int64, limit int) ([]Ref, error) {
	opts := options.Find().
		SetSort(bson.D{{Key: "expiry_date", Value: -1}, {Key: "_id", Value: -1}}).
		SetSkip(max).
		SetLimit(int64(limit)).
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "queue", Value: 1}, {Key: "id", Value: 1}})
	return s.refs(ctx, "excess of queue "+queue, bson.D{{Key: "queue", Value: queue}}, opts)
}

// ExcessOf is Excess for several queues (queue -> max) in one read: every
// message of those queues is read, and each queue's ranked here. It costs
// one query where Excess costs one a queue, and reads every message of the
// queues where Excess reads only the excess: for queues whose size is known
// to be small.
func (s *Storage) ExcessOf(ctx context.Context, limits map[string]int64) (map[string][]Ref, error) {
	queues := make([]string, 0, len(limits))
	for q := range limits {
		queues = append(queues, q)
	}
	cur, err := s.messages.Find(ctx, bson.D{{Key: "queue", Value: bson.D{{Key: "$in", Value: queues}}}}, options.Find().
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "queue", Value: 1}, {Key: "id", Value: 1}, {Key: "expiry_date", Value: 1}}).
		SetBatchSize(10_000))
	if err != nil {
		return nil, fmt.Errorf("storage: find the messages of %d queues: %w", len(queues), err)
	}
	var docs []struct {
		Ref    `bson:",inline"`
		Expiry time.Time `bson:"expiry_date"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("storage: read the messages of %d queues: %w", len(queues), err)
	}
	byQueue := make(map[string][]int)
	for i, d := range docs {
		byQueue[d.Queue] = append(byQueue[d.Queue], i)
	}
	out := make(map[string][]Ref)
	for queue, idx := range byQueue {
		max := limits[queue]
		if int64(len(idx)) <= max {
			continue
		}
		// Excess's order: expiry_date, then _id, latest first.
		slices.SortFunc(idx, func(a, b int) int {
			if c := docs[b].Expiry.Compare(docs[a].Expiry); c != 0 {
				return c
			}
			return bytes.Compare(docs[b].InternalID[:], docs[a].InternalID[:])
		})
		for _, i := range idx[max:] {
			out[queue] = append(out[queue], docs[i].Ref)
		}
	}
	return out, nil
}

func (s *Storage) refs(ctx context.Context, what string, filter bson.D, opts *options.FindOptionsBuilder) ([]Ref, error) {
	cur, err := s.messages.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("storage: find %s: %w", what, err)
	}
	var out []Ref
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("storage: read %s: %w", what, err)
	}
	return out, nil
}

// MaxElements returns the max_elements of every queue whose configuration
// sets one above 0: Deckard's queue_configuration documents, _id the queue.
func (s *Storage) MaxElements(ctx context.Context) (map[string]int64, error) {
	cur, err := s.configs.Find(ctx, bson.D{{Key: "max_elements", Value: bson.D{{Key: "$gt", Value: 0}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "max_elements", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("storage: find queue configurations: %w", err)
	}
	var docs []struct {
		Queue       string `bson:"_id"`
		MaxElements int64  `bson:"max_elements"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("storage: read queue configurations: %w", err)
	}
	out := make(map[string]int64, len(docs))
	for _, d := range docs {
		if d.Queue != "" && d.MaxElements > 0 {
			out[d.Queue] = d.MaxElements
		}
	}
	return out, nil
}

// Counts returns how many messages each of queues holds, in one
// aggregation; a queue with none is absent.
func (s *Storage) Counts(ctx context.Context, queues []string) (map[string]int64, error) {
	if len(queues) == 0 {
		return map[string]int64{}, nil
	}
	groups, err := s.group(ctx, "queue", bson.D{{Key: "queue", Value: bson.D{{Key: "$in", Value: queues}}}}, false)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(groups))
	for _, g := range groups {
		out[g.Key] = g.Total
	}
	return out, nil
}

// Message is a stored message as recovery copies it into the cache.
type Message struct {
	InternalID bson.ObjectID `bson:"_id"`
	Queue      string        `bson:"queue"`
	ID         string        `bson:"id"`
	Score      float64       `bson:"score"`
}

// NewestID returns the hex of the highest _id stored, or "" when the
// storage holds no message.
func (s *Storage) NewestID(ctx context.Context) (string, error) {
	refs, err := s.refs(ctx, "the newest message", bson.D{},
		options.Find().SetSort(bson.D{{Key: "_id", Value: -1}}).SetLimit(1).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil || len(refs) == 0 {
		return "", err
	}
	return refs[0].InternalID.Hex(), nil
}

// Page returns at most limit messages with an _id above after and at most
// upTo (hex ObjectIDs; either empty: no bound), in _id order: Deckard's
// recovery read.
func (s *Storage) Page(ctx context.Context, after, upTo string, limit int) ([]Message, error) {
	bounds := bson.D{}
	for _, b := range []struct{ op, hex string }{{"$gt", after}, {"$lte", upTo}} {
		if b.hex == "" {
			continue
		}
		id, err := bson.ObjectIDFromHex(b.hex)
		if err != nil {
			return nil, fmt.Errorf("storage: recovery breakpoint %q: %w", b.hex, err)
		}
		bounds = append(bounds, bson.E{Key: b.op, Value: id})
	}
	filter := bson.D{}
	if len(bounds) > 0 {
		filter = bson.D{{Key: "_id", Value: bounds}}
	}
	cur, err := s.messages.Find(ctx, filter, options.Find().
		SetSort(bson.D{{Key: "_id", Value: 1}}).
		SetLimit(int64(limit)).
		SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "queue", Value: 1}, {Key: "id", Value: 1}, {Key: "score", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("storage: find a recovery page: %w", err)
	}
	var out []Message
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("storage: read a recovery page: %w", err)
	}
	return out, nil
}

// PrefixStats are Deckard's queue metrics of one queue prefix (the part of
// a queue name before "::").
type PrefixStats struct {
	Total int64
	// Oldest is the earliest last_usage among its messages; zero when none
	// has one.
	Oldest time.Time
}

// Stats returns the metrics of every queue prefix stored, in one
// aggregation where the server has $min in $group; elsewhere (FerretDB v1)
// in one read of every message's prefix and last_usage, rather than
// Deckard's count and find per prefix.
func (s *Storage) Stats(ctx context.Context) (map[string]PrefixStats, error) {
	if !s.noMinAccumulator {
		groups, err := s.group(ctx, "queue_prefix", nil, true)
		if err == nil {
			out := make(map[string]PrefixStats, len(groups))
			for _, g := range groups {
				st := PrefixStats{Total: g.Total}
				if g.Oldest != nil {
					st.Oldest = *g.Oldest
				}
				out[g.Key] = st
			}
			return out, nil
		}
		if !notImplemented(err) {
			return nil, err
		}
		s.noMinAccumulator = true
	}
	cur, err := s.messages.Find(ctx, bson.D{}, options.Find().
		SetProjection(bson.D{{Key: "queue_prefix", Value: 1}, {Key: "last_usage", Value: 1}, {Key: "_id", Value: 0}}).
		SetBatchSize(10_000))
	if err != nil {
		return nil, fmt.Errorf("storage: find the messages' prefixes: %w", err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	out := make(map[string]PrefixStats)
	for cur.Next(ctx) {
		var doc struct {
			Prefix    string     `bson:"queue_prefix"`
			LastUsage *time.Time `bson:"last_usage"`
		}
		if err := cur.Decode(&doc); err != nil {
			return nil, fmt.Errorf("storage: read a message's prefix: %w", err)
		}
		st := out[doc.Prefix]
		st.Total++
		if doc.LastUsage != nil && (st.Oldest.IsZero() || doc.LastUsage.Before(st.Oldest)) {
			st.Oldest = *doc.LastUsage
		}
		out[doc.Prefix] = st
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("storage: read the messages' prefixes: %w", err)
	}
	return out, nil
}

type group struct {
	Key    string     `bson:"_id"`
	Total  int64      `bson:"total"`
	Oldest *time.Time `bson:"oldest"`
}

// group counts the messages matching match (all when nil) by field, and
// with oldest their earliest last_usage.
func (s *Storage) group(ctx context.Context, field string, match bson.D, oldest bool) ([]group, error) {
	fields := bson.D{{Key: "_id", Value: "$" + field}, {Key: "total", Value: bson.D{{Key: "$sum", Value: 1}}}}
	if oldest {
		fields = append(fields, bson.E{Key: "oldest", Value: bson.D{{Key: "$min", Value: "$last_usage"}}})
	}
	pipeline := mongo.Pipeline{{{Key: "$group", Value: fields}}}
	if match != nil {
		pipeline = append(mongo.Pipeline{{{Key: "$match", Value: match}}}, pipeline...)
	}
	cur, err := s.messages.Aggregate(ctx, pipeline)
	if err != nil {
		return nil, fmt.Errorf("storage: count messages by %s: %w", field, err)
	}
	var out []group
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("storage: read the counts by %s: %w", field, err)
	}
	return out, nil
}

// notImplemented reports the server's refusal of an operator it lacks
// (MongoDB's code 238, NotImplemented).
func notImplemented(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(238)
}
