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
)

// binary is coordctl built for the tests.
var binary string

func TestMain(m *testing.M) {
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
	if _, err := c.API().Release(context.Background(), &coordinatorv1.ReleaseRequest{Name: "victim", Holder: lease.GetHolder(), Token: lease.GetToken()}); err != nil {
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
