package client

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
)

// BenchmarkAcquireRelease measures TryLock+Release cycles through one
// Client from 64 goroutines, against a coordinator (in this process) on the
// Redis store, over the operation stream:
//
//	./scripts/with-redis.sh go test -run '^$' -bench AcquireRelease ./client/
func BenchmarkAcquireRelease(b *testing.B) {
	coord := coordtest.Start(b, coordtest.Config(b, "redis"))
	c := dial(b, coord)
	ctx := testCtx(b)
	var next atomic.Int64
	b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		name := fmt.Sprintf("bench/%d", next.Add(1))
		for pb.Next() {
			l, err := c.TryLock(ctx, name)
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := l.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}
