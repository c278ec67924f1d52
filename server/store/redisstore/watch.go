package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/server/store"
)

// Observing many idle elections must cost Redis little: Watch reads each
// name with one command (HMGET of its lease) and marks it watched again only
// when the mark it last set is past half its life, in one script call per
// watchBatch names (per Cluster slot and watchBatch names on a Cluster), all
// calls of one Watch in one pipeline.
const watchBatch = 200

// Watch implements store.Notifier: changes of a watched name are published
// on the events channel; those of other names only while a waiter is queued.
// It fills Held and Lease of each Description; LastToken and Waiters, which
// observers do not need, are left zero.
func (s *Store) Watch(ctx context.Context, names []string, ttl time.Duration) ([]store.Description, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("redisstore: watch: ttl %s is not positive", ttl)
	}
	out := make([]store.Description, len(names))
	if len(names) == 0 {
		return out, nil
	}
	// Taken before the calls are sent: Redis starts each mark later, so
	// the mark lasts at least until sent+ttl.
	sent := time.Now()
	due, gen := s.marks.due(names, ttl, sent)
	groups := s.watchGroups(names)
	calls := make([]watchCall, len(groups))
	for g, idx := range groups {
		calls[g] = s.watchCall(names, idx, due, ttl)
	}

	cctx, cancel := s.bound(ctx)
	defer cancel()
	if len(calls) == 1 {
		// Shares a pipeline with concurrent calls of other callers.
		deadline, _ := cctx.Deadline()
		calls[0].cmd, _ = s.run(cctx, deadline, false, watchScript, calls[0].keys, calls[0].args...)
	} else {
		_, _ = s.client.Pipelined(cctx, func(p redis.Pipeliner) error {
			for i := range calls {
				calls[i].cmd = watchScript.EvalSha(cctx, p, calls[i].keys, calls[i].args...)
			}
			return nil
		})
	}
	group := make([]string, 0, watchBatch)
	res := make([]store.Description, 0, watchBatch)
	for g, c := range calls {
		v, err := c.cmd.Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// Redis restarted or flushed its scripts: send the source.
			v, err = watchScript.Run(cctx, s.client, c.keys, c.args...).Result()
		}
		if err != nil {
			return nil, s.wrapErr(ctx, "watch", err)
		}
		group, res = group[:0], res[:len(groups[g])]
		for _, i := range groups[g] {
			group = append(group, names[i])
		}
		need, err := decodeWatch(group, v, res)
		if err == nil && len(need) > 0 {
			// Attached grants whose bounds passed: with their proofs.
			if v, err = s.watchWithProofs(ctx, c, need); err == nil {
				_, err = decodeWatch(group, v, res)
			}
		}
		if err != nil {
			return nil, err
		}
		for j, i := range groups[g] {
			out[i] = res[j]
		}
	}
	s.marks.marked(names, due, gen, sent.Add(ttl))
	return out, nil
}

type watchCall struct {
	keys []string
	args []any
	cmd  *redis.Cmd
}

// watchCall builds the watch.lua call for names[i], i in idx.
func (s *Store) watchCall(names []string, idx []int, due []bool, ttl time.Duration) watchCall {
	c := watchCall{keys: make([]string, 0, len(idx)), args: make([]any, 0, 4+len(idx))}
	c.args = append(c.args, durationMS(ttl))
	for _, i := range idx {
		k := s.keys(names[i])
		c.keys = append(c.keys, k.lease)
		if due[i] {
			c.args = append(c.args, "1")
		} else {
			c.args = append(c.args, "")
		}
	}
	// No proofs at first: most calls need none (see watchWithProofs).
	c.args = append(c.args, "", s.lockDelayMS, s.sessionKeepMS())
	return c
}

// watchWithProofs calls c again until it has the proofs of sessions it
// needs, first those of need, and returns its reply.
func (s *Store) watchWithProofs(ctx context.Context, c watchCall, need []string) (any, error) {
	proofs := proofSet{}
	if err := s.prove(ctx, proofs, need); err != nil {
		return nil, err
	}
	var reply any
	err := s.withProofs(ctx, proofs, "", func(text string) ([]string, error) {
		c.args[len(c.args)-3] = text
		v, err := s.call(ctx, "watch", watchScript, c.keys, c.args...)
		if err != nil {
			return nil, err
		}
		reply = v
		need, _, err := decodeNeed("watch", v)
		return need, err
	})
	return reply, err
}

// watchGroups splits the indexes of names into groups of at most watchBatch
// whose keys a single script may touch: on a Cluster, names of one slot.
func (s *Store) watchGroups(names []string) [][]int {
	var groups [][]int
	if !s.cluster {
		for start := 0; start < len(names); start += watchBatch {
			idx := make([]int, 0, min(watchBatch, len(names)-start))
			for i := start; i < min(start+watchBatch, len(names)); i++ {
				idx = append(idx, i)
			}
			groups = append(groups, idx)
		}
		return groups
	}
	open := map[uint16]int{} // slot -> index in groups of its group being filled
	for i, name := range names {
		slot := slotOf(encodeName(name))
		g, ok := open[slot]
		if !ok || len(groups[g]) == watchBatch {
			g = len(groups)
			open[slot] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// marks remembers until when (local clock) this store's Watch calls have
// marked names as watched, so that a name is marked again only when its mark
// is past half its life rather than on every read. Marks that Redis may have
// lost are forgotten: after data loss, and whenever the events subscription
// is confirmed anew (a restart or failover breaks it).
type marks struct {
	mu        sync.Mutex
	until     map[string]time.Time
	nextSweep time.Time
	// gen counts forget calls: a Watch that started before one must not
	// record the marks it set, which Redis may have lost meanwhile.
	gen uint64
}

// marksSweepEvery is how often expired entries are dropped, so that the map
// holds only names watched lately.
const marksSweepEvery = time.Minute

// due reports, for each name, whether it must be marked by a Watch for ttl
// sent at now, and the generation to give marked.
func (m *marks) due(names []string, ttl time.Duration, now time.Time) ([]bool, uint64) {
	due := make([]bool, len(names))
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, name := range names {
		until, ok := m.until[name]
		due[i] = !ok || until.Sub(now) < ttl/2
	}
	return due, m.gen
}

// marked records the marks that a Watch set, lasting until until, unless
// they were forgotten since due.
func (m *marks) marked(names []string, due []bool, gen uint64, until time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gen != m.gen {
		return
	}
	if m.until == nil {
		m.until = map[string]time.Time{}
	}
	now := time.Now()
	if now.After(m.nextSweep) {
		m.nextSweep = now.Add(marksSweepEvery)
		for name, u := range m.until {
			if !u.After(now) {
				delete(m.until, name)
			}
		}
	}
	for i, name := range names {
		if due[i] {
			m.until[name] = until
		}
	}
}

// forget drops every record, so that the next Watch of each name marks it.
func (m *marks) forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	clear(m.until)
}
