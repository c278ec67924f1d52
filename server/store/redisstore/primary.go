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
	mu   sync.Mutex
	seen primarySeen
}

// primarySeen is a primary as this store last saw it.
type primarySeen struct {
	runID    string // "" until seen
	replID   string
	replicas int // connected replicas when last seen
}

// tookOver reports whether si, a primary, is not the one seen and bears
// the marks of a failover: it took over from another (it carries a
// previous replication ID) or replaced one that had replicas.
func (p primarySeen) tookOver(si serverInfo) bool {
	changed := si.runID != p.runID || si.replID != p.replID
	return changed && (si.replID2 != zeroReplID || p.replicas > 0)
}

func (si serverInfo) seen() primarySeen {
	return primarySeen{runID: si.runID, replID: si.replID, replicas: si.replicas}
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
	si, err := s.readInfo(ctx, cn)
	if err != nil {
		return fmt.Errorf("redisstore: check the primary: %w", err)
	}
	if si.role != "master" || si.runID == "" {
		return nil // a refused INFO or a replica: nothing to compare
	}
	w := &s.primary
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen.runID != "" && w.seen.tookOver(si) {
		if err := quarantineScript.Run(ctx, cn, []string{s.prefix + markerSuffix}, s.quarantineMS).Err(); err != nil {
			return fmt.Errorf("redisstore: quarantine after a change of primary: %w", err)
		}
		s.failedOver("the Redis primary changed (failover)", "run_id", si.runID, "previous_run_id", w.seen.runID)
	}
	w.seen = si.seen()
	return nil
}

// readInfo reads INFO from c. A Redis that refuses INFO (an ACL, a renamed
// command) is not checked: its info is empty, and the store warns once.
// Other errors are returned as the client gave them.
func (s *Store) readInfo(ctx context.Context, c interface {
	Info(context.Context, ...string) *redis.StringCmd
},
) (serverInfo, error) {
	text, err := c.Info(ctx, "server", "replication").Result()
	var reply redis.Error
	if errors.As(err, &reply) {
		s.infoRefused.Do(func() {
			s.log.Warn("Redis refused INFO: a failover to a replica that kept the data-loss marker goes unnoticed", "error", err)
		})
		return serverInfo{}, nil
	}
	if err != nil {
		return serverInfo{}, err
	}
	return parseInfo(text), nil
}

// failedOver logs a failover that started a quarantine and tells
// OnDataLoss.
func (s *Store) failedOver(what string, args ...any) {
	s.log.Error(what+": grants it had not replicated may be lost; grants wait for the quarantine",
		append(args, "quarantine", s.quarantine)...)
	s.marks.forget()
	if s.onDataLoss != nil {
		s.onDataLoss(s.quarantine)
	}
}
