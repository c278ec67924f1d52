package deploy

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/coordinator-dev/coordinator/internal/testkit/proctest"
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

func TestMain(m *testing.M) { proctest.Main(m) }

// build builds the module's package pkg (./cmd/…), once for all the tests
// of this package, and returns the binary.
func build(t *testing.T, pkg string) string {
	t.Helper()
	return proctest.Build(t, root, pkg)
}

// start runs bin with args and env (and nothing else of the test's
// environment) in a folder of its own; it is killed at cleanup.
func start(t *testing.T, bin string, env []string, args ...string) *proctest.Process {
	t.Helper()
	return startIn(t, t.TempDir(), bin, env, args...)
}

// startIn is start in the folder dir.
func startIn(t *testing.T, dir, bin string, env []string, args ...string) *proctest.Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir = env, dir
	return proctest.Start(t, cmd)
}

// Log lines the binaries write when they serve (text format).
var (
	grpcServing    = regexp.MustCompile(`msg="coordinator serving" addr=(\S+)`)
	metricsServing = regexp.MustCompile(`msg="metrics serving".* addr=(\S+)`)
)
