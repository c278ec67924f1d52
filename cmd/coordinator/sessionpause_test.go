package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/store/storetest"
)

// pausedHolderEnv makes the test binary the holder process of
// TestFaultsAPausedSessionHolder (TestHelperPausedSessionHolder).
const pausedHolderEnv = "COORDINATOR_TEST_PAUSED_HOLDER"

// TestHelperPausedSessionHolder is the client process that
// TestFaultsAPausedSessionHolder stops with SIGSTOP: it takes every name of
// $COORDINATOR_TEST_PAUSED_NAMES in one session of faultTTL and acts on
// them through the test's fenced resources, over stdout and stdin: before
// each act it checks its lease's validity by its own clock and sends
// "enter NAME HOLDER TOKEN VALID_UNTIL_UNIX_NANO", then waits for the
// resource's "ok" or "fenced". When a lease ends it says "lost NAME ERR".
// It skips in a normal run.
func TestHelperPausedSessionHolder(t *testing.T) {
	addr := os.Getenv(pausedHolderEnv)
	if addr == "" {
		t.Skip("the holder process of TestFaultsAPausedSessionHolder")
	}
	c, err := client.New(addr, client.WithTTL(faultTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leases := holdInOneSession(ctx, t, c, strings.Fields(os.Getenv("COORDINATOR_TEST_PAUSED_NAMES")))
	replies := bufio.NewScanner(os.Stdin)
	for len(leases) > 0 {
		held := leases[:0]
		for _, l := range leases {
			valid := l.Deadline()
			if l.Err() != nil || !time.Now().Before(valid) {
				why := "its validity ran out unrenewed"
				if l.Err() != nil {
					why = l.Err().Error()
				}
				fmt.Printf("lost %s %s\n", l.Name(), why)
				continue
			}
			fmt.Printf("enter %s %s %d %d\n", l.Name(), l.Holder(), l.Token(), valid.UnixNano())
			if !replies.Scan() {
				return // the test ended
			}
			held = append(held, l)
		}
		leases = held
		time.Sleep(actEvery)
	}
	fmt.Println("done")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test ends
}

// holdInOneSession locks every name in one new session. A session lost
// before all are held (a loaded machine can starve a 2s session's
// renewals) is closed and another tried: the test is about what follows.
func holdInOneSession(ctx context.Context, t *testing.T, c *client.Client, names []string) []*client.Lease {
	for attempt := 1; ; attempt++ {
		s, err := c.NewSession(ctx, client.WithTTL(faultTTL))
		if err != nil {
			t.Fatal(err)
		}
		var leases []*client.Lease
		for _, name := range names {
			var l *client.Lease
			if l, err = c.Lock(ctx, name, client.WithSession(s)); err != nil {
				break
			}
			leases = append(leases, l)
		}
		if len(leases) == len(names) && s.Err() == nil {
			return leases
		}
		_ = s.Close(ctx)
		if attempt == 5 || ctx.Err() != nil {
			t.Fatalf("no session held all of %v in %d attempts: %v (the session: %v)", names, attempt, err, s.Err())
		}
	}
}

// claimResource is the fenced resources of the names, as a process sees
// them over a pipe: a claim is judged when it arrives.
type claimResource struct {
	mu        sync.Mutex
	resources map[string]*storetest.Resource
	// accepted counts the claims let in, fenced those refused because
	// their validity had run out when they arrived (the holder was stopped
	// between its check and its claim).
	accepted, fenced int
	// lastValid is the latest validity a claim let in had, by name.
	lastValid map[string]time.Time
}

func newClaimResource() *claimResource {
	return &claimResource{resources: map[string]*storetest.Resource{}, lastValid: map[string]time.Time{}}
}

// enter judges holder's claim on name with token, valid until validUntil:
// refused (false) when its validity ran out in transit, as a resource that
// checks it would; an error when it breaks what fencing promises (another
// holder inside with a valid lease, or a token below one granted since,
// while the claimant still believes its lease valid).
func (r *claimResource) enter(name, holder string, token uint64, validUntil time.Time) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !time.Now().Before(validUntil) {
		r.fenced++
		return false, nil
	}
	res := r.resources[name]
	if res == nil {
		res = &storetest.Resource{}
		r.resources[name] = res
	}
	if err := res.Enter(holder, token, validUntil); err != nil {
		return false, err
	}
	r.accepted++
	if validUntil.After(r.lastValid[name]) {
		r.lastValid[name] = validUntil
	}
	return true, nil
}

func (r *claimResource) leave(name, holder string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if res := r.resources[name]; res != nil {
		res.Leave(holder)
	}
}

// TestFaultsAPausedSessionHolder: a client process holding three names in
// one session is stopped (SIGSTOP, as a long GC pause, a frozen VM or a
// debugger would) while it acts on them. Its session expires; a waiter,
// itself holding in a session, is granted the names only after the stopped
// holder's validity ran out by its own clock, with larger tokens; when the
// holder resumes (SIGCONT) nothing it claims is let in with a valid
// belief, and it learns that every lease is lost.
func TestFaultsAPausedSessionHolder(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			env := []string{"COORDINATOR_STATE_DIR=" + t.TempDir()}
			if store == "redis" {
				rs := redistest.Start(t, false)
				env = []string{"COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL=" + rs.URL(), "COORDINATOR_REDIS_NEW_STORE=true"}
			}
			p := startCoordinatorProcess(t, env...)
			for round := range faultRounds(t) {
				pausedHolderRound(t, p.addr, round)
			}
		})
	}
}

