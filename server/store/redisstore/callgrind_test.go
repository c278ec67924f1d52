package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/store"
)

// The instructions Redis runs per uncontended cycle (acquire + release of an
// exclusive lock), counted by valgrind's callgrind: timings on a shared
// machine move by ±10% from one window to the next, instructions by 0.1%.
// scripts/callgrind-cycle.sh runs it; bench/README.md ("Where a cycle's time
// goes") has the figures.
//
// A private redis-server runs under callgrind; each measured window
// (acquires of every name, then their releases) zeroes the counters first
// and dumps them after, so that start-up, the warm-up and the test's other
// commands count for nothing. The calls are pipelined 50 a pipeline, as a
// busy coordinator sends them. Variants: a lease of its own, one attached to
// a session (the Go SDK's default), and the same commands as bsm/redislock's
// uncontended cycle (SET NX PX; GET and DEL) as the yardstick; then a
// handoff to the first of two waiters queued, in three windows: the
// release, the waiter's grant, and the releaser's waiting acquire that
// queues it again (the bench's handoff suite: one Acquire of a line per
// handoff). Then groups of 1, 2 and 8 names of one slot, leases of their
// own (acquire_group.lua and release_group.lua, a call a group), per name:
// a group of one is also what each slot of a Cluster group costs, one
// call a slot.
const (
	envCallgrindCycles = "COORDINATOR_CALLGRIND_CYCLES" // cycles a window; unset skips the test
	envCallgrindOut    = "COORDINATOR_CALLGRIND_OUT"    // directory to keep the dumps in (callgrind_annotate)
	callgrindPipeline  = 50
)

