package redistest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvURL is the variable naming the shared test Redis.
const EnvURL = "COORDINATOR_TEST_REDIS_URL"

// URL returns the shared test Redis: the one COORDINATOR_TEST_REDIS_URL
// names, or else a throwaway redis-server that this test binary starts on
// a free loopback port the first time it is asked for, and that dies with
// the binary. A test that needs Redis fails, never skips, when
// redis-server is not installed, and says how to install it.
func URL(t testing.TB) string {
	t.Helper()
	if url := os.Getenv(EnvURL); url != "" {
		return url
	}
	shared.once.Do(startShared)
	if shared.err != nil {
		t.Fatalf("no test Redis: %v", shared.err)
	}
	return shared.url
}

// shared is the throwaway Redis of this test binary.
var shared struct {
	once sync.Once
	url  string
	err  error
	// lifeline is held open for the life of the binary (see startShared).
	lifeline io.WriteCloser
}

func startShared() {
	if _, err := exec.LookPath("redis-server"); err != nil {
		shared.err = fmt.Errorf("redis-server is not installed (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis), or set %s to a Redis the tests may flush", EnvURL)
		return
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		shared.err = err
		return
	}
	for range 10 {
		port, err := freePortNumber()
		if err != nil {
			shared.err = err
			return
		}
		// The server must die with this test binary however it ends. A
		// shell runs it and waits on a pipe whose other end only this
		// process holds: when the process is gone, the read returns and
		// the shell kills the server.
		cmd := exec.Command("sh", "-c", `redis-server "$@" & pid=$!; read -r _; kill "$pid"`, "sh",
			"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
			"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
			"--logfile", filepath.Join(dir, "redis.log"))
		lifeline, err := cmd.StdinPipe()
		if err != nil {
			shared.err = err
			return
		}
		if err := cmd.Start(); err != nil {
			shared.err = fmt.Errorf("start redis-server: %w", err)
			return
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if waitPing(addr, 10*time.Second) == nil {
			shared.url = "redis://" + addr + "/0"
			shared.lifeline = lifeline
			return
		}
		_ = lifeline.Close() // the port was taken after all: try another
		_ = cmd.Wait()
	}
	log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
	shared.err = fmt.Errorf("redis-server did not start; its log:\n%s", log)
}

// waitPing waits until a Redis answers at addr.
func waitPing(addr string, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client returns a client of the shared test Redis, closed at the end of t.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatalf("parse %s: %v", EnvURL, err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Server is a private redis-server process.
type Server struct {
	t       testing.TB
	dir     string
	port    int
	persist bool
	cmd     *exec.Cmd
	// extra are more redis-server arguments (cluster mode).
	extra []string
	// sentinelConf, when set, runs the process as a Sentinel with this file.
	sentinelConf string
	// started: the first start succeeded, so the port is the server's.
	started     bool
	portRetries int
}

// Start runs a private redis-server on a free loopback port until t ends.
// With persist it keeps an append-only file, so a restart keeps its data.
func Start(t testing.TB, persist bool) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not installed: `make test` installs it, or see CONTRIBUTING.md")
	}
	s := &Server{t: t, dir: t.TempDir(), persist: persist}
	s.port = freePort(t)
	s.start()
	t.Cleanup(s.Kill)
	return s
}

func freePort(t testing.TB) int {
	port, err := freePortNumber()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// freeClusterPort is a free port whose cluster bus port (the port plus
// 10000, which a cluster node also binds) is free too.
func freeClusterPort(t testing.TB) int {
	for range 100 {
		port := freePort(t)
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port
	}
	t.Fatal("found no free port pair for a cluster node")
	return 0
}

func freePortNumber() (int, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() {
	s.t.Helper()
	args := []string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--dir", s.dir,
		"--save", "", "--maxmemory-policy", "noeviction",
		"--logfile", filepath.Join(s.dir, "redis.log"),
		// A replica syncs at once rather than after the default 5 s that a
		// primary waits for more replicas to join.
		"--repl-diskless-sync-delay", "0",
	}
	if s.persist {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	args = append(args, s.extra...)
	if s.sentinelConf != "" {
		args = []string{s.sentinelConf, "--sentinel", "--logfile", filepath.Join(s.dir, "redis.log")}
	}
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	if waitPing(s.Addr(), 10*time.Second) == nil {
		if s.answersItself() {
			s.started = true
			return
		}
		// Another test's server took the port between freePort and this
		// start, and answered the PING: on a first start, move to another
		// port; a restart must keep its port.
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		if !s.started && s.portRetries < 5 {
			s.portRetries++
			s.movePort(freePort(s.t))
			s.start()
			return
		}
		s.t.Fatalf("port %d answers for another redis-server than the one started there", s.port)
	}
	log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	s.t.Fatalf("redis-server on port %d did not answer; its log:\n%s", s.port, log)
}

// answersItself reports whether the server answering on s's port is the
// process s started (INFO server's process_id).
func (s *Server) answersItself() bool {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		return false
	}
	return strings.Contains(info, fmt.Sprintf("process_id:%d\r", s.cmd.Process.Pid)) ||
		strings.Contains(info, fmt.Sprintf("process_id:%d\n", s.cmd.Process.Pid))
}

// movePort gives s another port, in its Sentinel configuration too.
func (s *Server) movePort(port int) {
	old := s.port
	s.port = port
	if s.sentinelConf == "" {
		return
	}
	conf, err := os.ReadFile(s.sentinelConf)
	if err != nil {
		s.t.Fatal(err)
	}
	body := strings.Replace(string(conf), fmt.Sprintf("port %d\n", old), fmt.Sprintf("port %d\n", port), 1)
	if err := os.WriteFile(s.sentinelConf, []byte(body), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Kill stops the server at once, as kill -9 would.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart kills the server and starts it again on the same port. Without
// persistence it comes back empty: the data loss a coordinator must survive.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

// Pause makes the server stop answering clients for d (CLIENT PAUSE), as a
// stalled network or an overloaded Redis would.
func (s *Server) Pause(d time.Duration) {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	if err := c.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		s.t.Fatalf("CLIENT PAUSE: %v", err)
	}
}

// Freeze stops the server process (SIGSTOP) until Thaw: it keeps its
// connections open and answers nothing, as a hung Redis or a stalled host
// does, unlike Pause, which the server itself carries out.
func (s *Server) Freeze() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("SIGSTOP redis-server: %v", err)
	}
	s.t.Cleanup(s.Thaw) // a frozen server would outlive Kill's wait otherwise
}

// Thaw resumes a frozen server (SIGCONT); it is a no-op otherwise.
func (s *Server) Thaw() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// StartReplica runs a private redis-server that replicates primary, on a free
// loopback port until t ends, and waits until it is in sync. Like Start,
// persist keeps an append-only file.
func StartReplica(t testing.TB, primary *Server, persist bool) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not installed: `make test` installs it, or see CONTRIBUTING.md")
	}
	s := &Server{t: t, dir: t.TempDir(), persist: persist, port: freePort(t),
		extra: []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.port)}}
	s.start()
	t.Cleanup(s.Kill)
	s.WaitInSync()
	return s
}

