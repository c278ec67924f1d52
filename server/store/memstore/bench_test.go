package memstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
)

// BenchmarkGrantRelease measures grant-and-release cycles on the real clock
// with and without a state directory, and the state writes they cost
// (writes/s; each write is one fsync).
func BenchmarkGrantRelease(b *testing.B) {
	for _, persistent := range []bool{false, true} {
		b.Run(fmt.Sprintf("stateDir=%v", persistent), func(b *testing.B) {
			dir := ""
			if persistent {
				dir = b.TempDir()
			}
			s, err := memstore.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			var worker atomic.Int64
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				name := fmt.Sprintf("job-%d", worker.Add(1))
				for pb.Next() {
					res, err := s.Acquire(b.Context(), store.AcquireRequest{Name: name, Holder: "h", TTL: 10 * time.Second})
					if err != nil || !res.Acquired {
						b.Fatalf("Acquire = %+v, %v", res, err)
					}
					if _, err := s.Release(b.Context(), name, "h", res.Lease.Token); err != nil {
						b.Fatal(err)
					}
				}
			})
			elapsed := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N)/elapsed, "grants/s")
			b.ReportMetric(float64(s.Syncs())/elapsed, "writes/s")
		})
	}
}
