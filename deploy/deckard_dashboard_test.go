package deploy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
	"github.com/coordinator-dev/coordinator/internal/testkit/mongotest"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
)

// deckardHousekeepingQueries are the queries of Deckard's own Grafana
// dashboard (takenet/deckard, dashboards/grafana.json) that read what its
// housekeeping exports, panel by panel. $queue and $service_name select
// everything here, as their "All" does; app_kubernetes_io_name is a label
// Prometheus adds from the pod's labels, not one any /metrics has.
var deckardHousekeepingQueries = []struct {
	panel string
	exprs []string
}{
	{"Oldest Message by Queue", []string{`max(deckard_oldest_message{queue=~".*", app_kubernetes_io_name=~".*"}) by (queue)`}},
	{"Total Elements by Queue", []string{`max(deckard_total_messages{queue=~".*", app_kubernetes_io_name=~".*"}) by (queue)`}},
	{"Timeouts by Queue", []string{
		`sum(increase(deckard_message_timeout{queue=~".*", app_kubernetes_io_name=~".*"}[1m])) by (queue)`,
		`sum(increase(deckard_message_timeout_total{queue=~".*", app_kubernetes_io_name=~".*"}[1m])) by (queue)`,
	}},
	{"TTL", []string{
		`sum(increase(deckard_ttl_messages_removed_total{queue=~".*", app_kubernetes_io_name=~".*"}[1m])) by (queue)`,
		`sum(increase(deckard_ttl_messages_cache_removed_total{queue=~".*", app_kubernetes_io_name=~".*"}[1m])) by (queue)`,
		`sum(increase(deckard_ttl_messages_removed{queue=~".*", app_kubernetes_io_name=~".*"}[1m])) by (queue)`,
		`sum(increase(deckard_ttl_messages_cache_removed{queue=~".*", app_kubernetes_io_name=~".*"}[1m])) by (queue)`,
	}},
	{"Max elements", []string{
		`sum(increase(deckard_exceeding_messages_removed_total{queue=~".*", app_kubernetes_io_name=~".*"}[1m])) by (queue)`,
		`sum(increase(deckard_exceeding_messages_cache_removed_total{queue=~".*", app_kubernetes_io_name=~".*"}[1m])) by (queue)`,
		`sum(increase(deckard_exceeding_messages_removed{queue=~".*", app_kubernetes_io_name=~".*"}[1m])) by (queue)`,
		`sum(increase(deckard_exceeding_messages_cache_removed{queue=~".*", app_kubernetes_io_name=~".*"}[1m])) by (queue)`,
	}},
}

// legacyCounterName reports a query of a counter without the _total suffix
// that Deckard's Prometheus exporter has added to counters since its
// OpenTelemetry exporter's 0.x days: its dashboard queries both spellings,
// and Deckard itself exports only the _total one, as the housekeeper does
// (exporting both would draw every line twice).
func legacyCounterName(expr string) bool {
	for _, name := range []string{"deckard_message_timeout", "deckard_ttl_messages_removed", "deckard_ttl_messages_cache_removed",
		"deckard_exceeding_messages_removed", "deckard_exceeding_messages_cache_removed"} {
		if strings.Contains(expr, name+"{") {
			return true
		}
	}
	return false
}

