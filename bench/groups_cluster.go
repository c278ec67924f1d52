package main

// The groups suite's Redis Cluster: three primaries, redis-server children
// of the bench, and names placed in chosen slots.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisCluster is a Redis Cluster of primaries without replicas, each a
// redis-server child without persistence.
type redisCluster struct {
	nodes  []*exec.Cmd
	addrs  []string
	rdbs   []*redis.Client // one client a node, for INFO
	remove func()
	undo   func()
}

// startRedisCluster starts n cluster-enabled redis-servers on free loopback
// ports and joins them with redis-cli --cluster create, each node serving
// an equal range of the slots.
func startRedisCluster(ctx context.Context, n int) (*redisCluster, error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, fmt.Errorf("redis-cli (for --cluster create): %w", err)
	}
	dir, err := os.MkdirTemp("", "bench-cluster-")
	if err != nil {
		return nil, err
	}
	c := &redisCluster{remove: removeOnExit(dir)}
	c.undo = onExit(c.kill)
	for i := range n {
		port, err := freeClusterPort()
		if err != nil {
			c.stop()
			return nil, err
		}
		nodeDir := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(nodeDir, 0o700); err != nil {
			c.stop()
			return nil, err
		}
		cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", nodeDir,
			"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
			"--cluster-enabled", "yes", "--cluster-node-timeout", "5000", "--logfile", filepath.Join(nodeDir, "redis.log"))
		cmd.SysProcAttr = childAttr()
		if err := cmd.Start(); err != nil {
			c.stop()
			return nil, fmt.Errorf("start a cluster node: %w", err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		c.nodes = append(c.nodes, cmd)
		c.addrs = append(c.addrs, addr)
		c.rdbs = append(c.rdbs, redis.NewClient(&redis.Options{Addr: addr}))
	}
	for i, rdb := range c.rdbs {
		if err := waitPing(ctx, rdb, 10*time.Second); err != nil {
			c.stop()
			return nil, fmt.Errorf("cluster node %s: %w", c.addrs[i], err)
		}
	}
	args := append(append([]string{"--cluster", "create"}, c.addrs...), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		c.stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs})
	defer func() { _ = cc.Close() }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		info, err := cc.ClusterInfo(ctx).Result()
		if err == nil && !strings.Contains(info, "cluster_state:ok") {
			err = fmt.Errorf("CLUSTER INFO:\n%s", info)
		}
		if err == nil {
			err = cc.Set(ctx, "bench:probe", 1, time.Second).Err()
		}
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("the cluster did not become ready: %w", err)
		}
	}
}

// freeClusterPort is a free port whose cluster bus port (the port + 10000,
// which a node binds too) is free as well.
func freeClusterPort() (int, error) {
	for range 100 {
		_, p, _ := net.SplitHostPort(freeAddr())
		port, _ := strconv.Atoi(p)
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port pair for a cluster node")
}

func waitPing(ctx context.Context, rdb *redis.Client, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// url is the cluster's address as the coordinator takes it.
func (c *redisCluster) url() string { return "redis+cluster://" + strings.Join(c.addrs, ",") }

// primarySlots returns one slot served by each primary, in ascending
// order (the order a group takes its slots in): the middle of each shard's
// first range (CLUSTER SHARDS).
func (c *redisCluster) primarySlots(ctx context.Context) ([]uint16, error) {
	shards, err := c.rdbs[0].ClusterShards(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SHARDS: %w", err)
	}
	var slots []uint16
	for _, sh := range shards {
		if len(sh.Slots) > 0 {
			slots = append(slots, uint16((sh.Slots[0].Start+sh.Slots[0].End)/2))
		}
	}
	if len(slots) != len(c.nodes) {
		return nil, fmt.Errorf("CLUSTER SHARDS: %d primaries serve slots, want %d", len(slots), len(c.nodes))
	}
	slices.Sort(slots)
	return slots, nil
}

// checkSlot asks the cluster which slot the Redis store's key of name lies
// in, to confirm that slotOfName agrees with Redis.
func (c *redisCluster) checkSlot(ctx context.Context, name string) error {
	got, err := c.rdbs[0].ClusterKeySlot(ctx, "p:{"+name+"}:lease").Result()
	if err != nil {
		return fmt.Errorf("CLUSTER KEYSLOT: %w", err)
	}
	if want := slotOfName(name); uint16(got) != want {
		return fmt.Errorf("the slot of %q: Redis says %d, the bench %d", name, got, want)
	}
	return nil
}

func (c *redisCluster) kill() {
	for _, cmd := range c.nodes {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	c.nodes = nil
}

func (c *redisCluster) stop() {
	for _, rdb := range c.rdbs {
		_ = rdb.Close()
	}
	c.undo()
	c.kill()
	c.remove()
}

// crc16Table is CRC16-XMODEM's (polynomial 0x1021), the checksum Redis
// Cluster hashes keys with, a byte at a time.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// slotOfName is the Cluster slot of a name's keys in the Redis store: its
// keys share the hash tag {name} (a name without '%', '{' or '}' is its own
// encoding, as every name of this suite is).
func slotOfName(name string) uint16 {
	var crc uint16
	for i := 0; i < len(name); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^name[i]]
	}
	return crc % 16384
}

// slotNames hands out distinct names, each in the slot asked for, found by
// trying prefix0, prefix1, … in turn.
type slotNames struct {
	prefix string
	slots  []uint16
	found  [][]string // by index into slots
	next   int
}

func newSlotNames(prefix string, slots []uint16) *slotNames {
	return &slotNames{prefix: prefix, slots: slots, found: make([][]string, len(slots))}
}

// in returns a name not handed out before whose keys lie in slots[k].
func (p *slotNames) in(k int) string {
	for len(p.found[k]) == 0 {
		name := p.prefix + strconv.Itoa(p.next)
		p.next++
		slot := slotOfName(name)
		for j, s := range p.slots {
			if s == slot {
				p.found[j] = append(p.found[j], name)
			}
		}
	}
	name := p.found[k][0]
	p.found[k] = p.found[k][1:]
	return name
}
