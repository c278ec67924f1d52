// Package mongotest gives tests a MongoDB wire-protocol server: FerretDB,
// which scripts/with-ferretdb.sh (run by make test) starts and names in
// COORDINATOR_TEST_MONGODB_URI. A test without it fails rather than skips,
// as redistest does for Redis.
//
// It is a test kit (internal/testkit): only tests import it, and it imports
// nothing of this module.
package mongotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// EnvURI names the server the tests use.
const EnvURI = "COORDINATOR_TEST_MONGODB_URI"

// URI is the test server's connection string.
func URI(t testing.TB) string {
	t.Helper()
	uri := os.Getenv(EnvURI)
	if uri == "" {
		t.Fatalf("%s is not set: run the tests with make test, or under scripts/with-ferretdb.sh", EnvURI)
	}
	return uri
}

// Database returns a database of the test's own on the test server, dropped
// when the test ends.
func Database(t testing.TB) *mongo.Database {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(URI(t)))
	if err != nil {
		t.Fatalf("connect to %s: %v", URI(t), err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	db := client.Database("test_" + hex.EncodeToString(b))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = db.Drop(ctx)
		_ = client.Disconnect(ctx)
	})
	return db
}