// WaitInSync waits until the server, a replica, has its link to its primary
// up and has loaded the primary's data.
func (s *Server) WaitInSync() {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") && !strings.Contains(info, "master_sync_in_progress:1") {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("replica %s did not sync with its primary: %v\n%s", s.Addr(), err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Promote makes the server, a replica, a primary (REPLICAOF NO ONE), as a
// failover does; it keeps what it had replicated.
func (s *Server) Promote() {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	if err := c.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		s.t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
}

// Cluster is a private Redis Cluster: its primaries, each with the
// replicas StartClusterWithReplicas gave it.
type Cluster struct {
	// Nodes are the servers in the order they were started: the primaries
	// first, then their replicas (redis-cli's --cluster create assigns them).
	Nodes []*Server
}

// StartCluster runs a Redis Cluster of n masters (at least 3) on loopback
// ports until t ends, and waits until every slot is served.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWithReplicas(t, n, 0)
}

// StartClusterWithReplicas runs a Redis Cluster of n primaries (at least 3),
// each with replicas replicas, on loopback ports until t ends, and waits
// until every slot is served and every replica is in sync. Nodes fail over
// after a 2 s node timeout.
func StartClusterWithReplicas(t testing.TB, n, replicas int) *Cluster {
	t.Helper()
	c := &Cluster{}
	args := []string{"--cluster", "create"}
	for range n * (1 + replicas) {
		s := &Server{t: t, dir: t.TempDir(), port: freeClusterPort(t), extra: []string{
			"--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
		}}
		s.start()
		t.Cleanup(s.Kill)
		c.Nodes = append(c.Nodes, s)
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs()})
	defer client.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := client.ClusterInfo(context.Background()).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") && client.Set(context.Background(), "redistest:probe", 1, time.Second).Err() == nil &&
			c.replicasInSync(n*replicas) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not become ready: %v\n%s", err, info)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// replicasInSync reports whether want of the nodes are replicas in sync
