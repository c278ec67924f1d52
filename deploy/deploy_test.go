package deploy

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// root is the repository root, from this package's folder.
const root = ".."

// needTool returns the path of tool, skipping the test when it is missing,
// except in CI (CI set), where .ci/run installs it and a missing one fails.
func needTool(t *testing.T, install string, names ...string) string {
	t.Helper()
	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing in CI: .ci/run installs it (%s)", strings.Join(names, " or "), install)
	}
	t.Skipf("%s is not installed (%s)", strings.Join(names, " or "), install)
	return ""
}

// build builds the module's package pkg (./cmd/…) into dir and returns the
// binary.
func build(t *testing.T, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
	}
	return out
}

// process is a binary running under a test, and its log (stderr).
type process struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	log []string
}

// start runs bin with args and env (and nothing else of the test's
// environment) in a folder of its own; it is killed at cleanup.
func start(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	return startIn(t, t.TempDir(), bin, env, args...)
}

// startIn is start in the folder dir.
func startIn(t *testing.T, dir, bin string, env []string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...)}
	p.cmd.Env = env
	p.cmd.Dir = dir
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	go p.read(stderr)
	return p
}

func (p *process) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.log = append(p.log, sc.Text())
		p.mu.Unlock()
	}
}

// waitLog waits for a log line matching re and returns its submatches.
func (p *process) waitLog(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p.mu.Lock()
		for _, line := range p.log {
			if m := re.FindStringSubmatch(line); m != nil {
				p.mu.Unlock()
				return m
			}
		}
		log := strings.Join(p.log, "\n")
		p.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("%s: no log line matching %s within 30s:\n%s", p.cmd.Path, re, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Log lines the binaries write when they serve (text format).
var (
	grpcServing    = regexp.MustCompile(`msg="coordinator serving" addr=(\S+)`)
	metricsServing = regexp.MustCompile(`msg="metrics serving".* addr=(\S+)`)
)
