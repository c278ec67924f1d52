package housekeepertest

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Stored is a message as Deckard keeps it in its MongoDB storage.
type Stored struct {
	Queue     string
	ID        string
	Score     float64
	Expiry    time.Time
	LastUsage time.Time // zero: the insertion time
}

// Store writes msgs into db's messages collection ("queue") with the
// fields Deckard's Insert sets (takenet/deckard,
// internal/queue/storage/mongo_storage.go): an upsert on (id, queue), so
// that a message stored again keeps its _id and takes its new expiry.
func Store(t testing.TB, db *mongo.Database, msgs ...Stored) {
	t.Helper()
	if len(msgs) == 0 {
		return
	}
	now := time.Now()
	models := make([]mongo.WriteModel, len(msgs))
	for i, m := range msgs {
		prefix, suffix, _ := strings.Cut(m.Queue, "::")
		lastUsage := m.LastUsage
		if lastUsage.IsZero() {
			lastUsage = now
		}
		set := bson.M{"expiry_date": m.Expiry, "queue_prefix": prefix}
		if suffix != "" {
			set["queue_suffix"] = suffix
		}
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.M{"id": m.ID, "queue": m.Queue}).
			SetUpdate(bson.M{"$set": set, "$setOnInsert": bson.M{"last_usage": lastUsage, "score": m.Score}}).
			SetUpsert(true)
	}
	for start := 0; start < len(models); start += 5000 {
		if _, err := db.Collection("queue").BulkWrite(t.Context(), models[start:min(start+5000, len(models))], options.BulkWrite().SetOrdered(false)); err != nil {
			t.Fatalf("store %d messages: %v", len(msgs), err)
		}
	}
}

// SetMaxElements writes queue's configuration as Deckard's EditQueue does.
func SetMaxElements(t testing.TB, db *mongo.Database, queue string, maxElements int64) {
	t.Helper()
	_, err := db.Collection("queue_configuration").UpdateOne(t.Context(), bson.M{"_id": queue},
		bson.M{"$set": bson.M{"max_elements": maxElements}}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		t.Fatalf("set max_elements of %q: %v", queue, err)
	}
}

// StoredIDs returns the ids of queue's messages in storage.
func StoredIDs(t testing.TB, db *mongo.Database, queue string) map[string]bool {
	t.Helper()
	cur, err := db.Collection("queue").Find(t.Context(), bson.M{"queue": queue}, options.Find().SetProjection(bson.M{"id": 1}))
	if err != nil {
		t.Fatalf("find the messages of %q: %v", queue, err)
	}
	var docs []struct {
		ID string `bson:"id"`
	}
	if err := cur.All(t.Context(), &docs); err != nil {
		t.Fatalf("read the messages of %q: %v", queue, err)
	}
	out := make(map[string]bool, len(docs))
	for _, d := range docs {
		out[d.ID] = true
	}
	return out
}
