package redisstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/internal/testkit/testproxy"
	"github.com/coordinator-dev/coordinator/server/store"
)

func fastFail(o *redis.Options) {
	o.MaxRetries = -1
	o.DialerRetries = 1
	o.DialerRetryTimeout = 10 * time.Millisecond
	o.DialTimeout = 200 * time.Millisecond
	o.ReadTimeout = 500 * time.Millisecond
	o.WriteTimeout = 500 * time.Millisecond
}

func TestUnavailable(t *testing.T) {
	t.Parallel()

	t.Run("New fails fast when Redis is unreachable", func(t *testing.T) {
		t.Parallel()
		addr := closedAddr(t)
		c := newClient(t, fastFail, func(o *redis.Options) { o.Addr = addr })
		_, err := New(testCtx(t), c, Options{KeyPrefix: testPrefix(t)})
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("New = %v, want ErrUnavailable", err)
		}
		_, err = NewFromURL(testCtx(t), "redis://"+addr+"/0?dial_timeout=200ms&max_retries=-1", Options{})
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("NewFromURL = %v, want ErrUnavailable", err)
		}
	})

	t.Run("every operation fails with ErrUnavailable once Redis is cut off", func(t *testing.T) {
		t.Parallel()
		p := testproxy.New(t, testRedisOptions(t).Addr)
		c := newClient(t, fastFail, func(o *redis.Options) { o.Addr = p.Addr() })
		s := newStore(t, c, Options{})
		l := mustGrant(t, s, req("job", "a", time.Minute, ""))
		p.Stop()
		ctx := testCtx(t)
		ops := map[string]func() error{
			"Acquire":  func() error { _, err := s.Acquire(ctx, req("job", "a", time.Minute, "")); return err },
			"Renew":    func() error { _, err := s.Renew(ctx, "job", "a", l.Token, time.Minute); return err },
			"Release":  func() error { _, err := s.Release(ctx, "job", "a", l.Token); return err },
			"Dequeue":  func() error { return s.Dequeue(ctx, "job", "w") },
			"Describe": func() error { _, err := s.Describe(ctx, "job"); return err },
			"List":     func() error { _, err := s.List(ctx, "", "", 10); return err },
			"Watch":    func() error { _, err := s.Watch(ctx, []string{"job", "other"}, time.Minute); return err },
			"RefreshWaiters": func() error {
				return s.RefreshWaiters(ctx, "job", []string{"w"}, time.Minute)
			},
			"Ping": func() error { return s.Ping(ctx) },
		}
		for name, op := range ops {
			if err := op(); !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("%s = %v, want ErrUnavailable", name, err)
			}
		}
	})

	t.Run("the caller's own deadline or cancel is not ErrUnavailable", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, nil, Options{})
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		_, err := s.Acquire(ctx, req("job", "a", time.Minute, ""))
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Acquire past the deadline = %v, want context.DeadlineExceeded only", err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		cancel()
		_, err = s.Describe(ctx, "job")
		if !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Describe with a cancelled context = %v, want context.Canceled only", err)
		}
	})

	t.Run("a Store from NewFromURL closes its client", func(t *testing.T) {
		t.Parallel()
		o := testRedisOptions(t)
		prefix := testPrefix(t)
		direct := newClient(t)
		s, err := NewFromURL(testCtx(t), "redis://"+o.Addr+"/"+strconv.Itoa(o.DB), Options{KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteKeys(t, direct, prefix) })
		mustGrant(t, s, req("job", "a", time.Minute, ""))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Describe(testCtx(t), "job"); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Describe after Close = %v, want ErrUnavailable", err)
		}
	})

	t.Run("New rejects bad options", func(t *testing.T) {
		t.Parallel()
		c := newClient(t)
		for _, o := range []Options{{KeyPrefix: "a{b"}, {KeyPrefix: "a}"}, {Quarantine: -time.Second}} {
			if _, err := New(testCtx(t), c, o); err == nil {
				t.Errorf("New(%+v): no error", o)
			}
		}
		if _, err := New(testCtx(t), nil, Options{}); err == nil {
			t.Error("New(nil client): no error")
		}
	})
}
