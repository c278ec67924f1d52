package redisstore

import (
	"errors"
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

	shard := cluster.ShardOf(int(slotOf(encodeName("job"))))
	primary, replica := shard.Primary, shard.Replica
	if replica == nil {
		t.Fatal("the primary of job has no replica")
	}
	other := "other"
	for i := 0; ; i++ {
		if cluster.ShardOf(int(slotOf(encodeName(other)))).Primary != primary {
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

// TestClusterSlotMoveIsNoFailover moves the slot of a held name to another
// primary: MIGRATE loses nothing, so the lease moves with its slot and
// nothing is quarantined.
func TestClusterSlotMoveIsNoFailover(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	parsed, err := redisurl.Parse(cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClusterClient(parsed.Cluster)
	t.Cleanup(func() { _ = client.Close() })
	var losses atomic.Int32
	s := newStore(t, client, Options{KeyPrefix: testPrefix(t), NewStore: true, Quarantine: time.Minute,
		OnDataLoss: func(time.Duration) { losses.Add(1) }})
	ctx := testCtx(t)

	held := mustGrant(t, s, req("job", "a", time.Minute, ""))
	slot := int(slotOf(encodeName("job")))
	from := cluster.ShardOf(slot).Primary
	var to *redistest.Server
	for _, n := range cluster.Nodes {
		if n != from {
			to = n
			break
		}
	}
	if moved := cluster.MoveSlot(slot, to); moved < 2 {
		t.Fatalf("%d keys moved with slot %d, want the lease's and the marker's", moved, slot)
	}
	if p := cluster.ShardOf(slot).Primary; p != to {
		t.Fatalf("slot %d is still served by %s", slot, p.Addr())
	}

	res, err := s.Acquire(ctx, req("job", "b", time.Minute, ""))
	if err != nil || res.Acquired {
		t.Fatalf("Acquire by b after the move: %+v, %v; want refused: a holds it", res, err)
	}
	renewed, err := s.Renew(ctx, "job", "a", held.Token, time.Minute)
	if err != nil || renewed.Token != held.Token {
		t.Fatalf("Renew by a after the move: %+v, %v; want token %d", renewed, err, held.Token)
	}
	mustRelease(t, s, held)
	if l := mustGrant(t, s, req("job", "b", time.Minute, "")); l.Token <= held.Token {
		t.Errorf("token %d after the move, %d before", l.Token, held.Token)
	}
	if n := losses.Load(); n != 0 {
		t.Errorf("OnDataLoss called %d times after a slot move, want 0", n)
	}
}
