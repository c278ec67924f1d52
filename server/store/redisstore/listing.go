package redisstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/server/store"
)

// Reading the leases without changing them: Describe of one name, and List,
// which pages through every master's key space.

// Describe implements store.Leases.
func (s *Store) Describe(ctx context.Context, name string) (store.Description, error) {
	k := s.keys(name)
	var d store.Description
	err := s.withProofs(ctx, proofSet{}, "", func(proofs string) ([]string, error) {
		v, err := s.call(ctx, "describe", describeScript, []string{k.lease, k.queue, k.waiters},
			proofs, s.lockDelayMS, s.sessionKeepMS())
		if err != nil {
			return nil, err
		}
		var need []string
		d, need, err = decodeDescribe(name, v)
		return need, err
	})
	return d, err
}

// List implements store.Leases. It SCANs the whole key space (every master of
// a cluster) for lease keys, keeps those of each page that hold an unexpired
// lease (one HMGET a key, pipelined: a lease key outlives its lease, keeping
// the fencing counter), only the limit+1 first names after cursor, then reads
// those leases; it is meant for debugging. Each round trip is bounded by the
// call timeout, not the whole listing.
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) (store.ListPage, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	pattern := globEscape(s.prefix) + ":{" + globEscape(encodePrefix(prefix)) + "*}" + leaseSuffix

	var mu sync.Mutex
	var names []string
	keep := limit + 1
	add := func(found []string) {
		mu.Lock()
		defer mu.Unlock()
		names = append(names, found...)
		if len(names) > 4*keep {
			slices.Sort(names)
			names = slices.Compact(names)
			names = names[:min(keep, len(names))]
		}
	}
	// held keeps the names of keys whose lease had not expired by Redis'
	// clock when the listing began; describeMany reads them again.
	tctx, cancel := s.bound(ctx)
	start, err := s.client.Time(tctx).Result()
	cancel()
	if err != nil {
		return store.ListPage{}, s.wrapErr(ctx, "list", err)
	}
	held := func(ctx context.Context, c redis.Cmdable, keys []string) ([]string, error) {
		var candidates []string
		var ckeys []string
		for _, key := range keys {
			name, ok := s.leaseKeyName(key)
			if !ok || !strings.HasPrefix(name, prefix) || (cursor != "" && name <= cursor) {
				continue
			}
			candidates, ckeys = append(candidates, name), append(ckeys, key)
		}
		if len(candidates) == 0 {
			return nil, nil
		}
		cctx, cancel := s.bound(ctx)
		defer cancel()
		cmds := make([]*redis.SliceCmd, len(ckeys))
		if _, err := c.Pipelined(cctx, func(p redis.Pipeliner) error {
			for i, key := range ckeys {
				cmds[i] = p.HMGet(cctx, key, "sum") // no redis.Nil to fail the pipeline
			}
			return nil
		}); err != nil {
			return nil, err
		}
		var out []string
		for i, cmd := range cmds {
			// 'sum' (holders.lua) is n:used:low:high[:slow]: high at
			// least the latest expiry of the grants; slow says grants are
			// attached to sessions, whose bounds may be stale: describe
			// settles them.
			v := cmd.Val()
			if len(v) != 1 || v[0] == nil {
				continue
			}
			sum, _ := v[0].(string)
			parts := strings.Split(sum, ":")
			if len(parts) > 4 {
				out = append(out, candidates[i])
				continue
			}
			if len(parts) < 4 {
				continue
			}
			if ms, err := strconv.ParseInt(parts[3], 10, 64); err == nil && ms > start.UnixMilli() {
				out = append(out, candidates[i])
			}
		}
		return out, nil
	}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cur uint64
		for {
			cctx, cancel := s.bound(ctx)
			keys, next, err := c.Scan(cctx, cur, pattern, 1000).Result()
			cancel()
			if err != nil {
				return err
			}
			found, err := held(ctx, c, keys)
			if err != nil {
				return err
			}
			add(found)
			if next == 0 {
				return nil
			}
			cur = next
		}
	}
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, s.client)
	}
	if err != nil {
		return store.ListPage{}, s.wrapErr(ctx, "list", err)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var page store.ListPage
	if len(names) > limit {
		names = names[:limit]
		page.Next = names[limit-1]
	}
	descs, err := s.describeMany(ctx, names)
	if err != nil {
		return store.ListPage{}, err
	}
	for _, d := range descs {
		// Only the live grants: one may have expired since the scan.
		page.Leases = append(page.Leases, d.Holders...)
	}
	return page, nil
}

// describeMany runs describe.lua for each name in one pipeline.
func (s *Store) describeMany(ctx context.Context, names []string) ([]store.Description, error) {
	if len(names) == 0 {
		return nil, nil
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	cmds := make([]*redis.Cmd, len(names))
	_, _ = s.client.Pipelined(cctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			k := s.keys(name)
			cmds[i] = describeScript.EvalSha(cctx, p, []string{k.lease, k.queue, k.waiters}, "", s.lockDelayMS, s.sessionKeepMS())
		}
		return nil
	})
	out := make([]store.Description, len(names))
	for i, name := range names {
		v, err := cmds[i].Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			k := s.keys(name)
			v, err = describeScript.Run(cctx, s.client, []string{k.lease, k.queue, k.waiters}, "", s.lockDelayMS, s.sessionKeepMS()).Result()
		}
		if err != nil {
			return nil, s.wrapErr(ctx, "list", err)
		}
		d, need, err := decodeDescribe(name, v)
		if err == nil && len(need) > 0 {
			// Attached grants whose bounds passed: with their proofs.
			d, err = s.Describe(ctx, name)
		}
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}
