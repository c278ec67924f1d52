package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"regexp"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/server/store"
)

// Tests run against a real Redis: the standalone one COORDINATOR_TEST_REDIS_URL
// names, or a throwaway one that internal/testkit/redistest starts. Each test
// uses its own key prefix, so tests run in parallel on one database; the few that
// flush a whole database use scratchDB (15 by default,
// COORDINATOR_TEST_REDIS_SCRATCH_DB to change it) and run one at a time.

func TestMain(m *testing.M) {
	// go-redis retries dialling a node that died (a Cluster failover's old
	// primary) once a second in the background, and sees its client closed
	// only at the next try.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

func testRedisOptions(t testing.TB) *redis.Options {
	t.Helper()
	raw := redistest.URL(t)
	o, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatalf("%s=%q: %v", redistest.EnvURL, raw, err)
	}
	return o
}

// newClient connects to the test Redis; the client is closed at cleanup.
func newClient(t testing.TB, edit ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := testRedisOptions(t)
	o.ContextTimeoutEnabled = true // as package redisurl's clients
	for _, f := range edit {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var nonWord = regexp.MustCompile(`[^A-Za-z0-9]+`)

// testPrefix is a key prefix of the test's own.
func testPrefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "cotest:" + nonWord.ReplaceAllString(t.Name(), "_") + ":" + hex.EncodeToString(b[:])
}

// newStore makes a Store with a prefix of the test's own on client (a new
// one when nil), deleting its keys at cleanup.
func newStore(t testing.TB, client redis.UniversalClient, opts Options) *Store {
	t.Helper()
	if client == nil {
		client = newClient(t)
	}
	if opts.KeyPrefix == "" {
		// A prefix of its own is a new store: its markers are missing.
		opts.KeyPrefix = testPrefix(t)
		opts.NewStore = true
	}
	// Clean up through a direct connection: the test may cut client off.
	cleaner := client
	if c, ok := client.(*redis.Client); ok {
		o := testRedisOptions(t)
		o.DB = c.Options().DB
		cleaner = redis.NewClient(o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := New(ctx, client, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		deleteKeys(t, cleaner, opts.KeyPrefix)
		if cleaner != client {
			_ = cleaner.Close()
		}
	})
	return s
}

func deleteKeys(t testing.TB, c redis.UniversalClient, prefix string) {
	ctx := context.Background()
	del := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, globEscape(prefix)+":*", 1000).Iterator()
		for iter.Next(ctx) {
			// One key at a time: Cluster refuses a DEL across slots.
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return del(ctx, n) })
	} else {
		err = del(ctx, c)
	}
	if err != nil {
		t.Logf("deleting test keys: %v", err)
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitChange waits for a value on c.
func waitChange(t testing.TB, c *store.Changes, what string) {
	t.Helper()
	select {
	case _, ok := <-c.C:
		if !ok {
			t.Fatalf("%s: the Changes channel closed", what)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing announced within 5s", what)
	}
}

// pending reports whether c holds a value, and takes it.
func pending(c *store.Changes) bool {
	select {
	case <-c.C:
		return true
	default:
		return false
	}
}

// watch marks names as observed, so that their changes are announced.
func watch(t testing.TB, s *Store, names ...string) {
	t.Helper()
	if _, err := s.Watch(context.Background(), names, time.Minute); err != nil {
		t.Fatalf("Watch(%q): %v", names, err)
	}
}

// waitSubscribed waits until the store's subscription is live, publishing a
// probe meanwhile. Any value for the probe means that Redis confirmed the
// subscription and every subscriber was told to look again; subs are emptied
// of that value, so that any value they receive later is news.
func waitSubscribed(t testing.TB, s *Store, subs ...*store.Changes) {
	t.Helper()
	probe := "probe-" + hex.EncodeToString([]byte(t.Name()))
	c := s.Changes(probe)
	defer c.Cancel()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if err := s.client.Publish(context.Background(), s.channel, probe).Err(); err != nil {
			t.Fatalf("publish: %v", err)
		}
		select {
		case <-c.C:
			// The probe may have its value before PublishAll reached the
			// others: it holds the hub's lock until it has, so taking the
			// lock waits for it.
			s.events.hub.Subscribers(probe)
			for _, sub := range subs {
				pending(sub)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("subscription not ready within 5s")
		}
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// asQuarantine returns err's *store.QuarantineError, or nil.
func asQuarantine(err error) *store.QuarantineError {
	var q *store.QuarantineError
	if errors.As(err, &q) {
		return q
	}
	return nil
}
