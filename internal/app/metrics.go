package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a Prometheus registry with the Go runtime and process
// collectors every binary reports.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// MetricsServer serves a registry at /metrics.
type MetricsServer struct {
	srv  *http.Server
	lis  net.Listener
	done chan error
}

// ServeMetrics listens on addr and serves reg at /metrics until Shutdown.
// Listening fails here, at start, rather than later in the background.
func ServeMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (*MetricsServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	m := &MetricsServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		lis:  lis,
		done: make(chan error, 1),
	}
	go func() {
		err := m.srv.Serve(lis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		m.done <- err
	}()
	log.Info("metrics serving", "addr", lis.Addr().String(), "path", "/metrics")
	return m, nil
}

// Addr is the address the metrics are served on.
func (m *MetricsServer) Addr() net.Addr { return m.lis.Addr() }

// Done delivers the error that stopped serving early, if any.
func (m *MetricsServer) Done() <-chan error { return m.done }

// Shutdown stops serving, waiting for requests in flight until ctx ends.
func (m *MetricsServer) Shutdown(ctx context.Context) error {
	if err := m.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("metrics shutdown: %w", err)
	}
	return nil
}