// The yardstick's scripts: the uncontended commands and arguments of
// bsm/redislock's Obtain (value, token length, ttl) and Release (value), a
// 22-byte value, its default token length.
var (
	yardstickObtain  = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3])`)
	yardstickRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

func TestCallgrindCycle(t *testing.T) {
	cycles, _ := strconv.Atoi(os.Getenv(envCallgrindCycles))
	if cycles <= 0 {
		t.Skipf("set %s (scripts/callgrind-cycle.sh) to count Redis' instructions per cycle under callgrind", envCallgrindCycles)
	}
	cycles = (cycles + callgrindPipeline - 1) / callgrindPipeline * callgrindPipeline
	cg := startCallgrindRedis(t)
	ctx := context.Background()
	s, err := NewFromURL(ctx, cg.url, Options{CallTimeout: time.Minute, NewStore: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.detacher.delay = time.Hour // no detach in the windows: the cycles alone
	// The data-loss marker as a store has it whose first coordinator
	// started without init-store: the end of a quarantine that passed.
	if err := s.client.Set(ctx, s.marker, strconv.FormatInt(time.Now().UnixMilli(), 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	sess, err := s.CreateSession(ctx, "bench", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	names := func(prefix string) []string {
		out := make([]string, cycles)
		for i := range out {
			out[i] = fmt.Sprintf("%s/%05d", prefix, i)
		}
		return out
	}
	own, attached, plain, queued := names("own"), names("attached"), names("plain"), names("queued")
	// Warm-up: every name's first grant sets its key's expiry; the ones
	// measured find it set, as a name used again and again does.
	for _, name := range own {
		mustRelease(t, s, mustGrant(t, s, store.AcquireRequest{Name: name, Holder: "w", TTL: time.Minute}))
	}
	// Twice for an attached name: its second grant makes it hot (its key
	// kept the session keep ahead), as a name locked again and again is.
	for range 2 {
		for _, name := range attached {
			mustRelease(t, s, mustGrant(t, s, inSession(name, "w", sess)))
		}
	}

	// A handoff's names: held by "a", "b" and "c" queued behind, so that
	// the queue never empties, as a busy lock's; one handoff unmeasured,
	// so that the measured one finds the keys' expiries set.
	waiting := func(name, holder string) store.AcquireRequest {
		// A place that outlives the slow windows under callgrind.
		return store.AcquireRequest{Name: name, Holder: holder, TTL: time.Minute, Waiter: holder, WaiterTTL: time.Hour}
	}
	holding := callgrindAcquire(ctx, t, s, queued, func(name string) store.AcquireRequest { return waiting(name, "a") }, "")
	for _, w := range []string{"b", "c"} {
		callgrindQueue(ctx, t, s, queued, func(name string) store.AcquireRequest { return waiting(name, w) })
	}
	holding = callgrindHandoff(ctx, t, s, queued, "a", "b", holding, waiting, nil)

	for _, sc := range []*redis.Script{yardstickObtain, yardstickRelease} {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// A window: the acquires, then (refuse, when not nil) a TryLock of
	// another holder on every name, refused, then the releases.
	type window struct{ acquire, refuse, release int64 }
	measure := func(label string, acquire func() []uint64, refuse func(), release func([]uint64)) window {
		var w window
		cg.zero(t)
		tokens := acquire()
		w.acquire = cg.dump(t, label+"-acquire") / int64(cycles)
		if refuse != nil {
			cg.zero(t)
			refuse()
			w.refuse = cg.dump(t, label+"-refuse") / int64(cycles)
		}
		cg.zero(t)
		release(tokens)
		w.release = cg.dump(t, label+"-release") / int64(cycles)
		return w
	}
	ownW := measure("own", func() []uint64 {
		return callgrindAcquire(ctx, t, s, own, func(name string) store.AcquireRequest {
			return store.AcquireRequest{Name: name, Holder: "w", TTL: time.Minute}
		}, "")
	}, func() { callgrindRefuse(ctx, t, s, own) }, func(tokens []uint64) { callgrindRelease(ctx, t, s, own, tokens, "w") })
	attW := measure("attached", func() []uint64 {
		return callgrindAcquire(ctx, t, s, attached, func(name string) store.AcquireRequest {
			return inSession(name, "w", sess)
		}, sess.ID)
	}, nil, func(tokens []uint64) { callgrindRelease(ctx, t, s, attached, tokens, "w") })
	plainW := measure("yardstick", func() []uint64 {
		callgrindPlain(ctx, t, s.client, plain, false, func(p redis.Pipeliner, key string) *redis.Cmd {
			return yardstickObtain.EvalSha(ctx, p, []string{key}, "0123456789abcdefghijkl", "22", "60000")
		})
		return nil
	}, func() {
		callgrindPlain(ctx, t, s.client, plain, true, func(p redis.Pipeliner, key string) *redis.Cmd {
			return yardstickObtain.EvalSha(ctx, p, []string{key}, "abcdefghijkl0123456789", "22", "60000")
		})
	}, func([]uint64) {
		callgrindPlain(ctx, t, s.client, plain, false, func(p redis.Pipeliner, key string) *redis.Cmd {
			return yardstickRelease.EvalSha(ctx, p, []string{key}, "0123456789abcdefghijkl")
		})
	})

	var handoff [3]int64
	callgrindHandoff(ctx, t, s, queued, "b", "c", holding, waiting, func(step int, run func()) {
		cg.zero(t)
		run()
		handoff[step] = cg.dump(t, fmt.Sprintf("handoff-%d", step)) / int64(cycles)
	})

	// Groups, last: their scripts, loaded into Redis, make every script
	// cost a little more (see storeScripts.all). The same number of names
	// in each size, so that the windows are per name alike.
	groupSizes := []int{1, 2, 8}
	groupW := make([]window, len(groupSizes))
	for _, sc := range []*redis.Script{s.scripts.acquireGroup, s.scripts.releaseGroup} {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A lease of its own again, beside the group scripts: the groups'
	// yardstick.
	ownLoaded := measure("own-loaded", func() []uint64 {
		return callgrindAcquire(ctx, t, s, own, func(name string) store.AcquireRequest {
			return store.AcquireRequest{Name: name, Holder: "w", TTL: time.Minute}
		}, "")
	}, nil, func(tokens []uint64) { callgrindRelease(ctx, t, s, own, tokens, "w") })
	for k, size := range groupSizes {
		groups := slices.Collect(slices.Chunk(names(fmt.Sprintf("group%d", size)), size))
		callgrindReleaseGroups(ctx, t, s, groups, callgrindAcquireGroups(ctx, t, s, groups)) // warm-up
		w := measure(fmt.Sprintf("group%d", size), func() []uint64 {
			return slices.Concat(callgrindAcquireGroups(ctx, t, s, groups)...)
		}, nil, func(tokens []uint64) {
			callgrindReleaseGroups(ctx, t, s, groups, slices.Collect(slices.Chunk(tokens, size)))
		})
		groupW[k] = w
	}

	report := fmt.Sprintf("Redis instructions per cycle (%d cycles a window, %d calls a pipeline):\n", cycles, callgrindPipeline)
	for _, row := range []struct {
		what string
		w    window
	}{{"lease of its own", ownW}, {"attached to a session", attW}, {"yardstick: SET NX PX; GET + DEL", plainW}} {
		report += fmt.Sprintf("  %-32s acquire %7d  release %7d  cycle %7d  (%.2f× the yardstick)", row.what,
			row.w.acquire, row.w.release, row.w.acquire+row.w.release,
			float64(row.w.acquire+row.w.release)/float64(plainW.acquire+plainW.release))
		if row.w.refuse > 0 {
			report += fmt.Sprintf("  refused TryLock %7d (%.2f×)", row.w.refuse, float64(row.w.refuse)/float64(plainW.refuse))
		}
		report += "\n"
	}
	ownCycle := ownLoaded.acquire + ownLoaded.release
	report += fmt.Sprintf("  %-32s acquire %7d  release %7d  cycle %7d\n", "lease of its own, groups loaded",
		ownLoaded.acquire, ownLoaded.release, ownCycle)
	for k, size := range groupSizes {
		w := groupW[k]
		report += fmt.Sprintf("  %-32s acquire %7d  release %7d  cycle %7d  (%.2f× a lease of its own's, per name)\n",
			fmt.Sprintf("a group of %d, per name", size), w.acquire, w.release, w.acquire+w.release, float64(w.acquire+w.release)/float64(ownCycle))
	}
	report += fmt.Sprintf("  %-32s %7d  (%.2f× three leases of their own)\n", "a group over 3 Cluster slots",
		3*(groupW[0].acquire+groupW[0].release), float64(3*(groupW[0].acquire+groupW[0].release))/float64(3*ownCycle))
	// scripts/callgrind-cycle.sh prints up to the handoff's line: it comes last.
	report += fmt.Sprintf("  %-32s release %7d  the next's grant %7d  the releaser queued again %7d  handoff %7d\n", "a handoff, two waiters queued",
		handoff[0], handoff[1], handoff[2], handoff[0]+handoff[1]+handoff[2])
	fmt.Print(report)
}

// callgrindHandoff hands each name, held by holder under tokens[i] with
// next queued, to next: holder releases, next's waiting acquire is
// granted, and holder asks again as a waiter and is queued. It returns
// next's tokens. measure, when not nil, runs each of the three steps
// (0, 1, 2) in a window of its own.
func callgrindHandoff(ctx context.Context, t *testing.T, s *Store, names []string, holder, next string, tokens []uint64,
	waiting func(name, holder string) store.AcquireRequest, measure func(step int, run func()),
) []uint64 {
	t.Helper()
	if measure == nil {
		measure = func(_ int, run func()) { run() }
	}
	var granted []uint64
	measure(0, func() { callgrindRelease(ctx, t, s, names, tokens, holder) })
	measure(1, func() {
		granted = callgrindAcquire(ctx, t, s, names, func(name string) store.AcquireRequest { return waiting(name, next) }, "")
	})
	measure(2, func() {
		callgrindQueue(ctx, t, s, names, func(name string) store.AcquireRequest { return waiting(name, holder) })
	})
	return granted
}

// callgrindQueue asks for each name as reqFor's waiter, pipelined, and
// checks that each is refused (and so queued).
func callgrindQueue(ctx context.Context, t *testing.T, s *Store, names []string, reqFor func(string) store.AcquireRequest) {
	t.Helper()
	for i, reply := range callgrindAcquires(ctx, t, s, names, reqFor, "") {
		if reply.result.Acquired {
			t.Fatalf("queued acquire %s: granted %+v", names[i], reply)
		}
	}
}

// callgrindAcquire grants each name (the request is reqFor's), pipelined,
// and returns the tokens. With session, the grants attach to it through the
// store's remembered proof of life (attachments), as Acquire's does when it
// skips the session's script.
func callgrindAcquire(ctx context.Context, t *testing.T, s *Store, names []string, reqFor func(string) store.AcquireRequest, session string) []uint64 {
	t.Helper()
	tokens := make([]uint64, 0, len(names))
	for i, reply := range callgrindAcquires(ctx, t, s, names, reqFor, session) {
		if !reply.result.Acquired {
			t.Fatalf("acquire %s: %+v", names[i], reply)
		}
		tokens = append(tokens, reply.result.Lease.Token)
	}
	return tokens
}

// callgrindRefuse asks for each name, held by "w", as another holder that
// does not wait, pipelined, and checks that each is refused naming "w".
func callgrindRefuse(ctx context.Context, t *testing.T, s *Store, names []string) {
	t.Helper()
	replies := callgrindAcquires(ctx, t, s, names, func(name string) store.AcquireRequest {
		return store.AcquireRequest{Name: name, Holder: "x", TTL: time.Minute}
	}, "")
	for i, reply := range replies {
		if reply.result.Acquired || reply.result.Lease.Holder != "w" {
			t.Fatalf("refused acquire %s: %+v", names[i], reply)
		}
	}
}

// callgrindAcquires runs acquire.lua for each name (the request is
// reqFor's, attached to session when it is not ""), pipelined, and returns
// the decoded replies.
func callgrindAcquires(ctx context.Context, t *testing.T, s *Store, names []string, reqFor func(string) store.AcquireRequest, session string) []acquireReply {
	t.Helper()
	replies := make([]acquireReply, 0, len(names))
	for from := 0; from < len(names); from += callgrindPipeline {
		batch := names[from:min(from+callgrindPipeline, len(names))]
		reqs := make([]store.AcquireRequest, len(batch))
		args := make([]acquireArgs, len(batch))
		cmds := make([]*redis.Cmd, len(batch))
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, name := range batch {
				reqs[i] = reqFor(name)
				args[i] = s.acquireArgs(reqs[i], 1, 1)
				if session != "" {
					now := time.Now()
					pr, ok := s.attachments.proof(session, reqs[i].SessionOwner, name, now)
					if !ok {
						return fmt.Errorf("no remembered proof of session %s for %s", session, name)
					}
					proofs := proofSet{session: pr}
					args[i].proofs, _ = proofs.text(now, session)
					args[i].session = session
					args[i].ttlMS, _ = proofs.left(session, now)
					args[i].sessionTTL = pr.ttl.Milliseconds()
				}
				k := s.keys(name)
				cmds[i] = s.scripts.acquire.EvalSha(ctx, p, []string{k.lease, k.queue, k.waiters, k.marker}, args[i].argv()...)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, cmd := range cmds {
			reply, err := decodeAcquire(args[i].asked(reqs[i]), cmd.Val())
			if err != nil {
				t.Fatalf("acquire %s: %v", batch[i], err)
			}
			replies = append(replies, reply)
		}
	}
	return replies
}

// callgrindAcquireGroups grants each group (the names of one, exclusive
// locks of holder "w" with a TTL of their own, no waiter), pipelined, and
// returns each group's tokens.
func callgrindAcquireGroups(ctx context.Context, t *testing.T, s *Store, groups [][]string) [][]uint64 {
	t.Helper()
	out := make([][]uint64, 0, len(groups))
	for batch := range slices.Chunk(groups, callgrindPipeline) {
		asked := make([][]store.Lease, len(batch))
		cmds := make([]*redis.Cmd, len(batch))
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, names := range batch {
				args := groupArgs{holder: "w", ttlMS: time.Minute.Milliseconds(), maxHolders: store.DefaultMaxHolders}
				for _, n := range names {
					args.members = append(args.members, groupMemberArgs{capacity: 1, weight: 1, name: n})
					asked[i] = append(asked[i], store.Lease{Name: n, Holder: "w", TTL: time.Minute})
				}
				cmds[i] = s.scripts.acquireGroup.EvalSha(ctx, p, s.groupKeys(names), args.argv()...)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, cmd := range cmds {
			reply, err := decodeAcquireGroup(asked[i], cmd.Val())
			if err != nil || !reply.acquired {
				t.Fatalf("acquire group %v: %+v, %v", batch[i], reply, err)
			}
			tokens := make([]uint64, len(reply.leases))
			for j, l := range reply.leases {
				tokens[j] = l.Token
			}
			out = append(out, tokens)
		}
	}
	return out
}

// callgrindReleaseGroups releases each group, held by "w" under tokens,
// pipelined.
func callgrindReleaseGroups(ctx context.Context, t *testing.T, s *Store, groups [][]string, tokens [][]uint64) {
	t.Helper()
	for from := 0; from < len(groups); from += callgrindPipeline {
		to := min(from+callgrindPipeline, len(groups))
		cmds := make([]*redis.Cmd, 0, to-from)
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := from; i < to; i++ {
				leases := make([]store.GroupLease, len(groups[i]))
				for j, n := range groups[i] {
					leases[j] = store.GroupLease{Name: n, Token: tokens[i][j]}
				}
				keys, args := s.releaseGroupArgs("w", leases)
				cmds = append(cmds, s.scripts.releaseGroup.EvalSha(ctx, p, keys, args...))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, cmd := range cmds {
			released, _, err := decodeReleaseGroup(len(groups[from+i]), cmd.Val())
			if err != nil || slices.Contains(released, false) {
				t.Fatalf("release group %v: %v, %v", groups[from+i], released, err)
			}
		}
	}
}

// callgrindRelease releases names[i] held by holder under tokens[i],
// pipelined.
func callgrindRelease(ctx context.Context, t *testing.T, s *Store, names []string, tokens []uint64, holder string) {
	t.Helper()
	for from := 0; from < len(names); from += callgrindPipeline {
		to := min(from+callgrindPipeline, len(names))
		cmds := make([]*redis.Cmd, 0, to-from)
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := from; i < to; i++ {
				cmds = append(cmds, s.scripts.release.EvalSha(ctx, p, []string{s.keys(names[i]).lease}, s.releaseArgs(names[i], holder, tokens[i])...))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, cmd := range cmds {
			if ok, _, err := decodeRelease(cmd.Val()); err != nil || !ok {
				t.Fatalf("release %s: %v, %v", names[from+i], ok, err)
			}
		}
	}
}

// callgrindPlain runs call for each key, pipelined, and fails on an error;
// with refused, every call must answer nil (a SET NX on a held key).
func callgrindPlain(ctx context.Context, t *testing.T, c redis.UniversalClient, keys []string, refused bool, call func(redis.Pipeliner, string) *redis.Cmd) {
	t.Helper()
	for from := 0; from < len(keys); from += callgrindPipeline {
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys[from:min(from+callgrindPipeline, len(keys))] {
				call(p, "yardstick:{"+k+"}")
			}
			return nil
		})
		if refused {
			for _, cmd := range cmds {
				if !errors.Is(cmd.Err(), redis.Nil) {
					t.Fatalf("yardstick refusal: %v", cmd.Err())
				}
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// callgrindRedis is a redis-server running under callgrind.
type callgrindRedis struct {
	url, dir string
	pid      int
}

func startCallgrindRedis(t *testing.T) *callgrindRedis {
	t.Helper()
	for _, tool := range []string{"valgrind", "callgrind_control", "redis-server"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (Debian/Ubuntu: apt-get install valgrind redis-server)", tool)
		}
	}
	dir := os.Getenv(envCallgrindOut)
	if dir == "" {
		dir = t.TempDir()
	}
	port := freeLocalPort(t)
	cmd := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "callgrind.out.%p"),
		"redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction", "--hz", "1", "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start valgrind: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c := &callgrindRedis{url: fmt.Sprintf("redis://127.0.0.1:%d/0", port), dir: dir, pid: cmd.Process.Pid}
	client := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
	defer func() { _ = client.Close() }()
	testwait.Until(t, 2*time.Minute, "redis-server under callgrind to answer", func() bool {
		return client.Ping(context.Background()).Err() == nil
	})
	return c
}

func freeLocalPort(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	return lis.Addr().(*net.TCPAddr).Port
}

func (c *callgrindRedis) control(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("callgrind_control", append(args, strconv.Itoa(c.pid))...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("callgrind_control %v: %v\n%s", args, err, out)
	}
}

// zero starts a window.
func (c *callgrindRedis) zero(t *testing.T) { c.control(t, "--zero") }

// dump ends a window labelled label and returns its instructions (Ir).
func (c *callgrindRedis) dump(t *testing.T, label string) int64 {
	t.Helper()
	c.control(t, "--dump="+label)
	files, _ := filepath.Glob(filepath.Join(c.dir, fmt.Sprintf("callgrind.out.%d.*", c.pid)))
	for _, f := range files {
		ir, desc, err := callgrindSummary(f)
		if err != nil {
			t.Fatal(err)
		}
		if desc == "dump "+label {
			return ir
		}
	}
	t.Fatalf("no callgrind dump labelled %q in %s", label, c.dir)
	return 0
}

// callgrindSummary reads a dump's total instructions and its trigger.
func callgrindSummary(path string) (ir int64, trigger string, err error) {
	f, err := os.Open(filepath.Clean(path))
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "desc: Trigger: "); ok {
			trigger = rest
		}
		if rest, ok := strings.CutPrefix(line, "summary: "); ok {
			ir, err = strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
		}
	}
	return ir, trigger, sc.Err()
}
