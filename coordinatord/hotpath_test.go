package coordinatord_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordinator-dev/coordinator/coordinatord"
	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/limits"
)

// BenchmarkCycle measures the unary hot path in one process: uncontended
// TryAcquire + Release cycles, each worker its own name, over one client
// connection, with the default caps, with none, and with the default caps
// and tracing on (every call sampled, spans batched into an exporter that
// drops them: the cost of making them). Client and server share
// the process, so allocs/op counts both sides; the cross-process figures
// come from the bench (bench/ -suite leases). The Redis store needs
// COORDINATOR_TEST_REDIS_URL (scripts/with-redis.sh), e.g.
//
//	./scripts/with-redis.sh go test -run '^$' -bench Cycle -benchmem ./coordinatord
func BenchmarkCycle(b *testing.B) {
	for _, kind := range []string{coordinatord.StoreMemory, coordinatord.StoreRedis} {
		for _, v := range []struct {
			caps, traced bool
		}{{true, false}, {false, false}, {true, true}} {
			b.Run(fmt.Sprintf("%s/caps=%t/traced=%t", kind, v.caps, v.traced), func(b *testing.B) {
				cfg := coordtest.Config(b, kind)
				if !v.caps {
					cfg.Limits = limits.Config{}
				}
				if v.traced {
					tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
					b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
					cfg.TracerProvider = tp
				}
				c := coordtest.Start(b, cfg)
				client := coordinatorv1.NewCoordinatorClient(c.Dial(b))
				ttl := durationpb.New(30 * time.Second)
				var worker atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(4) // 4 × GOMAXPROCS workers
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					w := worker.Add(1)
					name, holder := fmt.Sprintf("bench/%d", w), fmt.Sprintf("w%d", w)
					ctx := context.Background()
					for pb.Next() {
						resp, err := client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: ttl})
						if err != nil || !resp.GetAcquired() {
							b.Errorf("TryAcquire: %v, %v", resp, err)
							return
						}
						if _, err := client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: resp.GetLease().GetToken()}); err != nil {
							b.Errorf("Release: %v", err)
							return
						}
					}
				})
			})
		}
	}
}
