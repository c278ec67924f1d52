package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// On a Cluster a failover moves a shard's slots to its replica, which may
// lack the grants its primary acknowledged last; it kept the slots'
// data-loss markers, so no script notices. The Cluster client reaches each
// node through a client of its own (a node client), and may have pooled
// connections to a replica before it is promoted (the client loads the
// slot map from any node), so checking new connections, as for a Sentinel,
// is not enough. Instead a hook on every node client checks the node
// before this store's commands use it: INFO, as for a standalone primary,
// and a primary that is not the one last seen at that address, and took
// over from another, has every slot it serves quarantined (quarantine.lua
// on each slot's marker) before any command goes on.
//
// A check holds until the topology may have changed: any node's answer
// that says so (MOVED, READONLY, CLUSTERDOWN, MASTERDOWN, LOADING, or no
// answer at all) makes every node be checked again before its next use,
// and so does a node's going unused for nodeRecheckIdle (the client may
// learn of a failover from its periodic reload of the slot map, without an
// error, but a node cannot be demoted and promoted again while this store
// keeps using it: its commands would fail in between). The cost is one
// INFO per node after each such event and a clock read per command.
//
// While New runs, the primaries found are recorded without quarantine (it
// reaches every primary: it checks every slot's marker); a replica
// promoted before this store started is no loss it can see, as for a
// Sentinel.

// nodeRecheckIdle is how long a node may go unused before it is checked
// again.
const nodeRecheckIdle = 500 * time.Millisecond

// clusterWatch checks the nodes of a Cluster client before use.
type clusterWatch struct {
	s        *Store
	client   *redis.ClusterClient
	starting atomic.Bool
	// topology counts the events after which every node is checked again.
	topology atomic.Uint64
	mu       sync.Mutex
	seen     map[string]primarySeen // by node address
	watched  map[*redis.Client]bool
}

// watchCluster hooks every node client of c, those it makes later
// included. Call it before c's first use by the store, with the watch in
// its starting phase until New has checked the markers.
func (s *Store) watchCluster(ctx context.Context, c *redis.ClusterClient) *clusterWatch {
	cw := &clusterWatch{s: s, client: c, seen: make(map[string]primarySeen), watched: make(map[*redis.Client]bool)}
	cw.starting.Store(true)
	c.OnNewNode(cw.watch)
	// Node clients made before this store was: loading the slot map makes
	// them, and OnNewNode hooks those that are new.
	_ = c.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
		cw.watch(node)
		return nil
	})
	return cw
}

func (cw *clusterWatch) watch(node *redis.Client) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if cw.watched[node] {
		return
	}
	cw.watched[node] = true
	node.AddHook(&nodeWatch{cw: cw, node: node, addr: node.Options().Addr})
}

// nodeWatch is the hook of one node client.
type nodeWatch struct {
	cw   *clusterWatch
	node *redis.Client
	addr string
	mu   sync.Mutex
	// checked is the topology count plus one when the node was last found
	// to be a primary already seen (or recorded); 0 until then.
	checked atomic.Uint64
	lastUse atomic.Int64 // unix nanoseconds
}

// uncheckedKey marks the context of the watch's own commands.
type uncheckedKey struct{}

func (w *nodeWatch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *nodeWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// The client's own CLUSTER calls (the slot map, which it may ask a
		// replica for) change nothing.
		if ctx.Value(uncheckedKey{}) != nil || cmd.Name() == "cluster" {
			return next(ctx, cmd)
		}
		if err := w.ready(ctx); err != nil {
			w.answered(ctx, err)
			cmd.SetErr(err)
			return err
		}
		err := next(ctx, cmd)
		w.answered(ctx, err)
		return err
	}
}

func (w *nodeWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(uncheckedKey{}) != nil {
			return next(ctx, cmds)
		}
		if err := w.ready(ctx); err != nil {
			w.answered(ctx, err)
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		err := next(ctx, cmds)
		// A command's MOVED or LOADING may hide behind the pipeline's error.
		answer := err
		for _, cmd := range cmds {
			if topologyChanged(cmd.Err()) {
				answer = cmd.Err()
				break
			}
		}
		w.answered(ctx, answer)
		return err
	}
}

// ready checks the node unless a check still holds.
func (w *nodeWatch) ready(ctx context.Context) error {
	if w.holds() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.holds() {
		return nil
	}
	return w.check(context.WithValue(ctx, uncheckedKey{}, true))
}