// with their primaries, and every node knows them as replicas (and lists
// them as online).
func (c *Cluster) replicasInSync(want int) bool {
	synced := 0
	for _, s := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr()})
		info, err := cl.Info(context.Background(), "replication").Result()
		nodes, nerr := cl.ClusterNodes(context.Background()).Result()
		shards, serr := cl.ClusterShards(context.Background()).Result()
		_ = cl.Close()
		if err != nil || nerr != nil || serr != nil || strings.Count(nodes, " slave ")+strings.Count(nodes, ",slave ") != want {
			return false
		}
		// Clients learn of a replica (CLUSTER SLOTS) once it is online.
		listed := 0
		for _, shard := range shards {
			for _, n := range shard.Nodes {
				if n.Role == "replica" && n.Health == "online" {
					listed++
				}
			}
		}
		if listed != want {
			return false
		}
		if strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") &&
			!strings.Contains(info, "master_sync_in_progress:1") {
			synced++
		}
	}
	return synced == want
}

func (c *Cluster) addrs() []string {
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.Addr())
	}
	return addrs
}

// URL is the cluster's redis+cluster:// URL.
func (c *Cluster) URL() string { return "redis+cluster://" + strings.Join(c.addrs(), ",") }

// StartSentinel runs a Sentinel on a loopback port that monitors master
// under the name master, until t ends. It returns the sentinel's address.
func StartSentinel(t testing.TB, master *Server, name string) string {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), port: freePort(t)}
	conf := filepath.Join(s.dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 2000\n",
		s.port, s.dir, name, master.port, name)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s.sentinelConf = conf
	s.start()
	t.Cleanup(s.Kill)
	// The sentinel must know the master before clients ask it.
	client := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	defer client.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		addr, err := client.GetMasterAddrByName(context.Background(), name).Result()
		if err == nil && len(addr) == 2 {
			return s.Addr()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sentinel does not know master %s: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Shard is a primary of a Cluster and its replica (nil without one).
type Shard struct {
	Primary, Replica *Server
}

// ShardOf is the shard serving slot, as the first node that answers sees
// it.
func (c *Cluster) ShardOf(slot int) Shard {
	c.Nodes[0].t.Helper()
	for _, shard := range c.shards() {
		for _, r := range shard.slots {
			if int64(slot) >= r.Start && int64(slot) <= r.End {
				return shard.Shard
			}
		}
	}
	c.Nodes[0].t.Fatalf("no node serves slot %d", slot)
	return Shard{}
}

// Shards are the Cluster's shards that serve slots.
func (c *Cluster) Shards() []Shard {
	var shards []Shard
	for _, s := range c.shards() {
		if len(s.slots) > 0 {
			shards = append(shards, s.Shard)
		}
	}
	return shards
}

type shardSlots struct {
	Shard
	slots []redis.SlotRange
}

func (c *Cluster) shards() []shardSlots {
	t := c.Nodes[0].t
	t.Helper()
	byAddr := make(map[string]*Server)
	for _, n := range c.Nodes {
		byAddr[n.Addr()] = n
	}
	for _, n := range c.Nodes {
		if n.cmd == nil {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		shards, err := cl.ClusterShards(context.Background()).Result()
		_ = cl.Close()
		if err != nil {
			continue
		}
		var out []shardSlots
		for _, shard := range shards {
			s := shardSlots{slots: shard.Slots}
			for _, node := range shard.Nodes {
				srv := byAddr[nodeAddr(node)]
				switch {
				case node.Role == "master" && node.Health != "fail":
					s.Primary = srv
				case node.Role == "replica" && node.Health != "fail":
					s.Replica = srv
				}
			}
			out = append(out, s)
		}
		return out
	}
	t.Fatal("no node of the cluster answers CLUSTER SHARDS")
	return nil
}

// nodeAddr is a CLUSTER SHARDS node's host:port.
func nodeAddr(n redis.Node) string { return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)) }

