package mongotest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/coordinator-dev/coordinator/internal/testkit/mongotest"
)

type doc struct {
	ID   string `bson:"_id"`
	Name string `bson:"name"`
}

func insertAndFind(t *testing.T, coll *mongo.Collection) {
	t.Helper()
	ctx := t.Context()
	if _, err := coll.InsertOne(ctx, doc{ID: "a", Name: "alpha"}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	find(t, coll)
}

func find(t *testing.T, coll *mongo.Collection) {
	t.Helper()
	var got doc
	if err := coll.FindOne(t.Context(), bson.D{{Key: "name", Value: "alpha"}}).Decode(&got); err != nil {
		t.Fatalf("find: %v", err)
	}
	if got != (doc{ID: "a", Name: "alpha"}) {
		t.Fatalf("found %+v, want {a alpha}", got)
	}
}

func connect(t *testing.T, uri string) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Short: a client whose server was killed spends the whole bound
		// (else its 30 s server selection timeout) ending its sessions.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_ = client.Disconnect(ctx)
	})
	return client
}

func TestDatabaseIsTheTestsOwnAndDroppedAtTheEnd(t *testing.T) {
	uri := mongotest.URI(t)
	var name string
	used := t.Run("use", func(t *testing.T) {
		db := mongotest.Database(t)
		name = db.Name()
		colls, err := db.ListCollectionNames(t.Context(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		if len(colls) != 0 {
			t.Fatalf("a fresh database has collections %v", colls)
		}
		if other := mongotest.Database(t); other.Name() == name {
			t.Fatalf("two databases of one test share the name %s", name)
		}
		insertAndFind(t, db.Collection("things"))
	})
	if !used {
		return
	}
	names, err := connect(t, uri).ListDatabaseNames(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, name) {
		t.Errorf("database %s outlived its test: %v", name, names)
	}
}

func TestStartedServerKeepsItsDataAcrossARestartAndDiesOnKill(t *testing.T) {
	s := mongotest.Start(t)
	insertAndFind(t, connect(t, s.URI()).Database("kit").Collection("things"))

	s.Restart()
	find(t, connect(t, s.URI()).Database("kit").Collection("things"))

	s.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := connect(t, s.URI()).Ping(ctx, nil); err == nil {
		t.Fatal("a killed server still answers")
	}
}
