package coordinatord

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/coordinator-dev/coordinator/server/store/storetrace"
)

// TestTracingIsInstalledOnlyWhenAskedFor: without tracing, the store is the
// one opened, unwrapped, and nothing of tracing is kept (so no stats handler
// or interceptor was added: New adds them only with it); with a provider,
// the store calls go through the tracing decorator.
func TestTracingIsInstalledOnlyWhenAskedFor(t *testing.T) {
	for _, traced := range []bool{false, true} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg, err := ParseConfig(fs, []string{"-state-dir", ""}, func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		if traced {
			tp := sdktrace.NewTracerProvider()
			defer func() { _ = tp.Shutdown(context.Background()) }()
			cfg.TracerProvider = tp
		}
		s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		_, wrapped := s.store.(*storetrace.Store)
		if got := s.tracing != nil; got != traced || wrapped != traced {
			t.Errorf("asked to trace: %v; tracing set up: %v, store wrapped: %v", traced, got, wrapped)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s.Shutdown(ctx)
		cancel()
	}
}
