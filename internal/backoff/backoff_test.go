package backoff

import (
	"testing"
	"time"
)

func TestDelaysGrowWithinBoundsAndReset(t *testing.T) {
	const lo, hi = 50 * time.Millisecond, 2 * time.Second
	b := New(lo, hi)
	tests := []struct {
		attempt  int
		nominal  time.Duration
		upperCap time.Duration
	}{
		{1, 50 * time.Millisecond, hi},
		{2, 100 * time.Millisecond, hi},
		{3, 200 * time.Millisecond, hi},
		{4, 400 * time.Millisecond, hi},
		{5, 800 * time.Millisecond, hi},
		{6, 1600 * time.Millisecond, hi},
		{7, 2 * time.Second, hi},
		{40, 2 * time.Second, hi},
		{80, 2 * time.Second, hi}, // far past overflow of the doubling
	}
	attempt := 0
	for _, tt := range tests {
		var d time.Duration
		for attempt < tt.attempt {
			d = b.Next()
			attempt++
		}
		low := time.Duration(float64(tt.nominal) * (1 - Jitter))
		high := min(time.Duration(float64(tt.nominal)*(1+Jitter)), tt.upperCap)
		if d < low || d > high {
			t.Errorf("attempt %d: delay %s, want within [%s, %s]", tt.attempt, d, low, high)
		}
	}
	b.Reset()
	if d := b.Next(); d > time.Duration(float64(lo)*(1+Jitter)) {
		t.Errorf("after Reset: delay %s, want about %s", d, lo)
	}
}