// TestDeckardsDashboardFindsTheHousekeepingSeries runs a housekeeper with
// its storage tasks beside a Deckard Redis and storage in which something
// times out, expires and exceeds its queue's max_elements, and checks every
// housekeeping query of Deckard's own dashboard against its /metrics: each
// panel's queries find their series, so that the dashboard keeps working
// when Deckard's replicas run with their housekeeper off.
func TestDeckardsDashboardFindsTheHousekeepingSeries(t *testing.T) {
	var queries []query
	for _, p := range deckardHousekeepingQueries {
		for _, e := range p.exprs {
			if !legacyCounterName(e) {
				queries = append(queries, query{fmt.Sprintf("Deckard's dashboard panel %q", p.panel), e})
			}
		}
		if !slices.ContainsFunc(p.exprs, func(e string) bool { return !legacyCounterName(e) }) {
			t.Fatalf("panel %q has no query but legacy ones", p.panel)
		}
	}

	coordBin, hkBin := build(t, "./cmd/coordinator"), build(t, "./cmd/housekeeper")
	redisURL := redistest.URL(t)
	stamp := time.Now().UnixNano()
	coord := start(t, coordBin, []string{
		"COORDINATOR_LISTEN=127.0.0.1:0", "COORDINATOR_METRICS_LISTEN=", "COORDINATOR_LOG_FORMAT=text",
		"COORDINATOR_STORE=redis", "COORDINATOR_REDIS_URL=" + redisURL, fmt.Sprintf("COORDINATOR_REDIS_KEY_PREFIX=deploy-deckard-%d", stamp),
		"COORDINATOR_REDIS_NEW_STORE=true",
	})
	coordAddr := coord.WaitLog(t, grpcServing)[1]

	rdb := redistest.Client(t)
	db := mongotest.Database(t)
	d := housekeepertest.Deckard{Prefix: fmt.Sprintf("deploy-deckard-%d", stamp)}
	now := time.Now()
	housekeepertest.SetMaxElements(t, db, "full::a", 1)
	housekeepertest.Store(t, db,
		housekeepertest.Stored{Queue: "q::a", ID: "expired", Expiry: now.Add(-time.Minute)},
		housekeepertest.Stored{Queue: "q::a", ID: "timed-out", Expiry: now.Add(time.Hour)},
		housekeepertest.Stored{Queue: "full::a", ID: "old", Expiry: now.Add(time.Hour)},
		housekeepertest.Stored{Queue: "full::a", ID: "new", Expiry: now.Add(2 * time.Hour)},
	)
	ms := housekeepertest.NowMs(t, rdb)
	d.Seed(t, rdb, func(p redis.Pipeliner) {
		ctx := context.Background()
		p.Set(ctx, d.Prefix+":{recovery_storage_breakpoint}", "recovery_finished", 0)
		d.Put(ctx, p, "q::a", housekeepertest.Active, "expired", 1)
		d.Put(ctx, p, "q::a", housekeepertest.Tmp, "timed-out", float64(ms-1000))
		d.Put(ctx, p, "full::a", housekeepertest.Active, "old", 1)
		d.Put(ctx, p, "full::a", housekeepertest.Active, "new", 1)
	})
	hk := start(t, hkBin, []string{
		"HOUSEKEEPER_COORDINATOR_ADDR=" + coordAddr, "HOUSEKEEPER_REDIS_URL=" + redisURL, "HOUSEKEEPER_PREFIX=" + d.Prefix,
		"HOUSEKEEPER_LEASE_NAMESPACE=" + d.Prefix, "HOUSEKEEPER_INSTANCE_ID=hk-0", "HOUSEKEEPER_METRICS_LISTEN=127.0.0.1:0",
		"HOUSEKEEPER_LOG_FORMAT=text", "HOUSEKEEPER_STORAGE_URI=" + mongotest.URI(t), "HOUSEKEEPER_MONGO_DATABASE=" + db.Name(),
		"HOUSEKEEPER_STORAGE_INTERVAL=200ms", "HOUSEKEEPER_METRICS_INTERVAL=1s",
	})
	hkMetrics := hk.WaitLog(t, metricsServing)[1]

	testwait.UntilNil(t, 30*time.Second, "every series Deckard's dashboard reads from the housekeeper", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		fams, err := scrape(ctx, "http://"+hkMetrics+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		e := exported{}
		e.add(fams)
		for m := range e {
			e[m]["app_kubernetes_io_name"] = true // Prometheus adds it from the pod's labels
		}
		if missing := problems(queries, map[string]string{"deckard_total_messages": "queue"}, e); len(missing) > 0 {
			return fmt.Errorf("the housekeeper does not export:\n%s", strings.Join(missing, "\n"))
		}
		return nil
	})
	t.Logf("%d housekeeping queries of Deckard's dashboard (and its queue variable) checked against a live housekeeper", len(queries))
}
