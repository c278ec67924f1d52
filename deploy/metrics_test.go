package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

const (
	dashboardFile = "helm/coordinator/files/grafana-dashboard.json"
	alertsFile    = "helm/coordinator/files/alerts.yaml"
)

// targetLabels are the labels Prometheus adds to what it scrapes (and the
// Prometheus Operator to a ServiceMonitor's targets): no /metrics has them.
var targetLabels = []string{"instance", "job", "namespace", "pod", "service", "container", "endpoint"}

// query is one PromQL query of the dashboard or of the rules, and where.
type query struct {
	where, expr string
}

// dashboardQueries are the queries of every panel of the dashboard, rows'
// panels included, and the metrics and labels of its variables' queries.
func dashboardQueries(t *testing.T) (queries []query, variables map[string]string) {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels json.RawMessage `json:"panels"`
	}
	var d struct {
		UID        string          `json:"uid"`
		Panels     json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	ids := map[int]bool{}
	var walk func(raw json.RawMessage)
	walk = func(raw json.RawMessage) {
		if len(raw) == 0 {
			return
		}
		var ps []panel
		if err := json.Unmarshal(raw, &ps); err != nil {
			t.Fatalf("%s: panels: %v", dashboardFile, err)
		}
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("%s: two panels have the id %d", dashboardFile, p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
			}
			for _, tg := range p.Targets {
				queries = append(queries, query{fmt.Sprintf("dashboard panel %q", p.Title), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	variables = map[string]string{}
	labelValues := regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		text, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("%s: variable %s queries %q, not label_values(metric, label)", dashboardFile, v.Name, text)
			continue
		}
		variables[m[1]] = m[2]
	}
	if len(queries) < 20 || d.UID == "" {
		t.Fatalf("%s: %d queries, uid %q: not the dashboard", dashboardFile, len(queries), d.UID)
	}
	return queries, variables
}

// ruleQueries are the expressions of the alert rules. The file is ours and
// plain: an expr is on its line, or a block (expr: |) indented below it.
func ruleQueries(t *testing.T) []query {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	var queries []query
	alert := ""
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if name, ok := strings.CutPrefix(trimmed, "- alert: "); ok {
			alert = name
		}
		expr, ok := strings.CutPrefix(trimmed, "expr: ")
		if !ok {
			continue
		}
		if expr == "|" {
			indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
			var block []string
			for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) > indent) {
				i++
				block = append(block, lines[i])
			}
			expr = strings.Join(block, "\n")
		}
		queries = append(queries, query{"alert " + alert, expr})
	}
	if len(queries) != 7 {
		t.Fatalf("%s: found %d rule expressions, want the 7 alerts", alertsFile, len(queries))
	}
	return queries
}

// exported is what one or more /metrics pages export: every sample name
// (a histogram's _bucket, _sum and _count), with the labels it has.
type exported map[string]map[string]bool

func (e exported) add(fams map[string]*dto.MetricFamily) {
	for name, f := range fams {
		suffixes := []string{""}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			suffixes = []string{"_bucket", "_sum", "_count"}
		case dto.MetricType_SUMMARY:
			suffixes = []string{"", "_sum", "_count"}
		}
		for _, s := range suffixes {
			if e[name+s] == nil {
				e[name+s] = map[string]bool{}
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					e[name+s][l.GetName()] = true
				}
			}
			if s == "_bucket" {
				e[name+s]["le"] = true
			}
			if s == "" && f.GetType() == dto.MetricType_SUMMARY {
				e[name]["quantile"] = true
			}
		}
	}
}

func scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(resp.Body)
}

