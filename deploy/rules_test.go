package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const installPromtool = "Debian: apt-get install prometheus, which has promtool"

// promtool runs promtool with args in this folder.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(needTool(t, installPromtool, "promtool"), args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The rules are valid, and behave as their unit tests (alerts_test.yaml)
// say: each alert fires on the series it is about, after its "for", with
// its labels and annotations, and not on the others.
func TestTheAlertRulesPassPromtool(t *testing.T) {
	promtool(t, "check", "rules", alertsFile)
	promtool(t, "test", "rules", "alerts_test.yaml")
}

// Every query of the dashboard is valid PromQL: promtool checks them as
// recording rules, with Grafana's variables replaced.
func TestTheDashboardQueriesAreValidPromQL(t *testing.T) {
	queries, _ := dashboardQueries(t)
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range queries {
		expr, _ := json.Marshal(grafana.Replace(q.expr)) // a JSON string is a YAML string
		fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: %s\n", i, expr)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "rules", file)
}
