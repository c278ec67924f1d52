package server

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestLeasesHeldCountsEachGrant: coordinator_leases_held counts grants,
// not names: a semaphore's holders one each, a release ending only its own
// grant, a renewal none more.
func TestLeasesHeldCountsEachGrant(t *testing.T) {
	type step struct {
		release bool
		name    string
		token   uint64
		ttl     time.Duration
	}
	grant := func(name string, token uint64) step { return step{name: name, token: token, ttl: time.Minute} }
	release := func(name string, token uint64) step { return step{release: true, name: name, token: token} }
	for _, c := range []struct {
		name  string
		steps []step
		want  float64
	}{
		{"two names", []step{grant("a", 1), grant("b", 1)}, 2},
		{"a semaphore's two holders", []step{grant("s", 1), grant("s", 2)}, 2},
		{"one of them released", []step{grant("s", 1), grant("s", 2), release("s", 1)}, 1},
		{"the later one released", []step{grant("s", 1), grant("s", 2), release("s", 2)}, 1},
		{"a renewal counts no more", []step{grant("s", 1), grant("s", 1)}, 1},
		{"a release of another token of the name", []step{grant("a", 2), release("a", 1)}, 1},
		{"all released", []step{grant("s", 1), grant("s", 2), release("s", 2), release("s", 1)}, 0},
		{"an expired grant", []step{{name: "a", token: 1, ttl: -time.Second}, grant("a", 2)}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &heldLeases{leases: map[grantKey]time.Time{}}
			for _, s := range c.steps {
				if s.release {
					h.released(s.name, s.token)
				} else {
					h.granted(s.name, s.token, s.ttl)
				}
			}
			if got := gaugeValue(t, h); got != c.want {
				t.Errorf("coordinator_leases_held = %v, want %v", got, c.want)
			}
		})
	}
}

// gaugeValue is the value of the one gauge c collects.
func gaugeValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
