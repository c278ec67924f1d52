package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// initStore runs Init on client with prefix, deleting the prefix's keys at
// cleanup.
func initStore(t *testing.T, client redis.UniversalClient, prefix string) (int64, error) {
	t.Helper()
	t.Cleanup(func() { deleteKeys(t, client, prefix) })
	return Init(testCtx(t), client, Options{KeyPrefix: prefix})
}

func TestInitOnANewRedisLetsTheFirstCoordinatorGrantAtOnce(t *testing.T) {
	t.Parallel()
	c, prefix := newClient(t), testPrefix(t)
	n, err := initStore(t, c, prefix)
	if err != nil || n != 1 {
		t.Fatalf("Init on a new Redis = %d, %v; want 1 marker written", n, err)
	}
	var losses int
	s := newStore(t, c, Options{KeyPrefix: prefix, Quarantine: time.Minute, OnDataLoss: func(time.Duration) { losses++ }})
	mustGrant(t, s, req("job", "a", time.Second, ""))
	if losses != 0 {
		t.Errorf("the first start after Init reported %d data losses, want 0", losses)
	}
}

func TestInitRefusesARedisWithMarkers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// before makes the markers exist.
		before func(t *testing.T, c *redis.Client, prefix string)
	}{
		{"initialised already", func(t *testing.T, c *redis.Client, prefix string) {
			if _, err := Init(testCtx(t), c, Options{KeyPrefix: prefix}); err != nil {
				t.Fatal(err)
			}
		}},
		{"a coordinator ran on it (quarantined, without Init)", func(t *testing.T, c *redis.Client, prefix string) {
			newStore(t, c, Options{KeyPrefix: prefix, Quarantine: time.Minute})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, prefix := newClient(t), testPrefix(t)
			t.Cleanup(func() { deleteKeys(t, c, prefix) })
			tc.before(t, c, prefix)
			marker := c.Get(testCtx(t), prefix+markerSuffix).Val()
			n, err := Init(testCtx(t), c, Options{KeyPrefix: prefix})
			if !errors.Is(err, ErrNotNew) || n != 0 || !strings.Contains(err.Error(), "markers") {
				t.Fatalf("Init = %d, %v; want ErrNotNew about the markers", n, err)
			}
			if after := c.Get(testCtx(t), prefix+markerSuffix).Val(); after != marker {
				t.Errorf("the refused Init changed the marker from %q to %q", marker, after)
			}
		})
	}
}

// A store whose marker is gone while its names' keys are there lost part of
// its data: writing the marker would hide that from the coordinators.
func TestInitRefusesAStoreInUseWhoseMarkerIsGone(t *testing.T) {
	t.Parallel()
	c, prefix := newClient(t), testPrefix(t)
	if _, err := initStore(t, c, prefix); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, c, Options{KeyPrefix: prefix})
	mustGrant(t, s, req("job", "a", time.Minute, ""))
	if err := c.Del(testCtx(t), prefix+markerSuffix).Err(); err != nil {
		t.Fatal(err)
	}
	n, err := Init(testCtx(t), c, Options{KeyPrefix: prefix})
	if !errors.Is(err, ErrNotNew) || n != 0 || !strings.Contains(err.Error(), "lost data") {
		t.Fatalf("Init = %d, %v; want ErrNotNew saying the store lost data", n, err)
	}
	if c.Exists(testCtx(t), prefix+markerSuffix).Val() != 0 {
		t.Error("the refused Init wrote the marker")
	}
}

// Nothing tells a brand-new Redis from one that lost every key after being
// used: Init then writes the markers, and a coordinator that starts next
// does not quarantine. That is why it is a one-shot command for a Redis
// just created, and never a way to repair one.
func TestInitCannotTellARedisThatLostEverythingFromANewOne(t *testing.T) {
	t.Parallel()
	c, prefix := newClient(t), testPrefix(t)
	if _, err := initStore(t, c, prefix); err != nil {
		t.Fatal(err)
	}
	s, err := New(testCtx(t), c, Options{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	mustGrant(t, s, req("job", "a", time.Minute, ""))
	_ = s.Close()
	deleteKeys(t, c, prefix) // the loss: every key of the prefix
	if n, err := Init(testCtx(t), c, Options{KeyPrefix: prefix}); err != nil || n != 1 {
		t.Fatalf("Init after a total loss = %d, %v; want it to find a Redis it cannot tell from a new one", n, err)
	}
}

func TestInitSeesOnlyItsOwnPrefix(t *testing.T) {
	t.Parallel()
	c, prefix := newClient(t), testPrefix(t)
	// A deployment whose prefix extends this one ("coordinator" beside
	// "coordinator:staging") has keys matching "<prefix>:*", not "<prefix>:{*".
	other := newStore(t, c, Options{KeyPrefix: prefix + ":other", NewStore: true})
	mustGrant(t, other, req("job", "a", time.Minute, ""))
	if n, err := initStore(t, c, prefix); err != nil || n != 1 {
		t.Fatalf("Init beside another prefix = %d, %v; want 1 marker written", n, err)
	}
}

func TestInitGivesUpWithinTheCallTimeoutOnAnUnreachableRedis(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := InitFromURL(ctx, "redis://"+closedAddr(t)+"/0", Options{KeyPrefix: testPrefix(t), CallTimeout: 500 * time.Millisecond})
	if err == nil || errors.Is(err, ErrNotNew) {
		t.Fatalf("Init on a closed port: %v, want an unavailable store", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Init took %s to fail", took)
	}
}

// On a Cluster, Init writes a marker per slot, and refuses a store that
// still has some: one whose shard failed over to an empty replica must
// quarantine those slots, not have their markers written anew.
func TestInitOnACluster(t *testing.T) {
	t.Parallel()
	client := clusterClient(t)
	prefix := testPrefix(t)
	n, err := initStore(t, client, prefix)
	if err != nil || n != numSlots {
		t.Fatalf("Init on a cluster = %d, %v; want %d markers", n, err, numSlots)
	}
	if err := client.Del(testCtx(t), (&Store{prefix: prefix}).slotMarker(42)).Err(); err != nil {
		t.Fatal(err)
	}
	n, err = Init(testCtx(t), client, Options{KeyPrefix: prefix})
	if !errors.Is(err, ErrNotNew) || n != 0 || !strings.Contains(err.Error(), "16383 of its 16384") {
		t.Fatalf("Init with one slot's marker gone = %d, %v; want ErrNotNew counting 16383 markers", n, err)
	}
}
