package app

import "testing"

func TestGCPercentKeepsTheHeadroomAndNeverGoesBelowTheDefault(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 1600},         // nothing live yet: a minimum heap of 64 MiB
		{1 << 10, 1600},   // the minimum heap, not 64 MiB per KiB
		{1 * mib, 1625},   // the minimum heap: 65 MiB
		{16 * mib, 400},   // 64 MiB over 16 MiB
		{64 * mib, 100},   // as much as the live heap: the default
		{1024 * mib, 100}, // never below the default
	} {
		if got := gcPercent(c.live, 64*mib); got != c.want {
			t.Errorf("gcPercent(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
}
