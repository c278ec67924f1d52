package storetrace_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/coordinator-dev/coordinator/server/store"
	"github.com/coordinator-dev/coordinator/server/store/memstore"
	"github.com/coordinator-dev/coordinator/server/store/storetrace"
)

// traced is a memory store wrapped for tracing, with the spans it ends.
type traced struct {
	st       *storetrace.Store
	recorder *tracetest.SpanRecorder
	tp       *sdktrace.TracerProvider
}

func newTraced(t *testing.T) traced {
	t.Helper()
	mem, err := memstore.Open("")
	if err != nil {
		t.Fatal(err)
	}
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	st := storetrace.Wrap(mem, tp, "memory")
	t.Cleanup(func() { _ = st.Close() })
	return traced{st: st, recorder: recorder, tp: tp}
}

// request starts a request's span, as the server's interceptors do, with
// its attempts counted.
func (tr traced) request(ctx context.Context) (context.Context, trace.Span) {
	ctx, span := tr.tp.Tracer("test").Start(ctx, "request")
	return storetrace.CountAttempts(ctx), span
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

func TestEachCallOfATracedRequestIsAChildSpanWithItsScriptAndOutcome(t *testing.T) {
	tr := newTraced(t)
	ctx := context.Background()
	const ttl = time.Minute
	granted, err := tr.st.Acquire(ctx, store.AcquireRequest{Name: "held", Holder: "a", TTL: ttl})
	if err != nil || !granted.Acquired {
		t.Fatalf("setup: %+v, %v", granted, err)
	}
	tok := granted.Lease.Token
	if n := len(tr.recorder.Ended()); n != 0 {
		t.Fatalf("calls without a request's span made %d spans", n)
	}

	for _, tc := range []struct {
		name    string
		call    func(ctx context.Context) error
		script  string
		outcome string
		token   bool
	}{
		{"a grant", func(ctx context.Context) error {
			_, err := tr.st.Acquire(ctx, store.AcquireRequest{Name: "free", Holder: "a", TTL: ttl})
			return err
		}, "acquire", "acquired", true},
		{"a refusal", func(ctx context.Context) error {
			_, err := tr.st.Acquire(ctx, store.AcquireRequest{Name: "held", Holder: "b", TTL: ttl})
			return err
		}, "acquire", "not_acquired", false},
		{"a renewal", func(ctx context.Context) error {
			_, err := tr.st.Renew(ctx, "held", "a", tok, ttl)
			return err
		}, "renew", "renewed", true},
		{"a renewal of a lease not held", func(ctx context.Context) error {
			if _, err := tr.st.Renew(ctx, "held", "b", tok, ttl); !errors.Is(err, store.ErrLeaseNotHeld) {
				return fmt.Errorf("renew by another holder: %w, want ErrLeaseNotHeld", err)
			}
			return nil
		}, "renew", "not_held", false},
		{"a release of a lease not held", func(ctx context.Context) error {
			_, err := tr.st.Release(ctx, "held", "b", tok)
			return err
		}, "release", "not_held", false},
		{"a release", func(ctx context.Context) error {
			_, err := tr.st.Release(ctx, "held", "a", tok)
			return err
		}, "release", "released", false},
		{"a describe", func(ctx context.Context) error {
			_, err := tr.st.Describe(ctx, "held")
			return err
		}, "describe", "ok", false},
		{"a list", func(ctx context.Context) error {
			_, err := tr.st.List(ctx, "", "", 10)
			return err
		}, "list", "ok", false},
		{"a dequeue", func(ctx context.Context) error {
			return tr.st.Dequeue(ctx, "held", "nobody")
		}, "dequeue", "ok", false},
		{"a session's creation", func(ctx context.Context) error {
			_, err := tr.st.CreateSession(ctx, "alice", ttl)
			return err
		}, "session", "ok", false},
		{"a renewal of an unknown session", func(ctx context.Context) error {
			if _, err := tr.st.RenewSession(ctx, "unknown", "alice"); !errors.Is(err, store.ErrSessionNotFound) {
				return fmt.Errorf("renew of an unknown session: %w, want ErrSessionNotFound", err)
			}
			return nil
		}, "session", "session_ended", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr.recorder.Reset()
			rctx, parent := tr.request(ctx)
			if err := tc.call(rctx); err != nil {
				t.Fatal(err)
			}
			parent.End()
			spans := tr.recorder.Ended()
			if len(spans) != 2 {
				t.Fatalf("%d spans ended, want the store call's and the request's", len(spans))
			}
			s := spans[0]
			if s.Name() != "store "+tc.script {
				t.Errorf("span %q, want %q", s.Name(), "store "+tc.script)
			}
			if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
				t.Errorf("the store span is not a child of the request's")
			}
			a := attrs(s)
			if got := a[storetrace.AttrScript].AsString(); got != tc.script {
				t.Errorf("script %q, want %q", got, tc.script)
			}
			if got := a[storetrace.AttrOutcome].AsString(); got != tc.outcome {
				t.Errorf("outcome %q, want %q", got, tc.outcome)
			}
			if got := a[storetrace.AttrAttempt].AsInt64(); got != 1 {
				t.Errorf("attempt %d, want 1", got)
			}
			if got := a[storetrace.AttrKind].AsString(); got != "memory" {
				t.Errorf("kind %q, want memory", got)
			}
			if _, ok := a[storetrace.AttrToken]; ok != tc.token {
				t.Errorf("token attribute present: %v, want %v", ok, tc.token)
			}
			if s.Status().Code == codes.Error {
				t.Errorf("status Error (%s) for an outcome the caller expects", s.Status().Description)
			}
		})
	}
}