// SlotOfKey is the slot of key (CLUSTER KEYSLOT).
func (c *Cluster) SlotOfKey(key string) int {
	t := c.Nodes[0].t
	t.Helper()
	for _, n := range c.Nodes {
		if n.cmd == nil {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		slot, err := cl.ClusterKeySlot(context.Background(), key).Result()
		_ = cl.Close()
		if err == nil {
			return int(slot)
		}
	}
	t.Fatal("no node of the cluster answers CLUSTER KEYSLOT")
	return 0
}

// MoveSlot migrates slot from the primary serving it to the primary to,
// the way redis-cli --cluster reshard does: the target IMPORTING, the
// source MIGRATING, MIGRATE of its keys a few at a time (clients meanwhile
// meet the half-moved slot: ASK and TRYAGAIN), then every node told the new
// owner. It returns how many keys moved.
func (c *Cluster) MoveSlot(slot int, to *Server) int {
	t := c.Nodes[0].t
	t.Helper()
	from := c.ShardOf(slot).Primary
	if from == to {
		return 0
	}
	ctx := context.Background()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("moving slot %d from %s to %s: %s: %v", slot, from.Addr(), to.Addr(), what, err)
		}
	}
	src := redis.NewClient(&redis.Options{Addr: from.Addr()})
	defer src.Close()
	dst := redis.NewClient(&redis.Options{Addr: to.Addr()})
	defer dst.Close()
	srcID, err := src.ClusterMyID(ctx).Result()
	must("CLUSTER MYID", err)
	dstID, err := dst.ClusterMyID(ctx).Result()
	must("CLUSTER MYID", err)
	must("SETSLOT IMPORTING", dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must("SETSLOT MIGRATING", src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	host, port, _ := net.SplitHostPort(to.Addr())
	moved := 0
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 3).Result()
		must("GETKEYSINSLOT", err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must("MIGRATE", src.Do(ctx, args...).Err())
		moved += len(keys)
		time.Sleep(2 * time.Millisecond)
	}
	// The target first, then the source, then the others: the order
	// redis-cli uses, so that no node ever redirects to a stale owner.
	order := []*Server{to, from}
	for _, n := range c.Nodes {
		if n != to && n != from && n.cmd != nil {
			order = append(order, n)
		}
	}
	for _, n := range order {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		err := cl.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
		_ = cl.Close()
		// A replica answers that it is not a primary: it learns from its own.
		if err != nil && !strings.Contains(err.Error(), "only with masters") {
			must("SETSLOT NODE", err)
		}
	}
	return moved
}

// FailOver makes the replica of a shard its primary: planned (CLUSTER
// FAILOVER, which waits until the replica caught up), or unplanned (the
// primary killed; the Cluster promotes its replica after the node
// timeout), in which case the old primary is started again and rejoins as
// the new primary's replica. It returns once every node agrees and the
// replica of the shard is in sync again.
func (c *Cluster) FailOver(shard Shard, planned bool) {
	t := c.Nodes[0].t
	t.Helper()
	ctx := context.Background()
	if planned {
		cl := redis.NewClient(&redis.Options{Addr: shard.Replica.Addr()})
		err := cl.Do(ctx, "CLUSTER", "FAILOVER").Err()
		_ = cl.Close()
		if err != nil {
			t.Fatalf("CLUSTER FAILOVER on %s: %v", shard.Replica.Addr(), err)
		}
	} else {
		shard.Primary.Kill()
	}
	c.waitPrimary(shard.Replica, 60*time.Second)
	if !planned {
		shard.Primary.start()
	}
	shard.Primary.WaitInSync()
	deadline := time.Now().Add(60 * time.Second)
	for !c.agree(shard.Replica, shard.Primary) {
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not settle after the failover of %s to %s", shard.Primary.Addr(), shard.Replica.Addr())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPrimary waits until s is a primary.
func (c *Cluster) waitPrimary(s *Server, within time.Duration) {
	s.t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer cl.Close()
	deadline := time.Now().Add(within)
	for {
		info, err := cl.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:master") {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s was not promoted within %s: %v", s.Addr(), within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// agree reports whether every node is up, sees the cluster ok, and knows
// primary as a primary serving slots and replica as an online replica.
func (c *Cluster) agree(primary, replica *Server) bool {
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		info, err := cl.ClusterInfo(context.Background()).Result()
		shards, serr := cl.ClusterShards(context.Background()).Result()
		_ = cl.Close()
		if err != nil || serr != nil || !strings.Contains(info, "cluster_state:ok") {
			return false
		}
		ok := false
		for _, shard := range shards {
			var p, r bool
			for _, node := range shard.Nodes {
				addr := nodeAddr(node)
				p = p || (addr == primary.Addr() && node.Role == "master" && node.Health == "online")
				r = r || (addr == replica.Addr() && node.Role == "replica" && node.Health == "online")
			}
			ok = ok || (p && r && len(shard.Slots) > 0)
		}
		if !ok {
			return false
		}
	}
	return true
}
