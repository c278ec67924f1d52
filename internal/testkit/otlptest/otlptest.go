// Package otlptest is an OTLP trace receiver for tests, over gRPC and over
// HTTP (http/protobuf) on loopback: it keeps every span it is sent, by
// "service.name/span name", with its trace id and attributes.
//
// It is a test kit (internal/testkit): only tests import it, and it imports
// nothing of this module.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one span received.
type Span struct {
	// Name is "service.name/span name".
	Name    string
	TraceID string
	// Attributes holds the span's string attributes.
	Attributes map[string]string
}

// Collector keeps the spans it receives.
type Collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []Span
}

// Start serves a Collector over OTLP/gRPC on loopback until the test ends;
// its endpoint is "http://" + the returned address.
func Start(t testing.TB) (*Collector, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return c, lis.Addr().String()
}

// ServeHTTP serves c over OTLP/HTTP (http/protobuf) too, until the test
// ends, and returns its endpoint URL.
func (c *Collector) ServeHTTP(t testing.TB) string {
	t.Helper()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(body, req)
		}
		if r.URL.Path != "/v1/traces" || err != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.add(req)
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(web.Close)
	return web.URL
}

// Export receives spans over gRPC.
func (c *Collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (c *Collector) add(req *collectortrace.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var service string
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, a := range sp.GetAttributes() {
					attrs[a.GetKey()] = a.GetValue().GetStringValue()
				}
				c.spans = append(c.spans, Span{Name: service + "/" + sp.GetName(), TraceID: hex.EncodeToString(sp.GetTraceId()), Attributes: attrs})
			}
		}
	}
}

// Spans returns the spans received so far, in arrival order.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.spans)
}

// Names returns the names of the spans received so far.
func (c *Collector) Names() []string {
	var names []string
	for _, s := range c.Spans() {
		names = append(names, s.Name)
	}
	return names
}

// Find returns the first span received named name.
func (c *Collector) Find(name string) (Span, bool) {
	for _, s := range c.Spans() {
		if s.Name == name {
			return s, true
		}
	}
	return Span{}, false
}

// Shared reports whether some trace holds spans named a and b.
func (c *Collector) Shared(a, b string) bool {
	traces := map[string]bool{}
	for _, s := range c.Spans() {
		if s.Name == a {
			traces[s.TraceID] = true
		}
	}
	for _, s := range c.Spans() {
		if s.Name == b && traces[s.TraceID] {
			return true
		}
	}
	return false
}