// problems lists what the queries name that e does not export: a metric,
// a label a selector matches on that its metric lacks, a label of a
// grouping clause that none of the query's metrics has.
func problems(queries []query, variables map[string]string, e exported) []string {
	var out []string
	has := func(metric, label string) bool { return e[metric][label] || slices.Contains(targetLabels, label) }
	for _, q := range queries {
		refs, err := promQueryRefs(q.expr)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", q.where, err))
			continue
		}
		for _, m := range refs.metrics {
			if e[m] == nil {
				out = append(out, fmt.Sprintf("%s: no metric %s in /metrics (query %s)", q.where, m, q.expr))
			}
		}
		for m, labels := range refs.matchers {
			for _, l := range labels {
				if e[m] != nil && !has(m, l) {
					out = append(out, fmt.Sprintf("%s: %s has no label %s", q.where, m, l))
				}
			}
		}
		for _, l := range refs.grouping {
			if !slices.ContainsFunc(refs.metrics, func(m string) bool { return has(m, l) }) {
				out = append(out, fmt.Sprintf("%s: none of %v has the label %s it groups by", q.where, refs.metrics, l))
			}
		}
	}
	for m, l := range variables {
		if e[m] == nil || !has(m, l) {
			out = append(out, fmt.Sprintf("dashboard variable: label_values(%s, %s): no such metric or label", m, l))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestTheDashboardAndTheAlertsUseWhatTheBinariesExport runs a coordinator
// on Redis and a housekeeper working a Deckard queue, makes them export
// every series (a reload of the access file, messages unlocked and timed
// out, the leader's queue gauges), and checks each metric and label that
// the dashboard's queries and the alert rules name against their /metrics.
func TestTheDashboardAndTheAlertsUseWhatTheBinariesExport(t *testing.T) {
	queries, variables := dashboardQueries(t)
	queries = append(queries, ruleQueries(t)...)

	coordBin, hkBin := build(t, "./cmd/coordinator"), build(t, "./cmd/housekeeper")
	redisURL := redistest.URL(t)
	stamp := time.Now().UnixNano()
	access := filepath.Join(t.TempDir(), "access")
	if err := os.WriteFile(access, []byte("tok *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	coord := start(t, coordBin, []string{
		"COORDINATOR_LISTEN=127.0.0.1:0", "COORDINATOR_METRICS_LISTEN=127.0.0.1:0", "COORDINATOR_LOG_FORMAT=text",
		"COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL=" + redisURL, fmt.Sprintf("COORDINATOR_REDIS_KEY_PREFIX=deploy-metrics-%d", stamp),
		"COORDINATOR_REDIS_NEW_STORE=true", // a throwaway prefix
		"COORDINATOR_ACCESS_FILE=" + access,
	})
	coordMetrics := coord.WaitLog(t, metricsServing)[1]
	coordAddr := coord.WaitLog(t, grpcServing)[1]
	coord.Signal(t, syscall.SIGHUP)
	coord.WaitLog(t, regexp.MustCompile(`msg="access file re-read"`))

	rdb := redistest.Client(t)
	d := housekeepertest.Deckard{Prefix: fmt.Sprintf("deploy-metrics-%d", stamp)}
	now := housekeepertest.NowMs(t, rdb)
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		ctx := context.Background()
		d.Put(ctx, p, "q1", housekeepertest.Active, "waiting", 1)
		d.Put(ctx, p, "q1", housekeepertest.Tmp, "timed-out", float64(now-1000))
		d.Put(ctx, p, "q1", housekeepertest.LockAck, "acked", float64(now-1000))
		d.Put(ctx, p, "q1", housekeepertest.LockAckScore, "acked", 5)
		d.Put(ctx, p, "q1", housekeepertest.LockNack, "nacked", float64(now-1000))
	})
	hk := start(t, hkBin, []string{
		"HOUSEKEEPER_COORDINATOR_ADDR=" + coordAddr, "HOUSEKEEPER_COORDINATOR_TOKEN=tok", "HOUSEKEEPER_COORDINATOR_INSECURE_TOKEN=true",
		"HOUSEKEEPER_REDIS_URL=" + redisURL, "HOUSEKEEPER_PREFIX=" + d.Prefix, "HOUSEKEEPER_LEASE_NAMESPACE=" + d.Prefix,
		"HOUSEKEEPER_INSTANCE_ID=hk-0", "HOUSEKEEPER_METRICS_LISTEN=127.0.0.1:0", "HOUSEKEEPER_LOG_FORMAT=text",
		"HOUSEKEEPER_DISCOVERY_INTERVAL=200ms", "HOUSEKEEPER_PROBE_INTERVAL=200ms",
	})
	hkMetrics := hk.WaitLog(t, metricsServing)[1]

	// Series appear as the work happens: scrape until nothing is missing.
	testwait.UntilNil(t, 30*time.Second, "every series the dashboard and the alerts name", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e := exported{}
		for _, url := range []string{"http://" + coordMetrics + "/metrics", "http://" + hkMetrics + "/metrics"} {
			fams, err := scrape(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			e.add(fams)
		}
		if missing := problems(queries, variables, e); len(missing) > 0 {
			return fmt.Errorf("the coordinator and the housekeeper do not export:\n%s", strings.Join(missing, "\n"))
		}
		return nil
	})
	t.Logf("%d queries checked against the live /metrics of a coordinator and a housekeeper", len(queries))
}

// TestProblemsAreFound keeps the check above honest: a misspelt metric, a
// label a metric lacks and a grouping nobody has are reported.
func TestProblemsAreFound(t *testing.T) {
	e := exported{"a_total": {"reason": true}, "b_seconds_bucket": {"le": true, "task": true}}
	got := problems([]query{
		{"ok", `sum by (reason, instance) (rate(a_total{reason="x", job="j"}[5m]))`},
		{"ok too", `histogram_quantile(0.9, sum by (task, le) (rate(b_seconds_bucket[5m])))`},
		{"misspelt", `rate(a_totl[5m])`},
		{"wrong label", `a_total{outcome="x"}`},
		{"wrong grouping", `sum by (queue) (a_total)`},
	}, map[string]string{"a_total": "lock"}, e)
	want := []string{
		"dashboard variable: label_values(a_total, lock): no such metric or label",
		"misspelt: no metric a_totl in /metrics (query rate(a_totl[5m]))",
		"wrong grouping: none of [a_total] has the label queue it groups by",
		"wrong label: a_total has no label outcome",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
