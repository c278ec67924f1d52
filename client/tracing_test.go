package client

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
)

// recorded is a tracer provider that keeps the spans it ends in memory.
type recorded struct {
	tp  *sdktrace.TracerProvider
	mem *tracetest.InMemoryExporter
}

func newRecorded(t *testing.T) recorded {
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(mem))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return recorded{tp: tp, mem: mem}
}

// find returns the ended spans that match, waiting (generously) until there
// are at least n: a server span ends after its answer is on its way.
func (r recorded) find(t *testing.T, n int, what string, match func(tracetest.SpanStub) bool) []tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	eventually(t, what, func() bool {
		found = found[:0]
		for _, s := range r.mem.GetSpans() {
			if match(s) {
				found = append(found, s)
			}
		}
		return len(found) >= n
	})
	return found
}

func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func named(name string, kind trace.SpanKind) func(tracetest.SpanStub) bool {
	return func(s tracetest.SpanStub) bool { return s.Name == name && s.SpanKind == kind }
}

func childOf(parent tracetest.SpanStub, name string) func(tracetest.SpanStub) bool {
	return func(s tracetest.SpanStub) bool {
		return s.Name == name && s.Parent.SpanID() == parent.SpanContext.SpanID() && s.SpanContext.TraceID() == parent.SpanContext.TraceID()
	}
}

// tracedCoordinator starts a coordinator of kind that traces into its own
// recorder.
func tracedCoordinator(t *testing.T, kind string) (*coordtest.Coordinator, recorded) {
	server := newRecorded(t)
	cfg := coordtest.Config(t, kind)
	cfg.TracerProvider = server.tp
	return coordtest.Start(t, cfg), server
}

// TestAWaitingCallCountsItsStoreAttempts: a Lock that waits in line tries
// the store again when its turn comes, and its store spans say which
// attempt each was, the last one granted.
func TestAWaitingCallCountsItsStoreAttempts(t *testing.T) {
	coord, server := tracedCoordinator(t, "memory")
	clientSide := newRecorded(t)
	holder := dial(t, coord)
	waiter := dial(t, coord, WithTracerProvider(clientSide.tp))
	ctx := testCtx(t)
	held, err := holder.TryLock(ctx, "traced/queue")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, "traced/queue")
		if err == nil {
			_, err = l.Release(ctx)
		}
		got <- err
	}()
	eventually(t, "waiter queued", func() bool {
		d, err := holder.Describe(ctx, "traced/queue")
		return err == nil && d.Waiters == 1
	})
	if _, err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	const method = "coordinator.v1.Coordinator/TryAcquire"
	call := clientSide.find(t, 1, "the waiter's client span", named(method, trace.SpanKindClient))[0]
	served := server.find(t, 1, "the waiter's server span", childOf(call, method))[0]
	attempts := server.find(t, 2, "two store attempts", childOf(served, "store acquire"))
	slices.SortFunc(attempts, func(a, b tracetest.SpanStub) int {
		return int(attr(a, "coordinator.store.attempt").AsInt64() - attr(b, "coordinator.store.attempt").AsInt64())
	})
	var seen []string
	for _, a := range attempts {
		seen = append(seen, fmt.Sprintf("%d:%s", attr(a, "coordinator.store.attempt").AsInt64(), attr(a, "coordinator.store.outcome").AsString()))
	}
	if first, last := seen[0], seen[len(seen)-1]; first != "1:not_acquired" || last != fmt.Sprintf("%d:acquired", len(seen)) {
		t.Fatalf("attempts %v: want 1:not_acquired first, then consecutive attempts, the last acquired", seen)
	}
}

