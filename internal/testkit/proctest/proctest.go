package proctest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// logTimeout bounds WaitLog and WaitListening: a binary that is starting
// on a loaded machine.
const logTimeout = 30 * time.Second

// builds are the binaries Build made, by the folder and package it built.
var builds struct {
	mu   sync.Mutex
	dir  string // a temporary folder for all of them, which Main removes
	bins map[string]string
	errs map[string]error
}

// Build builds the main package pkg, as `go build` run in dir names it,
// the first time a test of this test binary asks for it, and returns the
// binary's path. A package that does not build fails t.
func Build(t testing.TB, dir, pkg string) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join(dir, pkg))
	if err != nil {
		t.Fatal(err)
	}
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if bin, ok := builds.bins[abs]; ok {
		return bin
	}
	if err := builds.errs[abs]; err != nil {
		t.Fatal(err)
	}
	if builds.dir == "" {
		if builds.dir, err = os.MkdirTemp("", "proctest-"); err != nil {
			t.Fatal(err)
		}
		builds.bins, builds.errs = map[string]string{}, map[string]error{}
	}
	out := filepath.Join(builds.dir, fmt.Sprint(len(builds.bins)), filepath.Base(abs))
	cmd := exec.Command("go", "build", "-o", out, pkg) //nolint:gosec // G204: a test names the package of this module to build
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		builds.errs[abs] = fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
		t.Fatal(builds.errs[abs])
	}
	builds.bins[abs] = out
	return out
}

// Main runs the tests and removes the binaries Build made; a package whose
// tests call Build runs it from its TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// Process is a binary running under a test, and its log.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the log is read to its end and the process waited for
	err  error         // the process's exit, once done is closed

	mu    sync.Mutex
	log   []string
	added chan struct{} // closed, and replaced, at every line logged
}

// Start starts cmd, as the caller made it (binary, arguments, environment,
// folder), keeping its stderr as its log; it is killed when t ends, and its
// log is shown when t has failed.
func Start(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{cmd: cmd, done: make(chan struct{}), added: make(chan struct{})}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.log = append(p.log, sc.Text())
			close(p.added)
			p.added = make(chan struct{})
			p.mu.Unlock()
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s's log:\n%s", filepath.Base(cmd.Path), p.Log())
		}
	})
	return p
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Log is the log so far, one line a line.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

// WaitLog waits for a log line matching re and returns its submatches;
// it fails t when the process exits, or logs nothing that matches within
// 30 s.
func (p *Process) WaitLog(t testing.TB, re *regexp.Regexp) []string {
	t.Helper()
	timeout := time.NewTimer(logTimeout)
	defer timeout.Stop()
	for seen := 0; ; {
		p.mu.Lock()
		lines, added := p.log[seen:], p.added
		p.mu.Unlock()
		for _, line := range lines {
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		}
		seen += len(lines)
		select {
		case <-added:
		case <-p.done:
			if p.logged() == seen {
				t.Fatalf("%s exited (%v) without a log line matching %s:\n%s", p.cmd.Path, p.err, re, p.Log())
			}
		case <-timeout.C:
			t.Fatalf("%s: no log line matching %s within %s:\n%s", p.cmd.Path, re, logTimeout, p.Log())
		}
	}
}

func (p *Process) logged() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.log)
}

// Signal sends sig to the process.
func (p *Process) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// Kill stops the process at once, as a crash would (kill -9), and waits
// for it; it does nothing to a process that has exited.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Done is closed once the process has exited and its log is read.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and returns how it did, as
// exec.Cmd.Wait does.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, for a process to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}
