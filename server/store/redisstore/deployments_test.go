package redisstore

import (
	"context"
	"maps"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/internal/redisurl"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/server/store"
)

// TestCluster runs the store against a Redis Cluster: the one
// COORDINATOR_TEST_REDIS_CLUSTER_URL names (redis+cluster://host:port,...), or
// a private one of three masters (see clusterClient).
func TestCluster(t *testing.T) {
	t.Parallel()
	client := clusterClient(t)
	const quarantine = time.Second
	var losses atomic.Int32
	s := newStore(t, client, Options{Quarantine: quarantine, OnDataLoss: func(time.Duration) { losses.Add(1) }})
	if !s.cluster {
		t.Fatal("a ClusterClient did not select cluster mode")
	}
	ctx := testCtx(t)

	// One marker per slot.
	var markers atomic.Int64
	err := client.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, globEscape(s.prefix)+":{*}:marker", 1000).Iterator()
		for iter.Next(ctx) {
			markers.Add(1)
		}
		return iter.Err()
	})
	if err != nil || markers.Load() != numSlots {
		t.Fatalf("%d markers (%v), want %d", markers.Load(), err, numSlots)
	}

	subs := map[string]*store.Changes{}
	for _, name := range oddNames {
		subs[name] = s.Changes(name)
		defer subs[name].Cancel()
	}
	waitSubscribed(t, s, slices.Collect(maps.Values(subs))...)
	watch(t, s, oddNames...)

	leases := map[string]store.Lease{}
	for _, name := range oddNames {
		l := mustGrant(t, s, req(name, "a", time.Minute, "v"))
		waitChange(t, subs[name], name)
		mustRefuse(t, s, waitReq(name, "w", 10*time.Second))
		if _, err := s.Renew(ctx, name, "a", l.Token, time.Minute); err != nil {
			t.Errorf("Renew(%q): %v", name, err)
		}
		leases[name] = l
	}
	// One Watch reads names of many slots: one script call a slot.
	ds, err := s.Watch(ctx, oddNames, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range oddNames {
		if l := leases[name]; !ds[i].Held || ds[i].Lease.Name != name || ds[i].Lease.Token != l.Token {
			t.Errorf("Watch: description of %q = %+v, want the lease %+v", name, ds[i], l)
		}
	}
	var got []string
	for cursor := ""; ; {
		page, err := s.List(ctx, "", cursor, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page.Leases {
			got = append(got, l.Name)
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if want := slices.Sorted(slices.Values(oddNames)); !slices.Equal(got, want) {
		t.Errorf("List = %q, want %q", got, want)
	}
	for _, name := range oddNames {
		mustRelease(t, s, leases[name])
		if err := s.Dequeue(ctx, name, "w"); err != nil {
			t.Errorf("Dequeue(%q): %v", name, err)
		}
	}

	// Semaphores: every script of a name, its grants and queue included,
	// stays in the name's slot.
	for _, name := range oddNames {
		semaphoreRound(t, s, name+"/sem")
	}

	// Losing one slot's marker quarantines that slot only.
	lost, other := "{braces}", "plain"
	if slotOf(encodeName(lost)) == slotOf(encodeName(other)) {
		t.Fatal("test names share a slot")
	}
	if err := client.Del(ctx, s.keys(lost).marker).Err(); err != nil {
		t.Fatal(err)
	}
	lostAt := time.Now()
	_, err = s.Acquire(ctx, req(lost, "b", time.Minute, ""))
	q := asQuarantine(err)
	if q == nil {
		t.Fatalf("Acquire in the lost slot: %v, want a QuarantineError", err)
	}
	mustGrant(t, s, req(other, "b", time.Minute, ""))
	if n := losses.Load(); n != 1 {
		t.Errorf("OnDataLoss called %d times, want 1", n)
	}
	if l := grantedNotBefore(t, s, req(lost, "b", time.Minute, ""), lostAt.Add(q.RetryAfter-clockSkew)); l.Token <= leases[lost].Token {
		t.Errorf("token after quarantine %d <= %d", l.Token, leases[lost].Token)
	}

	// A shard that failed over to an empty replica while no coordinator ran
	// leaves its slots' markers missing: the next start quarantines those
	// slots only.
	failed, kept := "failed-over", "kept"
	if slotOf(failed) == slotOf(kept) {
		t.Fatal("test names share a slot")
	}
	if err := client.Del(ctx, s.keys(failed).marker).Err(); err != nil {
		t.Fatal(err)
	}
	var startLosses atomic.Int32
	again, err := New(ctx, client, Options{KeyPrefix: s.prefix, Quarantine: quarantine,
		OnDataLoss: func(time.Duration) { startLosses.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = again.Close() }()
	if n := startLosses.Load(); n != 1 {
		t.Errorf("OnDataLoss called %d times at start, want 1", n)
	}
	if _, err := again.Acquire(ctx, req(failed, "c", time.Minute, "")); asQuarantine(err) == nil {
		t.Errorf("Acquire in the failed-over slot: %v, want a QuarantineError", err)
	}
	mustGrant(t, again, req(kept, "c", time.Minute, ""))
}

// TestSentinel runs the store through Sentinel: the one
// COORDINATOR_TEST_REDIS_SENTINEL_URL names
// (redis+sentinel://host:port,.../mastername[/db]), or a private sentinel
// watching a private master.
func TestSentinel(t *testing.T) {
	t.Parallel()
	raw := os.Getenv("COORDINATOR_TEST_REDIS_SENTINEL_URL")
	if raw == "" {
		raw = "redis+sentinel://" + redistest.StartSentinel(t, redistest.Start(t, false), "coordinator") + "/coordinator"
	}
	prefix := testPrefix(t)
	s, err := NewFromURL(testCtx(t), raw, Options{KeyPrefix: prefix, NewStore: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteKeys(t, s.client, prefix)
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	if s.cluster {
		t.Fatal("a Sentinel URL selected cluster mode")
	}
	job := s.Changes("job")
	defer job.Cancel()
	waitSubscribed(t, s, job)
	watch(t, s, "job")
	l := mustGrant(t, s, req("job", "a", time.Minute, "v"))
	waitChange(t, job, "grant")
	if d := mustDescribe(t, s, "job"); !d.Held || d.LastToken != l.Token {
		t.Errorf("Describe = %+v", d)
	}
	mustRelease(t, s, l)
	waitChange(t, job, "release")
	semaphoreRound(t, s, "pool")
}

// clusterClient connects to the Redis Cluster that
// COORDINATOR_TEST_REDIS_CLUSTER_URL names (redis+cluster://host:port,...), or
// to a private one of three masters; it is closed at cleanup.
func clusterClient(t *testing.T) *redis.ClusterClient {
	t.Helper()
	raw := os.Getenv("COORDINATOR_TEST_REDIS_CLUSTER_URL")
	if raw == "" {
		raw = redistest.StartCluster(t, 3).URL()
	}
	c, err := redisurl.Parse(raw)
	if err != nil || c.Cluster == nil {
		t.Fatalf("COORDINATOR_TEST_REDIS_CLUSTER_URL=%q is not a cluster URL: %v", raw, err)
	}
	client := redis.NewClusterClient(c.Cluster)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// semaphoreRound takes a name of capacity 2 through two grants, a queued
// writer, a release and the writer's grant, checking the holders on the way.
func semaphoreRound(t *testing.T, s *Store, name string) {
	t.Helper()
	ctx := testCtx(t)
	share := func(holder string, weight int64, waiter string) store.AcquireRequest {
		return store.AcquireRequest{Name: name, Holder: holder, TTL: time.Minute, Capacity: 2, Weight: weight, Waiter: waiter, WaiterTTL: 10 * time.Second}
	}
	a := mustGrant(t, s, share("a", 1, ""))
	b := mustGrant(t, s, share("b", 1, ""))
	mustRefuse(t, s, share("w", 2, "w"))
	d, err := s.Describe(ctx, name)
	if err != nil || len(d.Holders) != 2 || d.Capacity != 2 || d.Waiters != 1 || d.WaitingWeight != 2 {
		t.Errorf("Describe(%q) = %+v, %v; want 2 holders of capacity 2, a waiter weighing 2", name, d, err)
	}
	mustRelease(t, s, a)
	mustRefuse(t, s, share("w", 2, "w"))
	mustRelease(t, s, b)
	if w := mustGrant(t, s, share("w", 2, "w")); w.Weight != 2 || w.Token <= b.Token {
		t.Errorf("the writer of %q: %+v, want weight 2 and a token above %d", name, w, b.Token)
	} else {
		mustRelease(t, s, w)
	}
}
