package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/client"
	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/testcert"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

// binary is coordctl built for the tests.
var binary string

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "grpcurl" {
		// README blocks run by the tests call it (readme_test.go).
		os.Exit(grpcurl(os.Args[1:], os.Stdout, os.Stderr))
	}
	dir, err := os.MkdirTemp("", "coordctl-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "coordctl")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// coordctl runs the binary against coord to its end.
func coordctl(t *testing.T, coord *coordtest.Coordinator, env []string, args ...string) result {
	t.Helper()
	r, err := runCoordctl(coord, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runCoordctl is coordctl for any goroutine: it returns the error of a
// binary that could not run instead of failing the test.
func runCoordctl(coord *coordtest.Coordinator, env []string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	if coord != nil {
		cmd.Env = append(cmd.Env, "COORDINATOR_ADDR="+coord.Addr())
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		return r, fmt.Errorf("coordctl %v: %w", args, err)
	}
	return r, nil
}

// background starts the binary against coord and returns it with its
// stdout's lines; it is killed at the end of t.
func background(t *testing.T, coord *coordtest.Coordinator, args ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "COORDINATOR_ADDR="+coord.Addr())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, bufio.NewScanner(out)
}

func nextLine(t *testing.T, lines *bufio.Scanner) string {
	t.Helper()
	got := make(chan bool, 1)
	go func() { got <- lines.Scan() }()
	select {
	case ok := <-got:
		if !ok {
			t.Fatalf("output ended: %v", lines.Err())
		}
		return lines.Text()
	case <-time.After(30 * time.Second):
		t.Fatal("no output line after 30s")
		return ""
	}
}

func dial(t *testing.T, coord *coordtest.Coordinator) *client.Client {
	t.Helper()
	c, err := client.New(coord.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestLockSerializesCommandsAcrossProcesses(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			coord := coordtest.Start(t, coordtest.Config(t, store))
			log := filepath.Join(t.TempDir(), "log")
			const procs, rounds = 3, 2
			script := `echo "start $ID $COORDINATOR_FENCING_TOKEN $COORDINATOR_LOCK_NAME" >> "$LOG"; sleep 0.2; echo "end $ID" >> "$LOG"`
			var wg sync.WaitGroup
			for id := range procs {
				wg.Go(func() {
					for range rounds {
						r, err := runCoordctl(coord, []string{"ID=" + strconv.Itoa(id), "LOG=" + log}, "lock", "shared", "--", "sh", "-c", script)
						if err != nil {
							t.Error(err)
							return
						}
						if r.code != 0 {
							t.Errorf("process %d: exit %d: %s", id, r.code, r.stderr)
						}
					}
				})
			}
			wg.Wait()

			data, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			if len(lines) != 2*procs*rounds {
				t.Fatalf("%d lines; want %d:\n%s", len(lines), 2*procs*rounds, data)
			}
			var lastToken uint64
			runs := map[string]int{}
			for i := 0; i < len(lines); i += 2 {
				start, end := strings.Fields(lines[i]), strings.Fields(lines[i+1])
				if len(start) != 4 || start[0] != "start" || start[3] != "shared" || len(end) != 2 || end[0] != "end" || end[1] != start[1] {
					t.Fatalf("lines %d-%d interleave: %q, %q\n%s", i+1, i+2, lines[i], lines[i+1], data)
				}
				token, err := strconv.ParseUint(start[2], 10, 64)
				if err != nil || token <= lastToken {
					t.Fatalf("fencing token %q after %d: want increasing tokens\n%s", start[2], lastToken, data)
				}
				lastToken = token
				runs[start[1]]++
			}
			for id := range procs {
				if runs[strconv.Itoa(id)] != rounds {
					t.Fatalf("process %d ran %d times; want %d\n%s", id, runs[strconv.Itoa(id)], rounds, data)
				}
			}
		})
	}
}

func TestExitCodes(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	held, err := dial(t, coord).TryLock(context.Background(), "held")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want int
		// stderr must contain
		says string
	}{
		{"lock held elsewhere until the timeout", []string{"lock", "--timeout", "300ms", "held", "--", "true"}, 1, "not acquired: held by " + held.Holder()},
		{"lock held elsewhere, flags first", []string{"--timeout=300ms", "lock", "held"}, 1, "not acquired"},
		{"command's own status", []string{"lock", "free", "--", "sh", "-c", "exit 3"}, 3, ""},
		{"command not found", []string{"lock", "free", "--", "/nonexistent/cmd"}, 127, "no such file"},
		{"no command", nil, 2, "Usage"},
		{"unknown command", []string{"unlock", "x"}, 2, `unknown command "unlock"`},
		{"lock without a name", []string{"lock"}, 2, "usage: coordctl [flags] lock NAME"},
		{"nothing after --", []string{"lock", "x", "--"}, 2, "no command after --"},
		{"bad ttl", []string{"lock", "--ttl", "soon", "x"}, 2, "invalid value"},
		{"bad output", []string{"-o", "yaml", "leader", "x"}, 2, "want text or json"},
		{"bad token", []string{"release", "x", "holder", "ten"}, 2, "not a fencing token"},
		{"too many arguments", []string{"leader", "x", "y"}, 2, "usage"},
		{"command after a command that takes none", []string{"leader", "x", "--", "true"}, 2, "does not run a command"},
		{"no leader", []string{"leader", "nobody"}, 1, ""},
		{"release not held", []string{"release", "free", "someone", "1"}, 1, ""},
		{"unreachable coordinator", []string{"--addr", "127.0.0.1:1", "--timeout", "500ms", "describe", "x"}, 1, "coordctl:"},
		{"token over plaintext", []string{"-token", "s3cret", "describe", "x"}, 2, "-insecure-token"},
		{"unreadable TLS CA", []string{"-tls-ca", "/nonexistent/ca.pem", "describe", "x"}, 2, "TLS: read CA"},
		{"negative connect timeout", []string{"-connect-timeout", "-1s", "lock", "x"}, 2, "-connect-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := coordctl(t, coord, nil, tc.args...)
			if r.code != tc.want || !strings.Contains(r.stderr, tc.says) {
				t.Fatalf("exit %d, stderr %q; want exit %d saying %q", r.code, r.stderr, tc.want, tc.says)
			}
		})
	}
}

