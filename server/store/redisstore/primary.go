package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// A failover to a replica loses the grants that the old primary acknowledged
// and had not yet replicated; when the replica kept the data-loss marker,
// no script notices. So every new connection first asks the server who it
// is (INFO: run_id, role, replication IDs), and a primary that is not the
// one this store saw before, and that took over from another (it carries a
// previous replication ID) or replaced one that had replicas, starts the
// data-loss quarantine on that connection before it carries any call.
// Connections are pooled, so this costs one INFO per new connection, and a
// failover always means new connections. A primary restarted in place without
// replicas is not a failover: it kept what its persistence kept, and a
// marker it lost is found by the scripts.

// zeroReplID is the secondary replication ID of a primary that never took
// over from another.
const zeroReplID = "0000000000000000000000000000000000000000"

// primaryWatch remembers the primary this store last connected to.
type primaryWatch struct {
	mu       sync.Mutex
	runID    string // "" until the first connection
	replID   string
	replicas int // connected replicas when last seen
}

// serverInfo is what checkPrimary reads from INFO.
type serverInfo struct {
	role, runID, replID, replID2 string
	replicas                     int
}

func parseInfo(text string) serverInfo {
	var si serverInfo
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "role":
			si.role = v
		case "run_id":
			si.runID = v
		case "master_replid":
			si.replID = v
		case "master_replid2":
			si.replID2 = v
		case "connected_slaves":
			si.replicas, _ = strconv.Atoi(v)
		}
	}
	return si
}

// watchPrimary makes every new connection of a standalone or Sentinel client
// check the primary before use (see above). The client's own OnConnect, if
// any, runs first.
func (s *Store) watchPrimary(c *redis.Client) {
	o := c.Options()
	prev := o.OnConnect
	o.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if prev != nil {
			if err := prev(ctx, cn); err != nil {
				return err
			}
		}
		return s.checkPrimary(ctx, cn)
	}
}

// checkPrimary runs on a new connection, before any call uses it. It holds
// the watch's lock while it quarantines, so that no other new connection is
// used before the quarantine is written.
func (s *Store) checkPrimary(ctx context.Context, cn *redis.Conn) error {
	text, err := cn.Info(ctx).Result()
	var reply redis.Error
	if errors.As(err, &reply) {
		// INFO refused (an ACL, a renamed command): carry on unchecked.
		s.infoRefused.Do(func() {
			s.log.Warn("Redis refused INFO: a failover to a replica that kept the data-loss marker goes unnoticed", "error", err)
		})
		return nil
	}
	if err != nil {
		return fmt.Errorf("redisstore: check the primary: %w", err)
	}
	si := parseInfo(text)
	if si.role != "master" || si.runID == "" {
		return nil // writes fail with READONLY; nothing to compare
	}
	w := &s.primary
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := w.runID != "" && (si.runID != w.runID || si.replID != w.replID)
	if changed && (si.replID2 != zeroReplID || w.replicas > 0) {
		if err := quarantineScript.Run(ctx, cn, []string{s.prefix + markerSuffix}, s.quarantineMS).Err(); err != nil {
			return fmt.Errorf("redisstore: quarantine after a change of primary: %w", err)
		}
		s.log.Error("the Redis primary changed (failover): grants it had not replicated may be lost; "+
			"grants wait for the quarantine", "run_id", si.runID, "previous_run_id", w.runID, "quarantine", s.quarantine)
		s.marks.forget()
		if s.onDataLoss != nil {
			s.onDataLoss(s.quarantine)
		}
	}
	w.runID, w.replID, w.replicas = si.runID, si.replID, si.replicas
	return nil
}
