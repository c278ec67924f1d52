package storetrace

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/coordinator-dev/coordinator/server/store"
)

// The attributes of a store span.
const (
	AttrScript  = attribute.Key("coordinator.store.script")
	AttrAttempt = attribute.Key("coordinator.store.attempt")
	AttrOutcome = attribute.Key("coordinator.store.outcome")
	AttrKind    = attribute.Key("coordinator.store.kind")
	AttrName    = attribute.Key("coordinator.lease.name")
	AttrToken   = attribute.Key("coordinator.lease.token")
)

// ScopeName is the instrumentation scope of the store spans.
const ScopeName = "github.com/coordinator-dev/coordinator/server/store/storetrace"

// script is one of the store's operations, an index into attempts.
type script int

const (
	scriptAcquire script = iota
	scriptRenew
	scriptRelease
	scriptDequeue
	scriptRefreshWaiters
	scriptDescribe
	scriptList
	scriptWatch
	scriptPing
	scriptSession
	scriptAcquireGroup
	scriptReleaseGroup
	numScripts
)

var scriptNames = [numScripts]string{
	"acquire", "renew", "release", "dequeue", "refresh_waiters", "describe", "list", "watch", "ping", "session",
	"acquire_group", "release_group",
}

// spanNames are "store " + the script, made once.
var spanNames = func() (out [numScripts]string) {
	for i, n := range scriptNames {
		out[i] = "store " + n
	}
	return out
}()

// attempts counts one request's calls of each script.
type attempts [numScripts]atomic.Int64

type attemptsKey struct{}

// CountAttempts returns ctx with a counter of the store calls made under
// it, so that each store span of the request says which attempt it is.
// Call it once a request (a unary call, a stream operation), where its
// span starts.
func CountAttempts(ctx context.Context) context.Context {
	return context.WithValue(ctx, attemptsKey{}, new(attempts))
}

// Store is a store.Store whose calls are traced.
type Store struct {
	store.Store
	tracer trace.Tracer
	kind   attribute.KeyValue
}

// Wrap returns st with its calls traced through tp; kind names the store in
// coordinator.store.kind ("redis", "memory").
func Wrap(st store.Store, tp trace.TracerProvider, kind string) *Store {
	return &Store{Store: st, tracer: tp.Tracer(ScopeName), kind: AttrKind.String(kind)}
}

// traced reports whether a call under ctx is part of a traced request.
func traced(ctx context.Context) bool { return trace.SpanFromContext(ctx).IsRecording() }

// start starts the span of a call of sc on name (empty: none).
func (s *Store) start(ctx context.Context, sc script, name string) (context.Context, trace.Span) {
	ctx, span := s.tracer.Start(ctx, spanNames[sc], trace.WithSpanKind(trace.SpanKindClient))
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, AttrScript.String(scriptNames[sc]), s.kind)
	if a, ok := ctx.Value(attemptsKey{}).(*attempts); ok {
		attrs = append(attrs, AttrAttempt.Int64(a[sc].Add(1)))
	}
	if name != "" {
		attrs = append(attrs, AttrName.String(name))
	}
	span.SetAttributes(attrs...)
	return ctx, span
}