func TestVersionPrintsTheModuleAndTheRevision(t *testing.T) {
	r := coordctl(t, nil, nil, "-version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "coordctl ") || !strings.Contains(r.stdout, "\nmodule   github.com/coordinator-dev/coordinator ") ||
		!strings.Contains(r.stdout, "\nrevision ") {
		t.Fatalf("coordctl -version: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// lock, elect and observe wait for the coordinator up to -connect-timeout,
// then say that they cannot reach it, instead of waiting in silence for
// ever as if for the lease.
func TestUnreachableCoordinatorIsReported(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens there now
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"lock", []string{"-connect-timeout", "500ms", "lock", "x", "--", "true"}},
		{"lock, -timeout first", []string{"-timeout", "300ms", "lock", "x"}},
		{"elect", []string{"-connect-timeout", "500ms", "elect", "x", "v"}},
		{"observe", []string{"-connect-timeout", "500ms", "observe", "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := coordctl(t, nil, nil, append([]string{"-addr", addr}, tc.args...)...)
			if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the coordinator at "+addr) || !strings.Contains(r.stderr, "refused") {
				t.Fatalf("exit %d after %s, stderr %q; want 1, saying the coordinator refused connections", r.code, r.took, r.stderr)
			}
		})
	}
}

// A token goes over TLS, or over plaintext only when -insecure-token says
// so; coordctl never sends it in the clear by accident.
func TestTokenNeedsTLSOrInsecureToken(t *testing.T) {
	plain := coordtest.Config(t, "memory")
	plain.AuthToken = "s3cret"
	plainCoord := coordtest.Start(t, plain)

	cert := testcert.Write(t, "coordctl test")
	certFile, keyFile := cert.Cert, cert.Key
	secure := coordtest.Config(t, "memory")
	secure.TLS.Cert, secure.TLS.Key, secure.AuthToken = certFile, keyFile, "s3cret"
	tlsCoord := coordtest.Start(t, secure)

	for _, tc := range []struct {
		name  string
		coord *coordtest.Coordinator
		env   []string
		args  []string
		want  int
		says  string
	}{
		{"plaintext", plainCoord, nil, []string{"-token", "s3cret", "lock", "x", "--", "true"}, 2, "-insecure-token"},
		{"plaintext, token from the environment", plainCoord, []string{"COORDINATOR_AUTH_TOKEN=s3cret"}, []string{"lock", "x", "--", "true"}, 2, "needs TLS"},
		{"plaintext with -insecure-token", plainCoord, nil, []string{"-token", "s3cret", "-insecure-token", "lock", "x", "--", "true"}, 0, ""},
		{"TLS", tlsCoord, nil, []string{"-tls-ca", certFile, "-token", "s3cret", "lock", "x", "--", "true"}, 0, ""},
		{"TLS, token from the environment", tlsCoord, []string{"COORDINATOR_AUTH_TOKEN=s3cret"}, []string{"-tls-ca", certFile, "describe", "x"}, 0, ""},
		{"TLS without the token", tlsCoord, nil, []string{"-tls-ca", certFile, "lock", "x", "--", "true"}, 1, "Unauthenticated"},
		{"TLS with a wrong token", tlsCoord, nil, []string{"-tls-ca", certFile, "-token", "guess", "elect", "x", "v"}, 1, "Unauthenticated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := coordctl(t, tc.coord, tc.env, tc.args...)
			if r.code != tc.want || !strings.Contains(r.stderr, tc.says) {
				t.Fatalf("exit %d, stderr %q; want exit %d saying %q", r.code, r.stderr, tc.want, tc.says)
			}
		})
	}
}

