package redisstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/store"
)

// A Redis that hangs (SIGSTOP: its connections stay open and nothing
// answers) must cost a caller at most the call timeout, the first call
// included, and be reported as ErrUnavailable, not as the caller's deadline.
func TestHungRedis(t *testing.T) {
	t.Parallel()
	const callTimeout = 300 * time.Millisecond
	// Generous: the machine may be loaded; a call bounded by go-redis' own
	// timeouts instead would take 5s or more.
	const bound = callTimeout + 1500*time.Millisecond
	srv := redistest.Start(t, false)
	ctx := context.Background()
	s, err := NewFromURL(ctx, srv.URL(), Options{CallTimeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := mustGrant(t, s, req("job", "a", time.Minute, ""))

	srv.Freeze()
	ops := []struct {
		name string
		op   func() error
	}{
		{"Ping", func() error { return s.Ping(ctx) }},
		{"Acquire", func() error { _, err := s.Acquire(ctx, req("job", "a", time.Minute, "")); return err }},
		{"Renew", func() error { _, err := s.Renew(ctx, "job", "a", l.Token, time.Minute); return err }},
		{"Release", func() error { _, err := s.Release(ctx, "job", "a", l.Token); return err }},
		{"Dequeue", func() error { return s.Dequeue(ctx, "job", "w") }},
		{"Describe", func() error { _, err := s.Describe(ctx, "job"); return err }},
		{"List", func() error { _, err := s.List(ctx, "", "", 10); return err }},
		{"Watch", func() error { _, err := s.Watch(ctx, []string{"job", "other"}, time.Minute); return err }},
		{"RefreshWaiters", func() error { return s.RefreshWaiters(ctx, "job", []string{"w"}, time.Minute) }},
	}
	for _, o := range ops { // Ping first: the first call after the hang
		start := time.Now()
		err := o.op()
		took := time.Since(start)
		t.Logf("%s on a hung Redis: %s", o.name, took)
		if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s on a hung Redis = %v, want ErrUnavailable and not DeadlineExceeded", o.name, err)
		}
		if took > bound {
			t.Errorf("%s on a hung Redis took %s, want at most the call timeout %s (within %s)", o.name, took, callTimeout, bound)
		}
	}

	start := time.Now()
	_, err = NewFromURL(ctx, srv.URL(), Options{CallTimeout: callTimeout})
	if took := time.Since(start); !errors.Is(err, store.ErrUnavailable) || took > bound {
		t.Errorf("NewFromURL on a hung Redis = %v after %s, want ErrUnavailable within %s", err, took, bound)
	}

	srv.Thaw()
	testwait.Until(t, 10*time.Second, "the store to answer again after Redis resumed", func() bool { return s.Ping(ctx) == nil })
	if d := mustDescribe(t, s, "job"); !d.Held || d.Lease.Token != l.Token {
		t.Errorf("Describe after Redis resumed = %+v, want the lease %+v", d, l)
	}
}

// Calls of many callers share pipelines: one caller's deadline ends its own
// wait, not the calls of the others in flight with it.
func TestCallerDeadlineSparesOtherCalls(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, false)
	ctx := context.Background()
	s, err := NewFromURL(ctx, srv.URL(), Options{CallTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	srv.Freeze()
	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Acquire(ctx, req("job-"+string(rune('a'+i)), "a", time.Minute, ""))
		}()
	}
	// Queued behind the others, or in their pipeline.
	time.Sleep(100 * time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(short, req("impatient", "a", time.Minute, ""))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Acquire past the caller's deadline on a hung Redis = %v, want DeadlineExceeded only", err)
	}
	time.Sleep(300 * time.Millisecond)
	srv.Thaw()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d, whose caller kept waiting: %v", i, err)
		}
	}
}