func (w *nodeWatch) holds() bool {
	return w.checked.Load() == w.cw.topology.Load()+1 &&
		time.Since(time.Unix(0, w.lastUse.Load())) < nodeRecheckIdle
}

// answered notes an answer of the node: its use, or a sign that the
// topology changed.
func (w *nodeWatch) answered(ctx context.Context, err error) {
	if topologyChanged(err) {
		w.cw.topology.Add(1)
		// The client reloads its slot map after MOVED, but after a node
		// stopped answering only at its reload interval (a minute by
		// default): it would send a failed-over shard's commands to the
		// dead primary until then. The reload is lazy: one at a time.
		w.cw.client.ReloadState(ctx)
		return
	}
	w.lastUse.Store(time.Now().UnixNano())
}

// topologyChanged reports whether err says that the node may no longer be
// the primary it was, or no longer serve what it did.
func topologyChanged(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		for _, prefix := range []string{"MOVED ", "READONLY ", "CLUSTERDOWN ", "MASTERDOWN ", "LOADING "} {
			if strings.HasPrefix(reply.Error(), prefix) {
				return true
			}
		}
		return false
	}
	var netErr net.Error // refused, reset, timed out
	return errors.As(err, &netErr) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// check reads the node's INFO and, for a primary that took over since it
// was last seen at its address, quarantines its slots.
func (w *nodeWatch) check(ctx context.Context) error {
	cw := w.cw
	topology := cw.topology.Load()
	si, err := cw.s.readInfo(ctx, w.node)
	if err != nil {
		// Unwrapped: the Cluster client tells an unreachable node by its
		// errors' types, and then looks for the slots elsewhere.
		return err
	}
	if si.runID == "" { // INFO refused: unchecked
		w.checked.Store(topology + 1)
		w.lastUse.Store(time.Now().UnixNano())
		return nil
	}
	if si.role != "master" {
		return nil // its answers redirect; checked again when promoted
	}
	cw.mu.Lock()
	seen := cw.seen[w.addr]
	cw.mu.Unlock()
	if !cw.starting.Load() && seen.tookOver(si) {
		slots, err := cw.quarantineSlots(ctx, w.node)
		if err != nil {
			return err
		}
		if slots == 0 {
			return nil // not yet serving its slots: checked again at next use
		}
		cw.s.failedOver("a Redis Cluster primary took over (failover)", "node", w.addr, "run_id", si.runID,
			"previous_run_id", seen.runID, "slots", slots)
	}
	cw.mu.Lock()
	cw.seen[w.addr] = si.seen()
	cw.mu.Unlock()
	w.checked.Store(topology + 1)
	w.lastUse.Store(time.Now().UnixNano())
	return nil
}

// quarantineSlots runs quarantine.lua on the marker of every slot node
// serves, on node, and returns how many it serves.
func (cw *clusterWatch) quarantineSlots(ctx context.Context, node *redis.Client) (int, error) {
	s := cw.s
	id, err := node.ClusterMyID(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("redisstore: quarantine after a failover: CLUSTER MYID: %w", err)
	}
	shards, err := node.ClusterShards(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("redisstore: quarantine after a failover: CLUSTER SHARDS: %w", err)
	}
	var slots []int64
	for _, shard := range shards {
		if !slices.ContainsFunc(shard.Nodes, func(n redis.Node) bool { return n.ID == id && n.Role == "master" }) {
			continue
		}
		for _, r := range shard.Slots {
			for slot := r.Start; slot <= r.End; slot++ {
				slots = append(slots, slot)
			}
		}
	}
	if len(slots) == 0 {
		return 0, nil
	}
	if err := quarantineScript.Load(ctx, node).Err(); err != nil {
		return 0, fmt.Errorf("redisstore: quarantine after a failover: load the script: %w", err)
	}
	cmds, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, slot := range slots {
			p.EvalSha(ctx, quarantineScript.Hash(), []string{s.slotMarker(uint16(slot))}, s.quarantineMS)
		}
		return nil
	})
	if err != nil {
		for _, cmd := range cmds {
			if cmd.Err() != nil {
				return 0, fmt.Errorf("redisstore: quarantine after a failover: %s: %w", cmd.Args()[3], cmd.Err())
			}
		}
		return 0, fmt.Errorf("redisstore: quarantine after a failover: %w", err)
	}
	return len(slots), nil
}
