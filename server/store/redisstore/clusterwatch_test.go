package redisstore

import (
	"errors"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/internal/redisurl"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/server/store"
)

// TestClusterFailoverQuarantinesTheNewPrimarysSlots loses a grant the way
// an unplanned Cluster failover does: the primary acknowledges it while its
// replica is cut off, and dies; the replica, promoted, kept the slots'
// markers but not the grant. No other holder may get the name while the
// lost grant's holder may still believe in it; names of the other shards
// are granted meanwhile.
func TestClusterFailoverQuarantinesTheNewPrimarysSlots(t *testing.T) {
	t.Parallel()
	// The quarantine, and the lost lease's TTL: longer than the failover
	// takes (the 2 s node timeout, then an election).
	const ttl = 8 * time.Second
	cluster := redistest.StartClusterWithReplicas(t, 3, 1)
	parsed, err := redisurl.Parse(cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClusterClient(parsed.Cluster)
	t.Cleanup(func() { _ = client.Close() })
	var losses atomic.Int32
	s := newStore(t, client, Options{KeyPrefix: testPrefix(t), NewStore: true, Quarantine: ttl,
		OnDataLoss: func(time.Duration) { losses.Add(1) }})
	ctx := testCtx(t)

	primary, replica := shardOf(t, cluster, slotOf(encodeName("job")))
	other := "other"
	for i := 0; ; i++ {
		if p, _ := shardOf(t, cluster, slotOf(encodeName(other))); p != primary {
			break
		}
		other = "other" + string(rune('a'+i))
	}
	before := mustGrant(t, s, req("job", "a", time.Minute, ""))
	mustRelease(t, s, before)

	// Frozen, the replica cannot reconnect; its link cut, the primary sends
	// it nothing more.
	replica.Freeze()
	direct := redis.NewClient(&redis.Options{Addr: primary.Addr()})
	defer func() { _ = direct.Close() }()
	if err := direct.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	lost := mustGrant(t, s, req("job", "a", ttl, ""))
	primary.Kill()
	replica.Thaw()

	// Until the lost lease's end, as its holder counts it, nobody else may
	// have the name; the other shards grant as before.
	var sawQuarantine bool
	for time.Since(sent) < ttl {
		res, err := s.Acquire(ctx, req("job", "b", ttl, ""))
		switch {
		case err == nil && res.Acquired && time.Since(sent) < ttl:
			t.Fatalf("granted to b %s after a's lost grant (token %d), within its TTL %s", time.Since(sent), lost.Token, ttl)
		case asQuarantine(err) != nil:
			sawQuarantine = true
		case err != nil && !errors.Is(err, store.ErrUnavailable):
			t.Fatalf("Acquire during the failover: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	l, at := untilGrantedDespite(t, s, req("job", "b", ttl, ""), 20*time.Second, func(err error) bool {
		return asQuarantine(err) != nil || errors.Is(err, store.ErrUnavailable)
	})
	t.Logf("granted again %s after the lost grant was sent", at.Sub(sent).Round(time.Millisecond))
	if !sawQuarantine && at.Sub(sent) < ttl {
		t.Errorf("no quarantine, and a grant %s after the lost one", at.Sub(sent))
	}
	if l.Token <= before.Token {
		t.Errorf("token %d after the failover, %d before", l.Token, before.Token)
	}
	if n := losses.Load(); n != 1 {
		t.Errorf("OnDataLoss called %d times, want 1 (the promoted replica)", n)
	}
	// The quarantine is the failed-over shard's alone.
	if _, err := s.Acquire(ctx, req(other, "c", time.Minute, "")); err != nil {
		t.Errorf("Acquire of %q on another shard: %v", other, err)
	}
}

// shardOf is the primary serving slot, and its replica.
func shardOf(t *testing.T, c *redistest.Cluster, slot uint16) (primary, replica *redistest.Server) {
	t.Helper()
	node := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr()})
	defer func() { _ = node.Close() }()
	shards, err := node.ClusterShards(testCtx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	byAddr := make(map[string]*redistest.Server)
	for _, n := range c.Nodes {
		byAddr[n.Addr()] = n
	}
	for _, shard := range shards {
		if !slices.ContainsFunc(shard.Slots, func(r redis.SlotRange) bool { return int64(slot) >= r.Start && int64(slot) <= r.End }) {
			continue
		}
		for _, n := range shard.Nodes {
			addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			if n.Role == "master" {
				primary = byAddr[addr]
			} else {
				replica = byAddr[addr]
			}
		}
		if primary != nil && replica != nil {
			return primary, replica
		}
	}
	t.Fatalf("no primary with a replica serves slot %d: %+v", slot, shards)
	return nil, nil
}