func TestAttemptsCountEachScriptOfOneRequest(t *testing.T) {
	tr := newTraced(t)
	ctx := context.Background()
	if _, err := tr.st.Acquire(ctx, store.AcquireRequest{Name: "n", Holder: "a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	rctx, parent := tr.request(ctx)
	for range 3 {
		if _, err := tr.st.Acquire(rctx, store.AcquireRequest{Name: "n", Holder: "b", TTL: time.Minute, Waiter: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.st.Dequeue(rctx, "n", "w"); err != nil {
		t.Fatal(err)
	}
	parent.End()
	var got []string
	for _, s := range tr.recorder.Ended() {
		if s.Name() == "request" {
			continue
		}
		a := attrs(s)
		got = append(got, fmt.Sprintf("%s#%d", a[storetrace.AttrScript].AsString(), a[storetrace.AttrAttempt].AsInt64()))
	}
	want := "[acquire#1 acquire#2 acquire#3 dequeue#1]"
	if fmt.Sprint(got) != want {
		t.Fatalf("attempts %v, want %s", got, want)
	}

	// A traced call outside CountAttempts has no attempt.
	tr.recorder.Reset()
	uctx, span := tr.tp.Tracer("test").Start(ctx, "uncounted")
	if _, err := tr.st.Describe(uctx, "n"); err != nil {
		t.Fatal(err)
	}
	span.End()
	if _, ok := attrs(tr.recorder.Ended()[0])[storetrace.AttrAttempt]; ok {
		t.Fatal("a call outside CountAttempts has an attempt")
	}
}

func TestCallsOfUnsampledRequestsAreNotTraced(t *testing.T) {
	mem, err := memstore.Open("")
	if err != nil {
		t.Fatal(err)
	}
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder), sdktrace.WithSampler(sdktrace.NeverSample()))
	st := storetrace.Wrap(mem, tp, "memory")
	defer func() { _ = st.Close() }()
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	if _, err := st.Acquire(ctx, store.AcquireRequest{Name: "n", Holder: "a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := st.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	span.End()
	if n := len(recorder.Started()); n != 0 {
		t.Fatalf("%d spans started under an unsampled request", n)
	}
}

func TestAFailedCallSaysHowAndErrorsOnlyWhenTheCallerDidNotAskForIt(t *testing.T) {
	tr := newTraced(t)
	for _, tc := range []struct {
		name    string
		err     error
		outcome string
		isError bool
	}{
		{"quarantine", &store.QuarantineError{RetryAfter: time.Second}, "quarantined", true},
		{"unavailable", fmt.Errorf("redisstore: acquire: %w: no answer", store.ErrUnavailable), "unavailable", true},
		{"canceled", fmt.Errorf("redisstore: acquire: %w", context.Canceled), "canceled", false},
		{"deadline", fmt.Errorf("redisstore: acquire: %w", context.DeadlineExceeded), "deadline_exceeded", false},
		{"something else", errors.New("redisstore: acquire: unexpected script reply"), "error", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr.recorder.Reset()
			failing := storetrace.Wrap(failingStore{Store: tr.st.Store, err: tc.err}, tr.tp, "redis")
			ctx, parent := tr.request(context.Background())
			if _, err := failing.Acquire(ctx, store.AcquireRequest{Name: "n", Holder: "a", TTL: time.Minute}); !errors.Is(err, tc.err) {
				t.Fatalf("Acquire = %v, want %v passed through", err, tc.err)
			}
			parent.End()
			s := tr.recorder.Ended()[0]
			if got := attrs(s)[storetrace.AttrOutcome].AsString(); got != tc.outcome {
				t.Errorf("outcome %q, want %q", got, tc.outcome)
			}
			if got := s.Status().Code == codes.Error; got != tc.isError {
				t.Errorf("status Error: %v, want %v", got, tc.isError)
			}
		})
	}
}

// failingStore fails every Acquire with err, as a store that could not
// answer does.
type failingStore struct {
	store.Store
	err error
}

func (f failingStore) Acquire(context.Context, store.AcquireRequest) (store.AcquireResult, error) {
	return store.AcquireResult{}, f.err
}