// TestASessionOperationJoinsTheCallersTrace: over the operation stream, a
// traced Client gives each lease call the client span a unary call gets, a
// child of the caller's, and sends its trace context in the operation: the
// coordinator's span of the operation is the client span's child, linked
// to the stream's span, with its store calls as children, which say their
// script, attempt and outcome.
func TestASessionOperationJoinsTheCallersTrace(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			coord, server := tracedCoordinator(t, kind)
			clientSide := newRecorded(t)
			c, err := New(coord.Addr(), WithTracerProvider(clientSide.tp))
			if err != nil {
				t.Fatal(err)
			}
			ctx, work := clientSide.tp.Tracer("test").Start(testCtx(t), "work")
			lease, err := c.TryLock(ctx, "traced/session")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			work.End()
			if err := c.Close(); err != nil { // ends the stream, and its span
				t.Fatal(err)
			}

			stream := clientSide.find(t, 1, "the operation stream's client span", named("coordinator.v1.Coordinator/Stream", trace.SpanKindClient))[0]
			for _, method := range []string{"TryAcquire", "Release"} {
				name := "coordinator.v1.Coordinator/" + method
				call := clientSide.find(t, 1, "the SDK's span of the "+method, named(name, trace.SpanKindClient))[0]
				if call.Parent.SpanID() != work.SpanContext().SpanID() || call.SpanContext.TraceID() != work.SpanContext().TraceID() {
					t.Fatalf("the SDK's span of the %s is not a child of the caller's", method)
				}
				if !attr(call, "coordinator.stream.operation").AsBool() {
					t.Errorf("the SDK's span of the %s does not say it is a stream operation", method)
				}
				op := server.find(t, 1, "the coordinator's span of the "+method, childOf(call, name))[0]
				if op.SpanKind != trace.SpanKindServer || !attr(op, "coordinator.stream.operation").AsBool() {
					t.Errorf("the coordinator's span of the %s: kind %s, attributes %v", method, op.SpanKind, op.Attributes)
				}
				if len(op.Links) != 1 || op.Links[0].SpanContext.TraceID() != stream.SpanContext.TraceID() {
					t.Errorf("the %s's links %v do not reach the stream's trace %s", method, op.Links, stream.SpanContext.TraceID())
				}
			}
			acquire := server.find(t, 1, "the acquire", func(s tracetest.SpanStub) bool {
				return s.Name == "coordinator.v1.Coordinator/TryAcquire" && s.SpanKind == trace.SpanKindServer
			})[0]
			st := server.find(t, 1, "the operation's store span", childOf(acquire, "store acquire"))[0]
			if got := attr(st, "coordinator.store.attempt").AsInt64(); got != 1 {
				t.Errorf("attempt %d, want 1", got)
			}
			for key, want := range map[string]string{
				"coordinator.store.script":  "acquire",
				"coordinator.store.outcome": "acquired",
				"coordinator.store.kind":    kind,
				"coordinator.lease.name":    "traced/session",
			} {
				if got := attr(st, key).String(); got != want {
					t.Errorf("store span %s = %q, want %q", key, got, want)
				}
			}
			if got := attr(st, "coordinator.lease.token").AsInt64(); uint64(got) != lease.Token() {
				t.Errorf("store span token %d, want the lease's %d", got, lease.Token())
			}
		})
	}
}

// TestUntracedSessionOperationsAreTracesOfTheirOwnLinkedToTheStream: an
// operation that carries no trace context (its client does not trace)
// starts a trace of its own on the coordinator, linked to the stream's
// span, rather than joining the stream's trace, which would gather hours of
// operations in one.
func TestUntracedSessionOperationsAreTracesOfTheirOwnLinkedToTheStream(t *testing.T) {
	coord, server := tracedCoordinator(t, "memory")
	c := dial(t, coord)
	ctx := testCtx(t)
	lease, err := c.TryLock(ctx, "traced/untraced")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil { // ends the stream, and its span
		t.Fatal(err)
	}
	stream := server.find(t, 1, "the operation stream's server span", named("coordinator.v1.Coordinator/Stream", trace.SpanKindServer))[0]
	op := server.find(t, 1, "the acquire operation's span", func(s tracetest.SpanStub) bool {
		return s.Name == "coordinator.v1.Coordinator/TryAcquire" && attr(s, "coordinator.stream.operation").AsBool()
	})[0]
	if op.Parent.IsValid() {
		t.Error("the operation's span has a parent: it should start a trace")
	}
	if len(op.Links) != 1 || op.Links[0].SpanContext.SpanID() != stream.SpanContext.SpanID() {
		t.Errorf("the operation's links %v do not reach the stream's span %s", op.Links, stream.SpanContext.SpanID())
	}
	server.find(t, 1, "the operation's store span", childOf(op, "store acquire"))
}

// TestWithoutTracingNothingIsRecorded: a coordinator and a Client that were
// not asked to trace make no span, not even through the global provider
// (set here to one that records; no other test uses it).
func TestWithoutTracingNothingIsRecorded(t *testing.T) {
	global := newRecorded(t)
	otel.SetTracerProvider(global.tp)
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			coord := coordtest.Start(t, coordtest.Config(t, kind))
			c := dial(t, coord)
			ctx, work := global.tp.Tracer("test").Start(testCtx(t), "work")
			lease, err := c.TryLock(ctx, "untraced/lock")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Describe(ctx, "untraced/lock"); err != nil {
				t.Fatal(err)
			}
			if _, err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			work.End()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if spans := global.mem.GetSpans(); len(spans) != 1 {
				t.Fatalf("spans %v: want only the test's own", spans.Snapshots())
			}
			global.mem.Reset()
		})
	}
}