func TestLockPassesFencingToken(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	r := coordctl(t, coord, nil, "lock", "fenced", "--", "sh", "-c", `echo "$COORDINATOR_LOCK_NAME $COORDINATOR_FENCING_TOKEN"`)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	fields := strings.Fields(r.stdout)
	d, err := dial(t, coord).API().Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: "fenced"})
	if err != nil {
		t.Fatal(err)
	}
	if len(fields) != 2 || fields[0] != "fenced" || fields[1] != strconv.FormatUint(d.GetLastToken(), 10) {
		t.Fatalf("CMD saw %q; want \"fenced %d\"", r.stdout, d.GetLastToken())
	}
	if d.GetHeld() {
		t.Fatal("the lock is still held after coordctl exited")
	}
}

func TestLockStopsCommandWhenLost(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	c := dial(t, coord)
	type outcome struct {
		r   result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		// CMD ignores SIGTERM: it is killed after the grace period.
		r, err := runCoordctl(coord, nil, "lock", "--ttl", "1s", "--grace", "1s", "victim", "--", "sh", "-c", `trap "" TERM; sleep 30`)
		done <- outcome{r, err}
	}()
	var lease *coordinatorv1.Lease
	deadline := time.Now().Add(20 * time.Second)
	for lease == nil {
		d, err := c.API().Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: "victim"})
		if err == nil && d.GetHeld() {
			lease = d.GetLease()
		} else if time.Now().After(deadline) {
			t.Fatal("coordctl lock never took the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	lostAt := time.Now()
	// An operator ends the session the lock is held in.
	if _, err := c.API().CloseSession(context.Background(), &coordinatorv1.CloseSessionRequest{SessionId: lease.GetSessionId()}); err != nil {
		t.Fatal(err)
	}
	out := <-done
	if out.err != nil {
		t.Fatal(out.err)
	}
	r := out.r
	if r.code != 1 || !strings.Contains(r.stderr, "lost") {
		t.Fatalf("exit %d, stderr %q; want 1 and lost", r.code, r.stderr)
	}
	if took := time.Since(lostAt); took > 15*time.Second {
		t.Fatalf("CMD stopped %s after the loss", took)
	}
}

func TestJSONOutputAndSignals(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	_, events := background(t, coord, "-o", "json", "observe", "office")
	event := func() map[string]any {
		t.Helper()
		var ev map[string]any
		if line := nextLine(t, events); json.Unmarshal([]byte(line), &ev) != nil {
			t.Fatalf("observe printed %q, not JSON", line)
		}
		return ev
	}
	if ev := event(); ev["kind"] != "VACANT" {
		t.Fatalf("first event %v; want VACANT", ev)
	}

	elect, out := background(t, coord, "elect", "-o", "json", "office", "10.0.0.1:80")
	var elected leaderJSON
	if line := nextLine(t, out); json.Unmarshal([]byte(line), &elected) != nil || elected.Term == 0 || elected.Value == nil || *elected.Value != "10.0.0.1:80" {
		t.Fatalf("elect printed %q", line)
	}
	if ev := event(); ev["kind"] != "ELECTED" || ev["term"] != float64(elected.Term) || ev["value"] != "10.0.0.1:80" {
		t.Fatalf("event %v; want ELECTED in term %d", ev, elected.Term)
	}

	r := coordctl(t, coord, nil, "leader", "-o", "json", "office")
	var leader leaderJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &leader) != nil || leader.Term != elected.Term || leader.Candidate != elected.Candidate {
		t.Fatalf("leader: exit %d, %q", r.code, r.stdout)
	}
	r = coordctl(t, coord, nil, "describe", "-o", "json", "office")
	var described struct {
		Held  bool `json:"held"`
		Lease struct {
			Token uint64 `json:"token"`
			Value string `json:"value"`
		} `json:"lease"`
		LastToken uint64 `json:"last_token"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &described) != nil || !described.Held || described.Lease.Token != elected.Term || described.Lease.Value != "10.0.0.1:80" {
		t.Fatalf("describe: exit %d, %q", r.code, r.stdout)
	}
	r = coordctl(t, coord, nil, "list", "-o", "json", "off")
	var listed []heldJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &listed) != nil || len(listed) != 1 || listed[0].Name != "office" {
		t.Fatalf("list: exit %d, %q", r.code, r.stdout)
	}

	// SIGTERM resigns and exits 0.
	if err := elect.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := elect.Wait(); err != nil {
		t.Fatalf("elect after SIGTERM: %v", err)
	}
	if ev := event(); ev["kind"] != "VACANT" {
		t.Fatalf("event %v; want VACANT after resigning", ev)
	}
	r = coordctl(t, coord, nil, "leader", "-o", "json", "office")
	if r.code != 1 || !strings.Contains(r.stdout, `"vacant":true`) {
		t.Fatalf("leader after resigning: exit %d, %q", r.code, r.stdout)
	}
}

// concurrency replays a log of "start ID" and "end ID" lines and returns the
// most IDs inside at once, and the ones inside with a "w" ID among them.
func concurrency(t *testing.T, log string) (most int, writerBeside bool) {
	t.Helper()
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	inside := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		what, id, _ := strings.Cut(line, " ")
		switch what {
		case "start":
			inside[id] = true
		case "end":
			delete(inside, id)
		}
		most = max(most, len(inside))
		for in := range inside {
			if strings.HasPrefix(in, "w") && len(inside) > 1 {
				writerBeside = true
			}
		}
	}
	return most, writerBeside
}

func TestLockSlotsAndReadWriteLocks(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	script := `echo "start $ID" >> "$LOG"; sleep 0.3; echo "end $ID" >> "$LOG"`
	run := func(log string, procs []string, args func(id string) []string) {
		var wg sync.WaitGroup
		for _, id := range procs {
			wg.Go(func() {
				r, err := runCoordctl(coord, []string{"ID=" + id, "LOG=" + log}, append(args(id), "--", "sh", "-c", script)...)
				if err != nil {
					t.Error(err)
				} else if r.code != 0 {
					t.Errorf("%s: exit %d: %s", id, r.code, r.stderr)
				}
			})
		}
		wg.Wait()
	}

	t.Run("lock -n 2 runs two commands at once, never three", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "log")
		run(log, []string{"a", "b", "c", "d"}, func(string) []string { return []string{"lock", "-n", "2", "slots"} })
		if most, _ := concurrency(t, log); most != 2 {
			t.Fatalf("%d commands ran at once; want 2", most)
		}
	})
	t.Run("-shared readers run together, -write alone", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "log")
		run(log, []string{"r1", "r2", "r3", "w1"}, func(id string) []string {
			if strings.HasPrefix(id, "w") {
				return []string{"lock", "-write", "rw"}
			}
			return []string{"lock", "--shared", "rw"}
		})
		most, writerBeside := concurrency(t, log)
		if most < 2 || writerBeside {
			t.Fatalf("at most %d at once, a writer beside others: %v; want readers together and the writer alone", most, writerBeside)
		}
	})
	t.Run("a plain lock on a read-write lock's name is refused while it is held", func(t *testing.T) {
		reader, lines := background(t, coord, "lock", "-shared", "held-rw")
		if line := nextLine(t, lines); !strings.HasPrefix(line, "read lock held-rw held by") {
			t.Fatalf("reader said %q", line)
		}
		r := coordctl(t, coord, nil, "lock", "held-rw", "--", "true")
		if r.code != 1 || !strings.Contains(r.stderr, "has capacity 1000000, request asked for 1") {
			t.Fatalf("plain lock: exit %d, %q; want 1 naming both capacities", r.code, r.stderr)
		}
		d := coordctl(t, coord, nil, "describe", "held-rw")
		if !strings.Contains(d.stdout, "capacity 1000000, 1 held by 1 holders") || !strings.Contains(d.stdout, "weight 1 held by") {
			t.Fatalf("describe: %q", d.stdout)
		}
		_ = reader.Process.Signal(os.Interrupt)
	})
	t.Run("observe prints a semaphore's holders", func(t *testing.T) {
		_, holder := background(t, coord, "lock", "-n", "3", "observed-slots")
		if line := nextLine(t, holder); !strings.HasPrefix(line, "slot of 3 of observed-slots held by") {
			t.Fatalf("holder said %q", line)
		}
		_, lines := background(t, coord, "observe", "observed-slots")
		if line := nextLine(t, lines); !strings.HasPrefix(line, "HOLDERS observed-slots: 1 of 3 held by 1: ") {
			t.Fatalf("observe said %q", line)
		}
	})
	t.Run("bad flags", func(t *testing.T) {
		for _, args := range [][]string{{"lock", "-n", "0", "x"}, {"lock", "-shared", "-write", "x"}, {"lock", "-n", "3", "-shared", "x"}} {
			if r := coordctl(t, coord, nil, args...); r.code != 2 {
				t.Errorf("%v: exit %d; want 2 (usage)", args, r.code)
			}
		}
	})
}

// lock with several names takes them as one group: all at once or none,
// waiting in line for every name, never deadlocking with another group
// that lists them in the opposite order; CMD gets each name's token.
func TestLockTakesSeveralNamesAtOnce(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	c := dial(t, coord)
	lastToken := func(name string) string {
		t.Helper()
		d, err := c.API().Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatUint(d.GetLastToken(), 10)
	}

	t.Run("CMD gets every name's token, in order", func(t *testing.T) {
		r := coordctl(t, coord, nil, "lock", "g/b", "g/a", "--", "sh", "-c",
			`echo "$COORDINATOR_LOCK_NAMES|$COORDINATOR_FENCING_TOKENS|$COORDINATOR_LOCK_NAME$COORDINATOR_FENCING_TOKEN"`)
		want := "g/b g/a|" + lastToken("g/b") + " " + lastToken("g/a") + "|"
		if r.code != 0 || strings.TrimSpace(r.stdout) != want {
			t.Fatalf("exit %d, CMD saw %q (stderr %q); want %q", r.code, r.stdout, r.stderr, want)
		}
		for _, name := range []string{"g/a", "g/b"} {
			if d, err := c.API().Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: name}); err != nil || d.GetHeld() {
				t.Fatalf("%s after coordctl exited: %v, %v; want released", name, d, err)
			}
		}
		// One name: as before, and the lists of one.
		r = coordctl(t, coord, nil, "lock", "g/one", "--", "sh", "-c",
			`echo "$COORDINATOR_LOCK_NAME $COORDINATOR_FENCING_TOKEN|$COORDINATOR_LOCK_NAMES $COORDINATOR_FENCING_TOKENS"`)
		token := lastToken("g/one")
		if want := "g/one " + token + "|g/one " + token; r.code != 0 || strings.TrimSpace(r.stdout) != want {
			t.Fatalf("exit %d, CMD saw %q; want %q", r.code, r.stdout, want)
		}
	})

	t.Run("all or none, then held together until interrupted", func(t *testing.T) {
		other, err := c.TryLock(context.Background(), "g/held")
		if err != nil {
			t.Fatal(err)
		}
		group, lines := background(t, coord, "-o", "json", "lock", "g/free", "g/held")
		testwait.Until(t, 20*time.Second, "the group waits for g/held", func() bool {
			d, err := c.API().Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: "g/free"})
			return err == nil && d.GetWaiters() == 1 && !d.GetHeld()
		})
		if _, err := other.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		var held struct {
			Leases []leaseJSON `json:"leases"`
		}
		line := nextLine(t, lines)
		if json.Unmarshal([]byte(line), &held) != nil || len(held.Leases) != 2 || held.Leases[0].Name != "g/free" || held.Leases[1].Name != "g/held" ||
			held.Leases[1].Token <= other.Token() || held.Leases[0].Holder != held.Leases[1].Holder {
			t.Fatalf("lock printed %q; want both leases, g/held's token above %d", line, other.Token())
		}
		if err := group.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := group.Wait(); err != nil {
			t.Fatalf("lock after SIGTERM: %v; want exit 0", err)
		}
		for _, name := range []string{"g/free", "g/held"} {
			if d, err := c.API().Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: name}); err != nil || d.GetHeld() {
				t.Fatalf("%s after lock exited: %v, %v; want released", name, d, err)
			}
		}
	})

	t.Run("text output names every lease", func(t *testing.T) {
		holder, lines := background(t, coord, "lock", "-shared", "g/r1", "g/r2")
		said := regexp.MustCompile(`^read lock g/r1 \(token [0-9]+\), g/r2 \(token [0-9]+\) held together by \S+ \(ttl 15s\); interrupt to release$`)
		if line := nextLine(t, lines); !said.MatchString(line) {
			t.Fatalf("lock said %q; want it to match %s", line, said)
		}
		_ = holder.Process.Signal(os.Interrupt)
	})

	t.Run("opposite orders run one at a time, without deadlock", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "log")
		script := `echo "start $ID" >> "$LOG"; sleep 0.2; echo "end $ID" >> "$LOG"`
		var wg sync.WaitGroup
		for _, id := range []string{"xy1", "yx1", "xy2", "yx2"} {
			names := []string{"g/x", "g/y"}
			if strings.HasPrefix(id, "yx") {
				names = []string{"g/y", "g/x"}
			}
			wg.Go(func() {
				r, err := runCoordctl(coord, []string{"ID=" + id, "LOG=" + log}, append(append([]string{"lock", "-timeout", "30s"}, names...), "--", "sh", "-c", script)...)
				if err != nil {
					t.Error(err)
				} else if r.code != 0 {
					t.Errorf("%s: exit %d: %s", id, r.code, r.stderr)
				}
			})
		}
		wg.Wait()
		if most, _ := concurrency(t, log); most != 1 {
			t.Fatalf("%d commands ran at once; want 1", most)
		}
	})

	t.Run("refused", func(t *testing.T) {
		tooMany := []string{"lock"}
		for i := range client.MaxGroupMembers + 1 {
			tooMany = append(tooMany, "g/many/"+strconv.Itoa(i))
		}
		for _, tc := range []struct {
			args []string
			want int
			says string
		}{
			{[]string{"lock", "-session", strings.Repeat("0", 32), "g/a", "g/b", "--", "true"}, 2, "lock -session takes one NAME"},
			{tooMany, 2, "usage: coordctl [flags] lock NAME [NAME…]"},
			{[]string{"lock", "g/twice", "g/twice", "--", "true"}, 1, "INVALID_FIELD"},
		} {
			if r := coordctl(t, coord, nil, tc.args...); r.code != tc.want || !strings.Contains(r.stderr, tc.says) {
				t.Errorf("%v: exit %d, stderr %q; want exit %d saying %q", tc.args[:min(len(tc.args), 5)], r.code, r.stderr, tc.want, tc.says)
			}
		}
	})
}

// sessionOf describes the session id through the API.
func sessionOf(t *testing.T, c *client.Client, id string) (*coordinatorv1.DescribeSessionResponse, error) {
	t.Helper()
	return c.API().DescribeSession(context.Background(), &coordinatorv1.DescribeSessionRequest{SessionId: id})
}

func TestSessionCreateRenewDescribeClose(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			coord := coordtest.Start(t, coordtest.Config(t, store))
			c := dial(t, coord)
			r := coordctl(t, coord, nil, "session", "create", "-ttl", "1m")
			id := strings.TrimSpace(r.stdout)
			if r.code != 0 || len(id) != 32 || strings.ContainsAny(id, " \n") {
				t.Fatalf("session create: exit %d, stdout %q, stderr %q; want the id alone", r.code, r.stdout, r.stderr)
			}
			d, err := sessionOf(t, c, id)
			if err != nil || d.GetSession().GetTtl().AsDuration() != time.Minute {
				t.Fatalf("DescribeSession(%s) = %v, %v; want a live session of 1m", id, d, err)
			}

			// Two locks attach to it, from processes that run a command each.
			for _, name := range []string{"s/a", "s/b"} {
				r = coordctl(t, coord, nil, "lock", "-session", id, name, "--", "sh", "-c", `echo "$COORDINATOR_SESSION_ID $COORDINATOR_FENCING_TOKEN"`)
				if r.code != 0 || !strings.HasPrefix(r.stdout, id+" ") {
					t.Fatalf("lock -session %s: exit %d, stdout %q, stderr %q", name, r.code, r.stdout, r.stderr)
				}
			}
			// lock's kinds attach too: a slot of a semaphore, a read lock.
			for _, args := range [][]string{{"-n", "3", "s/slots"}, {"-shared", "s/rw"}, {"-write", "s/rw"}} {
				r = coordctl(t, coord, nil, append(append([]string{"lock", "-session", id}, args...), "--", "sh", "-c", `echo "$COORDINATOR_FENCING_TOKEN"`)...)
				if r.code != 0 {
					t.Fatalf("lock -session %v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
				}
			}
			// Each released its own lease on the way out: the session goes on, empty.
			d, err = sessionOf(t, c, id)
			if err != nil || len(d.GetNames()) != 0 {
				t.Fatalf("after the commands, DescribeSession = %v, %v; want it alive without leases", d, err)
			}

			// A lock held in the background shows in describe and list.
			_, lines := background(t, coord, "lock", "-session", id, "s/held")
			if line := nextLine(t, lines); !strings.Contains(line, "in session "+id) {
				t.Fatalf("lock -session said %q", line)
			}
			// Another lock on it waits in line until -timeout.
			r = coordctl(t, coord, nil, "lock", "-session", id, "-timeout", "500ms", "s/held", "--", "true")
			if r.code != 1 || !strings.Contains(r.stderr, `"s/held" not acquired: held by`) {
				t.Fatalf("lock -session on a held name: exit %d, stderr %q; want 1, not acquired", r.code, r.stderr)
			}
			r = coordctl(t, coord, nil, "session", "describe", id)
			if r.code != 0 || !strings.HasPrefix(r.stdout, "session "+id+": ttl 1m0s, expires ") || !strings.Contains(r.stdout, ", 1 leases\n  s/held\n") {
				t.Fatalf("session describe: exit %d, %q, %q", r.code, r.stdout, r.stderr)
			}
			r = coordctl(t, coord, nil, "-o", "json", "session", "describe", id)
			var described sessionJSON
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &described) != nil || described.ID != id || described.TTL != "1m0s" ||
				len(described.Names) != 1 || described.Names[0] != "s/held" || time.Until(described.ExpiresAt) <= 0 {
				t.Fatalf("session describe -o json: exit %d, %q", r.code, r.stdout)
			}
			r = coordctl(t, coord, nil, "describe", "s/held")
			if r.code != 0 || !strings.Contains(r.stdout, ", session "+id+"\n") {
				t.Fatalf("describe: exit %d, %q", r.code, r.stdout)
			}
			r = coordctl(t, coord, nil, "list", "s/")
			if r.code != 0 || !strings.Contains(r.stdout, "SESSION") || !strings.Contains(r.stdout, " "+id+"\n") {
				t.Fatalf("list: exit %d, %q", r.code, r.stdout)
			}
			r = coordctl(t, coord, nil, "-o", "json", "list", "s/")
			var listed []heldJSON
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &listed) != nil || len(listed) != 1 || listed[0].Session != id {
				t.Fatalf("list -o json: exit %d, %q", r.code, r.stdout)
			}

			before := described.ExpiresAt
			r = coordctl(t, coord, nil, "-o", "json", "session", "renew", id)
			var renewed sessionJSON
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &renewed) != nil || renewed.ID != id || renewed.ExpiresAt.Before(before) {
				t.Fatalf("session renew: exit %d, %q; want an expiry from %s on", r.code, r.stdout, before)
			}
			if r = coordctl(t, coord, nil, "session", "renew", id); r.code != 0 || !strings.HasPrefix(r.stdout, "session "+id+" renewed: ttl 1m0s, expires ") {
				t.Fatalf("session renew: exit %d, %q", r.code, r.stdout)
			}

			// Closing it releases the held lock, which tells its process.
			if r = coordctl(t, coord, nil, "session", "close", id); r.code != 0 || r.stdout != "session "+id+" closed: its leases are released\n" {
				t.Fatalf("session close: exit %d, %q, %q", r.code, r.stdout, r.stderr)
			}
			dd, err := c.API().Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: "s/held"})
			if err != nil || dd.GetHeld() {
				t.Fatalf("after session close, Describe = %v, %v; want it free", dd, err)
			}
			for _, args := range [][]string{{"session", "renew", id}, {"session", "describe", id}, {"lock", "-session", id, "s/late", "--", "true"}} {
				if r = coordctl(t, coord, nil, args...); r.code != 1 || !strings.Contains(r.stderr, "SESSION_CLOSED") && !strings.Contains(r.stderr, "closed") {
					t.Errorf("%v after close: exit %d, stderr %q; want 1 saying the session is closed", args, r.code, r.stderr)
				}
			}
			if r = coordctl(t, coord, nil, "session", "close", id); r.code != 0 {
				t.Errorf("closing again: exit %d, %q; closing a closed session succeeds", r.code, r.stderr)
			}
		})
	}
}

// A lock in a session that another process keeps is lost when the session
// ends: its command is stopped, and coordctl says why.
func TestLockInSessionEndsWithTheSession(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	keeper, lines := background(t, coord, "session", "create", "-keep", "-ttl", "2s")
	id := nextLine(t, lines)
	if len(id) != 32 {
		t.Fatalf("session create -keep printed %q; want the id", id)
	}
	type outcome struct {
		r   result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := runCoordctl(coord, nil, "lock", "-session", id, "-grace", "1s", "kept", "--", "sh", "-c", `trap "" TERM; sleep 30`)
		done <- outcome{r, err}
	}()
	c := dial(t, coord)
	testwaitHeld(t, c, "kept")
	// The keeper renews it past its TTL: the lock outlives several TTLs.
	time.Sleep(5 * time.Second) // 2.5 of the session's TTLs: only the keeper's renewals keep the lock
	if d, err := sessionOf(t, c, id); err != nil || len(d.GetNames()) != 1 {
		t.Fatalf("after 2.5 TTLs, DescribeSession = %v, %v; want it renewed, with the lock", d, err)
	}
	select {
	case out := <-done:
		t.Fatalf("lock ended while its session lived: %+v", out)
	default:
	}
	// SIGINT: the keeper closes the session, which releases the lock.
	if err := keeper.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := keeper.Wait(); err != nil {
		t.Fatalf("session create -keep after SIGINT: %v; want exit 0", err)
	}
	out := <-done
	if out.err != nil {
		t.Fatal(out.err)
	}
	if out.r.code != 1 || !strings.Contains(out.r.stderr, "SESSION_CLOSED") {
		t.Fatalf("lock: exit %d, stderr %q; want 1, naming the closed session", out.r.code, out.r.stderr)
	}
}

// testwaitHeld waits until name is held.
func testwaitHeld(t *testing.T, c *client.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := c.API().Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: name})
		if err == nil && d.GetHeld() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held: %v, %v", name, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// session hold takes its names in one session; a waiter for one of them is
// granted when it closes the session, and its command saw every token.
func TestSessionHoldTakesEveryNameInOneSession(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	c := dial(t, coord)
	hold, lines := background(t, coord, "-o", "json", "session", "hold", "-ttl", "2s", "h/a", "h/b", "h/c")
	var held struct {
		Session sessionJSON `json:"session"`
		Leases  []leaseJSON `json:"leases"`
	}
	if line := nextLine(t, lines); json.Unmarshal([]byte(line), &held) != nil || len(held.Leases) != 3 || held.Session.TTL != "2s" {
		t.Fatalf("session hold printed %q", line)
	}
	d, err := sessionOf(t, c, held.Session.ID)
	if err != nil || strings.Join(d.GetNames(), " ") != "h/a h/b h/c" {
		t.Fatalf("DescribeSession = %v, %v; want the three names", d, err)
	}
	for _, l := range held.Leases {
		if l.Session != "" {
			t.Fatalf("lease %+v: session hold's leases print no session of their own", l)
		}
	}
	// A waiter in line for h/b; the session outlives its TTL (renewed).
	waiter := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := c.Lock(ctx, "h/b")
		if err == nil && l.Token() <= held.Leases[1].Token {
			err = fmt.Errorf("token %d after %d", l.Token(), held.Leases[1].Token)
		}
		waiter <- err
	}()
	time.Sleep(3 * time.Second) // past the session's TTL: only its renewals keep the waiter out
	select {
	case err := <-waiter:
		t.Fatalf("the waiter got h/b while the session held it: %v", err)
	default:
	}
	if err := hold.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := hold.Wait(); err != nil {
		t.Fatalf("session hold after SIGTERM: %v; want exit 0", err)
	}
	if err := <-waiter; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if _, err := sessionOf(t, c, held.Session.ID); client.ErrorReason(err) != "SESSION_CLOSED" {
		t.Fatalf("after session hold, DescribeSession: %v; want SESSION_CLOSED", err)
	}

	// With a command: it sees the session and every token, in order.
	r := coordctl(t, coord, nil, "session", "hold", "h/x", "h/y", "--", "sh", "-c",
		`echo "$COORDINATOR_SESSION_ID|$COORDINATOR_LOCK_NAMES|$COORDINATOR_FENCING_TOKENS"`)
	parts := strings.Split(strings.TrimSpace(r.stdout), "|")
	if r.code != 0 || len(parts) != 3 || len(parts[0]) != 32 || parts[1] != "h/x h/y" || len(strings.Fields(parts[2])) != 2 {
		t.Fatalf("session hold -- CMD: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if _, err := sessionOf(t, c, parts[0]); client.ErrorReason(err) != "SESSION_CLOSED" {
		t.Fatalf("after session hold -- CMD, DescribeSession: %v; want SESSION_CLOSED", err)
	}
	if r := coordctl(t, coord, nil, "session", "hold", "h/x", "--", "sh", "-c", "exit 4"); r.code != 4 {
		t.Fatalf("session hold -- CMD: exit %d; want CMD's 4", r.code)
	}
}

func TestSessionUsageErrors(t *testing.T) {
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	for _, tc := range []struct {
		args []string
		want int
		says string
	}{
		{[]string{"session"}, 2, "usage: coordctl [flags] session"},
		{[]string{"session", "open"}, 2, `unknown session command "open"`},
		{[]string{"session", "renew"}, 2, "usage: coordctl [flags] session renew ID"},
		{[]string{"session", "close", "a", "b"}, 2, "usage: coordctl [flags] session close ID"},
		{[]string{"session", "hold"}, 2, "usage: coordctl [flags] session hold NAME"},
		{[]string{"session", "create", "--", "true"}, 2, "does not run a command"},
		{[]string{"session", "renew", "-keep", "x"}, 2, "-keep"},
		{[]string{"session", "create", "-ttl", "0s"}, 2, "-ttl"},
		{[]string{"elect", "-session", "x", "e", "v"}, 2, "only lock attaches"},
		{[]string{"session", "create", "-ttl", "10m"}, 1, "ttl"},
		{[]string{"session", "renew", "nope"}, 1, "SESSION_NOT_FOUND"},
		{[]string{"session", "describe", strings.Repeat("0", 32)}, 1, "SESSION_NOT_FOUND"},
		{[]string{"lock", "-session", strings.Repeat("0", 32), "x", "--", "true"}, 1, "SESSION_NOT_FOUND"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := coordctl(t, coord, nil, tc.args...)
			if r.code != tc.want || !strings.Contains(r.stderr, tc.says) {
				t.Fatalf("exit %d, stderr %q; want exit %d saying %q", r.code, r.stderr, tc.want, tc.says)
			}
		})
	}
}
