package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The checks New makes before the store serves: Redis' version, its
// eviction policy, and the markers that tell a Redis that lost its data.

// MinRedisVersion is the oldest Redis the store runs on: its scripts rely on
// Redis 7's replication of a script's effects (its writes, never the script
// itself, which reads TIME), which older versions need to be asked for at
// every call.
const MinRedisVersion = 7

// checkVersion refuses a Redis older than MinRedisVersion, on every master of
// a Cluster. A Redis whose INFO cannot be read (a renamed command) is only
// warned of.
func (s *Store) checkVersion(ctx context.Context) error {
	check := func(ctx context.Context, c redis.Cmdable, addr string) error {
		ctx, cancel := s.bound(ctx)
		defer cancel()
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			s.log.Warn("could not read the Redis version (INFO server): the store needs Redis 7 or newer",
				"addr", addr, "error", err)
			return nil
		}
		if err := versionError(info); err != nil {
			return fmt.Errorf("redisstore: %s: %w", addr, err)
		}
		return nil
	}
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return check(ctx, c, c.Options().Addr)
		})
	}
	return check(ctx, s.client, "Redis")
}

// versionError reads redis_version from an INFO server reply: an error when
// it is older than MinRedisVersion, nil when newer or not there to read.
func versionError(info string) error {
	for _, line := range strings.Split(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		major, _, _ := strings.Cut(v, ".")
		if n, err := strconv.Atoi(major); err == nil && n < MinRedisVersion {
			return fmt.Errorf("redis_version %s is older than %d.0, the oldest the store runs on", v, MinRedisVersion)
		}
		return nil
	}
	return nil
}

// checkEvictionPolicy warns unless every master runs maxmemory-policy
// noeviction.
func (s *Store) checkEvictionPolicy(ctx context.Context) {
	check := func(ctx context.Context, c redis.Cmdable, addr string) {
		ctx, cancel := s.bound(ctx)
		defer cancel()
		res, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		policy, ok := res["maxmemory-policy"]
		if err != nil || !ok {
			s.log.Warn("could not check Redis maxmemory-policy (CONFIG may be disabled): make sure it is noeviction, "+
				"or an evicted fencing counter or lease breaks token monotonicity and mutual exclusion",
				"addr", addr, "error", err)
			return
		}
		if policy != "noeviction" {
			s.log.Warn("Redis maxmemory-policy is not noeviction: under memory pressure Redis may evict "+
				"a fencing counter (tokens no longer increase) or a lease (two holders at once); "+
				"set maxmemory-policy noeviction",
				"addr", addr, "maxmemory-policy", policy)
		}
	}
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			check(ctx, c, c.Options().Addr)
			return nil
		})
		if err != nil {
			s.log.Warn("could not check Redis maxmemory-policy on the cluster's masters", "error", err)
		}
		return
	}
	check(ctx, s.client, "")
}

// checkMarkers writes the data-loss markers that are missing, quarantining
// the names they guard unless newStore (see Options.NewStore): a marker never
// expires, so one missing at start means Redis lost its data while no
// coordinator ran. On a Cluster each slot has its marker, so a shard that
// failed over to an empty replica quarantines its slots only.
func (s *Store) checkMarkers(ctx context.Context, newStore bool) error {
	missing, err := s.writeMarkers(ctx, newStore)
	if err != nil {
		return err
	}
	switch {
	case missing == 0:
	case newStore:
		s.log.Info("new store: wrote the data-loss markers", "markers", missing)
	default:
		s.log.Error("Redis lost its data while no coordinator ran (data-loss markers missing at start): "+
			"leases, queues and fencing counters may be gone; grants wait for the quarantine "+
			"(a brand-new Redis is initialised once with coordinator init-store)",
			"markers", missing, "quarantine", s.quarantine)
		s.marks.forget()
		if s.onDataLoss != nil {
			s.onDataLoss(s.quarantine)
		}
	}
	return nil
}

// writeMarkers runs start.lua on every data-loss marker: the missing ones
// are written, with a quarantine unless newStore, and their number returned.
func (s *Store) writeMarkers(ctx context.Context, newStore bool) (int64, error) {
	flag := ""
	if newStore {
		flag = "1"
	}
	if !s.cluster {
		cctx, cancel := s.bound(ctx)
		defer cancel()
		n, err := startScript.Run(cctx, s.client, []string{s.marker}, s.quarantineMS, flag).Int64()
		if err != nil {
			return 0, s.wrapErr(ctx, "check data-loss marker", err)
		}
		return n, nil
	}
	// 16384 calls: send the script's digest, not its source, each time.
	cctx, cancel := s.bound(ctx)
	err := startScript.Load(cctx, s.client).Err()
	cancel()
	if err != nil {
		return 0, s.wrapErr(ctx, "load scripts", err)
	}
	var missing int64
	for start := 0; start < numSlots; start += markerBatch {
		n, err := s.checkSlotMarkers(ctx, start, min(start+markerBatch, numSlots), flag)
		if err != nil {
			return 0, err
		}
		missing += n
	}
	return missing, nil
}

// markerBatch is how many slot markers one pipeline checks.
const markerBatch = 1024

// checkSlotMarkers runs start.lua for the markers of slots [from, to), one
// call a slot, in one pipeline, and returns how many were missing.
func (s *Store) checkSlotMarkers(ctx context.Context, from, to int, flag string) (int64, error) {
	cctx, cancel := s.bound(ctx)
	defer cancel()
	cmds := make([]*redis.Cmd, 0, to-from)
	_, _ = s.client.Pipelined(cctx, func(p redis.Pipeliner) error {
		for slot := from; slot < to; slot++ {
			cmds = append(cmds, startScript.EvalSha(cctx, p, []string{s.slotMarker(uint16(slot))}, s.quarantineMS, flag))
		}
		return nil
	})
	var missing int64
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// A shard restarted since the script was loaded.
			cmd = startScript.Run(cctx, s.client, []string{s.slotMarker(uint16(from + i))}, s.quarantineMS, flag)
		}
		n, err := cmd.Int64()
		if err != nil {
			return 0, s.wrapErr(ctx, "check data-loss markers", err)
		}
		missing += n
	}
	return missing, nil
}