func pausedHolderRound(t *testing.T, addr string, round int) {
	names := []string{fmt.Sprintf("paused/%d/a", round), fmt.Sprintf("paused/%d/b", round), fmt.Sprintf("paused/%d/c", round)}
	holder := exec.Command(os.Args[0], "-test.run=^TestHelperPausedSessionHolder$")
	holder.Env = append(os.Environ(), pausedHolderEnv+"="+addr, "COORDINATOR_TEST_PAUSED_NAMES="+strings.Join(names, " "))
	holder.Stderr = os.Stderr
	claims, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	replies, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if stopped {
			_ = holder.Process.Signal(syscall.SIGCONT)
		}
		_ = holder.Process.Kill()
		_ = holder.Wait()
	})

	res := newClaimResource()
	var (
		mu       sync.Mutex
		tokens   = map[string]uint64{} // the holder's, by name
		lost     = map[string]string{} // why, by name
		resumed  time.Time             // zero until SIGCONT
		afterErr []string              // claims let in after SIGCONT
		said     []string              // the holder's other lines (its test's failure)
	)
	served := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(claims)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 5 && f[0] == "enter":
				token, _ := strconv.ParseUint(f[3], 10, 64)
				nanos, _ := strconv.ParseInt(f[4], 10, 64)
				ok, err := res.enter(f[1], f[2], token, time.Unix(0, nanos))
				if err != nil {
					served <- fmt.Errorf("the holder's claim: %w", err)
					return
				}
				mu.Lock()
				tokens[f[1]] = token
				if ok && !resumed.IsZero() {
					afterErr = append(afterErr, sc.Text())
				}
				mu.Unlock()
				reply := "fenced\n"
				if ok {
					reply = "ok\n"
				}
				if _, err := io.WriteString(replies, reply); err != nil {
					served <- err
					return
				}
			case len(f) >= 2 && f[0] == "lost":
				mu.Lock()
				lost[f[1]] = strings.Join(f[2:], " ")
				mu.Unlock()
			case len(f) == 1 && f[0] == "done":
				served <- nil
				return
			default:
				mu.Lock()
				said = append(said, sc.Text())
				mu.Unlock()
			}
		}
		served <- fmt.Errorf("the holder's output ended: %w", sc.Err())
	}()

	// Stop it once it acts on every name.
	testwait.Until(t, 30*time.Second, "the holder acting on its names", func() bool {
		mu.Lock()
		defer mu.Unlock()
		select {
		case err := <-served:
			t.Fatalf("the holder ended before acting on every name (%v): %s", err, strings.Join(said, "\n"))
		default:
		}
		return len(tokens) == len(names)
	})
	time.Sleep(faultTTL / 2)
	if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped = true
	stoppedAt := time.Now()

	// A waiter, in a session of its own, takes every name.
	c, err := client.New(addr, client.WithTTL(faultTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.NewSession(ctx, client.WithTTL(faultTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	var mine []*client.Lease
	for _, name := range names {
		l, err := c.Lock(ctx, name, client.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		grantedAt := time.Now()
		mu.Lock()
		theirs := tokens[name]
		mu.Unlock()
		res.mu.Lock()
		theirValid := res.lastValid[name]
		res.mu.Unlock()
		if l.Token() <= theirs || !grantedAt.After(theirValid) {
			t.Fatalf("%s: granted token %d at %s, the stopped holder's %d valid until %s by its clock; want a larger token, after that",
				name, l.Token(), grantedAt.Format(time.StampMilli), theirs, theirValid.Format(time.StampMilli))
		}
		t.Logf("%s: granted %s after the SIGSTOP, %s after the stopped holder's validity ran out", name,
			grantedAt.Sub(stoppedAt).Round(time.Millisecond), grantedAt.Sub(theirValid).Round(time.Millisecond))
		mine = append(mine, l)
	}

	// The waiter acts on them; meanwhile the holder resumes.
	act := func(d time.Duration) {
		t.Helper()
		for until := time.Now().Add(d); time.Now().Before(until); time.Sleep(actEvery) {
			for _, l := range mine {
				valid := l.Deadline()
				if l.Err() != nil || !time.Now().Before(valid) {
					t.Fatalf("the waiter's lease %s ended: %v", l.Name(), l.Err())
				}
				if _, err := res.enter(l.Name(), l.Holder(), l.Token(), valid); err != nil {
					t.Fatalf("the waiter's claim: %v", err)
				}
			}
		}
	}
	act(faultTTL / 2)
	mu.Lock()
	resumed = time.Now()
	mu.Unlock()
	if err := holder.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	act(faultTTL)
	for _, l := range mine {
		res.leave(l.Name(), l.Holder())
	}

	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the resumed holder did not learn that its leases were lost within 30s")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(afterErr) > 0 {
		t.Fatalf("claims let in after the holder resumed: %q", afterErr)
	}
	for _, name := range names {
		if lost[name] == "" {
			t.Errorf("%s: the resumed holder did not report its lease lost", name)
		}
	}
	t.Logf("claims let in %d, fenced on arrival %d; the resumed holder's leases: %v", res.accepted, res.fenced, lost)
}
