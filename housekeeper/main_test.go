package housekeeper_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/coordinator-dev/coordinator/housekeeper/housekeepertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newDeckard returns a Deckard layout under a prefix of this test's own, so
// that tests can share one Redis; its keys are deleted when t ends.
func newDeckard(t *testing.T, rdb *redis.Client) housekeepertest.Deckard {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "hk-test-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx := context.Background()
		it := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		var keys []string
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		for len(keys) > 0 {
			n := min(len(keys), 500)
			rdb.Unlink(ctx, keys[:n]...)
			keys = keys[n:]
		}
	})
	return housekeepertest.Deckard{Prefix: prefix}
}

// allKeys lists every key under d's prefix.
func allKeys(t *testing.T, rdb *redis.Client, d housekeepertest.Deckard) map[string]bool {
	t.Helper()
	ctx := context.Background()
	out := make(map[string]bool)
	it := rdb.Scan(ctx, 0, d.Prefix+":*", 1000).Iterator()
	for it.Next(ctx) {
		out[it.Val()] = true
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// testLogger logs warnings and errors into the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// metric sums the series of the metric family name whose labels include
// the given name/value pairs: counter and gauge values, histogram sample
// counts.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// discardLogger is for tests whose warnings are expected.
var discardLogger = slog.New(slog.DiscardHandler)