// end ends span with outcome, or with the outcome of err when it is not nil.
func end(span trace.Span, outcome string, err error) {
	if err != nil {
		outcome = failure(err)
		switch outcome {
		case "quarantined", "unavailable", "error":
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.SetAttributes(AttrOutcome.String(outcome))
	span.End()
}

// failure names the outcome of a call that failed.
func failure(err error) string {
	var quarantine *store.QuarantineError
	switch {
	case errors.As(err, &quarantine):
		return "quarantined"
	case errors.Is(err, store.ErrLeaseNotHeld), errors.Is(err, store.ErrLeaseInSession):
		return "not_held"
	case errors.Is(err, store.ErrSessionNotFound), errors.Is(err, store.ErrSessionExpired),
		errors.Is(err, store.ErrSessionClosed):
		return "session_ended"
	case errors.Is(err, store.ErrSessionNotOwned):
		return "not_owned"
	case errors.Is(err, store.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	return "error"
}

// token records a lease's token. OTel has no unsigned attributes; a token
// stays below 2^63 for millennia, starting from the clock in microseconds.
func token(span trace.Span, l store.Lease) {
	span.SetAttributes(AttrToken.Int64(int64(l.Token)))
}

// Acquire implements store.Leases.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if !traced(ctx) {
		return s.Store.Acquire(ctx, req)
	}
	ctx, span := s.start(ctx, scriptAcquire, req.Name)
	res, err := s.Store.Acquire(ctx, req)
	outcome := "not_acquired"
	if err == nil && res.Acquired {
		outcome = "acquired"
		token(span, res.Lease)
	}
	end(span, outcome, err)
	return res, err
}

// AcquireGroup implements store.Leases: one span, naming the first member.
func (s *Store) AcquireGroup(ctx context.Context, req store.GroupRequest) (store.GroupResult, error) {
	if !traced(ctx) || len(req.Members) == 0 {
		return s.Store.AcquireGroup(ctx, req)
	}
	ctx, span := s.start(ctx, scriptAcquireGroup, req.Members[0].Name)
	res, err := s.Store.AcquireGroup(ctx, req)
	outcome := "not_acquired"
	if err == nil && res.Acquired {
		outcome = "acquired"
	}
	end(span, outcome, err)
	return res, err
}

// ReleaseGroup implements store.Leases: one span, naming the first lease.
func (s *Store) ReleaseGroup(ctx context.Context, holder string, leases []store.GroupLease) ([]bool, error) {
	if !traced(ctx) || len(leases) == 0 {
		return s.Store.ReleaseGroup(ctx, holder, leases)
	}
	ctx, span := s.start(ctx, scriptReleaseGroup, leases[0].Name)
	released, err := s.Store.ReleaseGroup(ctx, holder, leases)
	end(span, "released", err)
	return released, err
}

// Renew implements store.Leases.
func (s *Store) Renew(ctx context.Context, name, holder string, tok uint64, ttl time.Duration) (store.Lease, error) {
	if !traced(ctx) {
		return s.Store.Renew(ctx, name, holder, tok, ttl)
	}
	ctx, span := s.start(ctx, scriptRenew, name)
	l, err := s.Store.Renew(ctx, name, holder, tok, ttl)
	if err == nil {
		token(span, l)
	}
	end(span, "renewed", err)
	return l, err
}

// Release implements store.Leases.
func (s *Store) Release(ctx context.Context, name, holder string, tok uint64) (bool, error) {
	if !traced(ctx) {
		return s.Store.Release(ctx, name, holder, tok)
	}
	ctx, span := s.start(ctx, scriptRelease, name)
	released, err := s.Store.Release(ctx, name, holder, tok)
	outcome := "not_held"
	if released {
		outcome = "released"
	}
	end(span, outcome, err)
	return released, err
}

// Dequeue implements store.Leases.
func (s *Store) Dequeue(ctx context.Context, name, waiter string) error {
	if !traced(ctx) {
		return s.Store.Dequeue(ctx, name, waiter)
	}
	ctx, span := s.start(ctx, scriptDequeue, name)
	err := s.Store.Dequeue(ctx, name, waiter)
	end(span, "ok", err)
	return err
}

// RefreshWaiters implements store.Leases.
func (s *Store) RefreshWaiters(ctx context.Context, name string, waiters []string, ttl time.Duration) error {
	if !traced(ctx) {
		return s.Store.RefreshWaiters(ctx, name, waiters, ttl)
	}
	ctx, span := s.start(ctx, scriptRefreshWaiters, name)
	err := s.Store.RefreshWaiters(ctx, name, waiters, ttl)
	end(span, "ok", err)
	return err
}

// Describe implements store.Leases.
func (s *Store) Describe(ctx context.Context, name string) (store.Description, error) {
	if !traced(ctx) {
		return s.Store.Describe(ctx, name)
	}
	ctx, span := s.start(ctx, scriptDescribe, name)
	d, err := s.Store.Describe(ctx, name)
	end(span, "ok", err)
	return d, err
}

// List implements store.Leases.
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) (store.ListPage, error) {
	if !traced(ctx) {
		return s.Store.List(ctx, prefix, cursor, limit)
	}
	ctx, span := s.start(ctx, scriptList, "")
	page, err := s.Store.List(ctx, prefix, cursor, limit)
	end(span, "ok", err)
	return page, err
}

// Watch implements store.Notifier.
func (s *Store) Watch(ctx context.Context, names []string, ttl time.Duration) ([]store.Description, error) {
	if !traced(ctx) {
		return s.Store.Watch(ctx, names, ttl)
	}
	ctx, span := s.start(ctx, scriptWatch, "")
	ds, err := s.Store.Watch(ctx, names, ttl)
	end(span, "ok", err)
	return ds, err
}

// Ping implements store.Leases.
func (s *Store) Ping(ctx context.Context) error {
	if !traced(ctx) {
		return s.Store.Ping(ctx)
	}
	ctx, span := s.start(ctx, scriptPing, "")
	err := s.Store.Ping(ctx)
	end(span, "ok", err)
	return err
}

// AttrSessionOp is the session operation of a "store session" span.
const AttrSessionOp = attribute.Key("coordinator.store.session_op")

// session runs call as a traced session operation op.
func (s *Store) session(ctx context.Context, op string, call func(context.Context) error) error {
	if !traced(ctx) {
		return call(ctx)
	}
	ctx, span := s.start(ctx, scriptSession, "")
	span.SetAttributes(AttrSessionOp.String(op))
	err := call(ctx)
	end(span, "ok", err)
	return err
}

// CreateSession implements store.Sessions.
func (s *Store) CreateSession(ctx context.Context, owner string, ttl time.Duration) (store.Session, error) {
	var sess store.Session
	err := s.session(ctx, "create", func(ctx context.Context) (err error) {
		sess, err = s.Store.CreateSession(ctx, owner, ttl)
		return err
	})
	return sess, err
}

// RenewSession implements store.Sessions.
func (s *Store) RenewSession(ctx context.Context, id, owner string) (store.Session, error) {
	var sess store.Session
	err := s.session(ctx, "renew", func(ctx context.Context) (err error) {
		sess, err = s.Store.RenewSession(ctx, id, owner)
		return err
	})
	return sess, err
}

// CloseSession implements store.Sessions.
func (s *Store) CloseSession(ctx context.Context, id, owner string) error {
	return s.session(ctx, "close", func(ctx context.Context) error { return s.Store.CloseSession(ctx, id, owner) })
}

// DescribeSession implements store.Sessions.
func (s *Store) DescribeSession(ctx context.Context, id, owner string) (store.SessionDescription, error) {
	var d store.SessionDescription
	err := s.session(ctx, "describe", func(ctx context.Context) (err error) {
		d, err = s.Store.DescribeSession(ctx, id, owner)
		return err
	})
	return d, err
}
