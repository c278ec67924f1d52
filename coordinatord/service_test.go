package coordinatord_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

func TestInvalidRequestsNameTheField(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	ok := func() *coordinatorv1.TryAcquireRequest {
		return &coordinatorv1.TryAcquireRequest{Name: "job", Holder: "me", Ttl: servertest.Dur(time.Second)}
	}
	tests := []struct {
		name  string
		call  func(ctx context.Context) error
		field string
	}{
		{"empty name", func(ctx context.Context) error {
			r := ok()
			r.Name = ""
			_, err := c.client.TryAcquire(ctx, r)
			return err
		}, "name"},
		{"name over 256 bytes", func(ctx context.Context) error {
			r := ok()
			r.Name = strings.Repeat("n", 257)
			_, err := c.client.TryAcquire(ctx, r)
			return err
		}, "name"},
		{"name with a control character", func(ctx context.Context) error {
			r := ok()
			r.Name = "a\nb"
			_, err := c.client.TryAcquire(ctx, r)
			return err
		}, "name"},
		{"empty holder", func(ctx context.Context) error {
			r := ok()
			r.Holder = ""
			_, err := c.client.TryAcquire(ctx, r)
			return err
		}, "holder"},
		{"holder over 128 bytes", func(ctx context.Context) error {
			r := ok()
			r.Holder = strings.Repeat("h", 129)
			_, err := c.client.TryAcquire(ctx, r)
			return err
		}, "holder"},
		{"missing ttl", func(ctx context.Context) error {
			r := ok()
			r.Ttl = nil
			_, err := c.client.TryAcquire(ctx, r)
			return err
		}, "ttl"},
		{"ttl below 100ms", func(ctx context.Context) error {
			r := ok()
			r.Ttl = servertest.Dur(99 * time.Millisecond)
			_, err := c.client.TryAcquire(ctx, r)
			return err
		}, "ttl"},
		{"ttl above the maximum", func(ctx context.Context) error {
			r := ok()
			r.Ttl = servertest.Dur(5*time.Minute + time.Millisecond)
			_, err := c.client.TryAcquire(ctx, r)
			return err
		}, "ttl"},
		{"negative wait", func(ctx context.Context) error {
			r := ok()
			r.Wait = servertest.Dur(-time.Second)
			_, err := c.client.TryAcquire(ctx, r)
			return err
		}, "wait"},
		{"wait above 5 minutes", func(ctx context.Context) error {
			r := ok()
			r.Wait = servertest.Dur(6 * time.Minute)
			_, err := c.client.TryAcquire(ctx, r)
			return err
		}, "wait"},
		{"renew without token", func(ctx context.Context) error {
			_, err := c.client.Renew(ctx, &coordinatorv1.RenewRequest{Name: "job", Holder: "me", Ttl: servertest.Dur(time.Second)})
			return err
		}, "token"},
		{"renew without ttl", func(ctx context.Context) error {
			_, err := c.client.Renew(ctx, &coordinatorv1.RenewRequest{Name: "job", Holder: "me", Token: 1})
			return err
		}, "ttl"},
		{"release with a NUL in the name", func(ctx context.Context) error {
			_, err := c.client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: "a\x00b", Holder: "me", Token: 1})
			return err
		}, "name"},
		{"describe without name", func(ctx context.Context) error {
			_, err := c.client.Describe(ctx, &coordinatorv1.DescribeRequest{})
			return err
		}, "name"},
		{"list with a negative page size", func(ctx context.Context) error {
			_, err := c.client.List(ctx, &coordinatorv1.ListRequest{PageSize: -1})
			return err
		}, "page_size"},
		{"list with a forged page token", func(ctx context.Context) error {
			_, err := c.client.List(ctx, &coordinatorv1.ListRequest{PageToken: "!!"})
			return err
		}, "page_token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(servertest.Timeout(t, 5*time.Second))
			code, reason, field := errorDetails(err)
			if code != codes.InvalidArgument || reason != "INVALID_FIELD" || field != tc.field {
				t.Fatalf("err = %v (reason %q, field %q); want InvalidArgument naming %q", err, reason, field, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("message %q does not name %q", err, tc.field)
			}
		})
	}
}

func TestLeaseLifecycle(t *testing.T) { forEachPath(t, testLeaseLifecycle) }

func testLeaseLifecycle(t *testing.T, via string) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := startVia(t, testConfig(t, kind), via)
			ctx := servertest.Timeout(t, 10*time.Second)

			lease := servertest.MustAcquire(t, c.client, "team-a/job", "alice", 10*time.Second)
			if lease.GetToken() == 0 || lease.GetHolder() != "alice" || lease.GetTtl().AsDuration() != 10*time.Second {
				t.Fatalf("lease = %v", lease)
			}
			if until := time.Until(lease.GetExpiresAt().AsTime()); until < 8*time.Second || until > 12*time.Second {
				t.Fatalf("expires_at is %v away", until)
			}
			again := servertest.MustAcquire(t, c.client, "team-a/job", "alice", 20*time.Second)
			if again.GetToken() != lease.GetToken() {
				t.Fatalf("retried acquire got token %d, want %d", again.GetToken(), lease.GetToken())
			}
			resp := servertest.Acquire(t, c.client, "team-a/job", "bob", time.Second, 0)
			if resp.GetAcquired() || resp.GetHolder() != "alice" {
				t.Fatalf("bob's acquire = %v; want refused, naming alice", resp)
			}
			// alice's lease runs 20s from her second acquire: that is when to retry.
			if after := resp.GetRetryAfter().AsDuration(); resp.GetRetryAfter() == nil || after < 15*time.Second || after > 21*time.Second {
				t.Fatalf("bob's refusal says retry after %v; want about 20s (alice's lease)", resp.GetRetryAfter())
			}

			desc, err := c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: "team-a/job"})
			if err != nil || !desc.GetHeld() || desc.GetLease().GetHolder() != "alice" || desc.GetLastToken() != lease.GetToken() {
				t.Fatalf("Describe = %v, %v", desc, err)
			}
			renewed, err := c.client.Renew(ctx, &coordinatorv1.RenewRequest{Name: "team-a/job", Holder: "alice", Token: lease.GetToken(), Ttl: servertest.Dur(time.Minute)})
			if err != nil || renewed.GetLease().GetToken() != lease.GetToken() || renewed.GetLease().GetTtl().AsDuration() != time.Minute {
				t.Fatalf("Renew = %v, %v", renewed, err)
			}
			_, err = c.client.Renew(ctx, &coordinatorv1.RenewRequest{Name: "team-a/job", Holder: "bob", Token: lease.GetToken(), Ttl: servertest.Dur(time.Minute)})
			if code, reason, _ := errorDetails(err); code != codes.FailedPrecondition || reason != "LEASE_NOT_HELD" {
				t.Fatalf("Renew by another holder: %v (reason %q); want FailedPrecondition LEASE_NOT_HELD", err, reason)
			}

			list, err := c.client.List(ctx, &coordinatorv1.ListRequest{Prefix: "team-a/"})
			if err != nil || len(list.GetLeases()) != 1 || list.GetLeases()[0].GetName() != "team-a/job" || list.GetNextPageToken() != "" {
				t.Fatalf("List = %v, %v", list, err)
			}

			for i, want := range []bool{true, false} {
				rel, err := c.client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: "team-a/job", Holder: "alice", Token: lease.GetToken()})
				if err != nil || rel.GetReleased() != want {
					t.Fatalf("Release #%d = %v, %v; want released=%v", i+1, rel, err, want)
				}
			}
			next := servertest.MustAcquire(t, c.client, "team-a/job", "bob", time.Second)
			if next.GetToken() <= lease.GetToken() {
				t.Fatalf("token went from %d to %d", lease.GetToken(), next.GetToken())
			}
		})
	}
}

func TestWaitingAcquire(t *testing.T) { forEachPath(t, testWaitingAcquire) }

func testWaitingAcquire(t *testing.T, via string) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := startVia(t, testConfig(t, kind), via)

			t.Run("woken by release", func(t *testing.T) {
				held := servertest.MustAcquire(t, c.client, "release", "a", time.Minute)
				got := goAcquire(t, c, "release", "b", time.Minute)
				servertest.WaitQueued(t, c.client, "release", 1)
				if _, err := c.client.Release(context.Background(), &coordinatorv1.ReleaseRequest{Name: "release", Holder: "a", Token: held.GetToken()}); err != nil {
					t.Fatal(err)
				}
				if resp := granted(t, got, 20*time.Second, "the waiter woken by the release"); resp.GetLease().GetToken() <= held.GetToken() {
					t.Fatalf("waiter got %v", resp)
				}
			})

			t.Run("woken by expiry", func(t *testing.T) {
				servertest.MustAcquire(t, c.client, "expiry", "a", 300*time.Millisecond)
				resp := servertest.Acquire(t, c.client, "expiry", "b", time.Minute, time.Minute)
				if !resp.GetAcquired() {
					t.Fatalf("waiter got %v", resp)
				}
			})

			t.Run("gives up when wait ends", func(t *testing.T) {
				servertest.MustAcquire(t, c.client, "busy", "a", time.Minute)
				resp := servertest.Acquire(t, c.client, "busy", "b", time.Minute, 200*time.Millisecond)
				if resp.GetAcquired() || resp.GetHolder() != "a" {
					t.Fatalf("waiter got %v; want refused, naming a", resp)
				}
			})

			t.Run("answers before the RPC deadline", func(t *testing.T) {
				servertest.MustAcquire(t, c.client, "deadline", "a", time.Minute)
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				resp, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "deadline", Holder: "b", Ttl: servertest.Dur(time.Minute), Wait: servertest.Dur(time.Minute)})
				if err != nil || resp.GetAcquired() {
					t.Fatalf("TryAcquire = %v, %v; want a not-acquired answer", resp, err)
				}
			})

			t.Run("waiters are served in arrival order", func(t *testing.T) {
				held := servertest.MustAcquire(t, c.client, "fifo", "owner", time.Minute)
				const waiters = 20
				order := make(chan string, waiters)
				var wg sync.WaitGroup
				for i := range waiters {
					holder := fmt.Sprintf("w%d", i)
					wg.Add(1)
					go func() {
						defer wg.Done()
						resp, err := servertest.TryAcquire(c.client, "fifo", holder, time.Minute, time.Minute)
						if err != nil || !resp.GetAcquired() {
							t.Errorf("%s: %v, %v", holder, resp, err)
							return
						}
						order <- holder
						_, _ = c.client.Release(context.Background(), &coordinatorv1.ReleaseRequest{Name: "fifo", Holder: holder, Token: resp.GetLease().GetToken()})
					}()
					servertest.WaitQueued(t, c.client, "fifo", i+1)
				}
				if _, err := c.client.Release(context.Background(), &coordinatorv1.ReleaseRequest{Name: "fifo", Holder: "owner", Token: held.GetToken()}); err != nil {
					t.Fatal(err)
				}
				wg.Wait()
				close(order)
				checkGrantOrder(t, order, 0)
			})

			t.Run("a cancelled waiter leaves the queue at once", func(t *testing.T) {
				held := servertest.MustAcquire(t, c.client, "cancel", "owner", time.Minute)
				ctx, cancel := context.WithCancel(context.Background())
				quit := make(chan error, 1)
				go func() {
					_, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "cancel", Holder: "quitter", Ttl: servertest.Dur(time.Minute), Wait: servertest.Dur(time.Minute)})
					quit <- err
				}()
				servertest.WaitQueued(t, c.client, "cancel", 1)
				got := goAcquire(t, c, "cancel", "patient", time.Minute)
				servertest.WaitQueued(t, c.client, "cancel", 2)
				cancel()
				if err := <-quit; errCode(err) != codes.Canceled {
					t.Fatalf("the cancelled wait ended with %v; want Canceled", err)
				}
				if _, err := c.client.Release(context.Background(), &coordinatorv1.ReleaseRequest{Name: "cancel", Holder: "owner", Token: held.GetToken()}); err != nil {
					t.Fatal(err)
				}
				// The quitter's place would time out after about 3 s: being
				// served within 2 s shows it left at once.
				granted(t, got, 2*time.Second, "the patient waiter, behind one that left,")
			})
		})
	}
}

func TestContendedLeasesNeverOverlapOverGRPC(t *testing.T) {
	forEachPath(t, testContendedLeasesNeverOverlapOverGRPC)
}

func testContendedLeasesNeverOverlapOverGRPC(t *testing.T, via string) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			c := startVia(t, testConfig(t, kind), via)
			const (
				workers = 32
				rounds  = 25
				ttl     = 150 * time.Millisecond
			)
			names, resources := contendedResources()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 11))
					holder := fmt.Sprintf("worker-%d", w)
					for range rounds {
						name := names[rng.IntN(len(names))]
						sent := time.Now()
						resp, err := c.client.TryAcquire(context.Background(), &coordinatorv1.TryAcquireRequest{
							Name: name, Holder: holder, Ttl: servertest.Dur(ttl), Wait: servertest.Dur(time.Duration(rng.IntN(50)) * time.Millisecond),
						})
						if err != nil {
							t.Error(err)
							return
						}
						if !resp.GetAcquired() {
							continue
						}
						token := resp.GetLease().GetToken()
						if !actInside(t, resources[name], holder, token, sent.Add(ttl-30*time.Millisecond), rng) {
							return
						}
						if rng.IntN(3) == 0 {
							continue // vanish: the lease must expire
						}
						_, err = c.client.Release(context.Background(), &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: token})
						if err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

func TestLockDelayHoldsAnExpiredNameForItsSuccessor(t *testing.T) {
	forEachPath(t, testLockDelayHoldsAnExpiredNameForItsSuccessor)
}

func testLockDelayHoldsAnExpiredNameForItsSuccessor(t *testing.T, via string) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			cfg := testConfig(t, kind)
			cfg.LockDelay = 500 * time.Millisecond
			c := startVia(t, cfg, via)

			released := servertest.MustAcquire(t, c.client, "clean", "a", time.Minute)
			if _, err := c.client.Release(context.Background(), &coordinatorv1.ReleaseRequest{Name: "clean", Holder: "a", Token: released.GetToken()}); err != nil {
				t.Fatal(err)
			}
			servertest.MustAcquire(t, c.client, "clean", "b", time.Minute) // no delay after a release

			vanished := servertest.MustAcquire(t, c.client, "vanished", "a", 200*time.Millisecond)
			resp := servertest.Acquire(t, c.client, "vanished", "b", time.Minute, 10*time.Second)
			if !resp.GetAcquired() {
				t.Fatalf("waiter got %v", resp)
			}
			free := vanished.GetExpiresAt().AsTime().Add(cfg.LockDelay)
			if granted := resp.GetLease().GetExpiresAt().AsTime().Add(-time.Minute); granted.Before(free.Add(-10 * time.Millisecond)) {
				t.Fatalf("granted at %v, before the lock delay ended at %v", granted, free)
			}
		})
	}
}

func TestShutdownEndsWaitingCalls(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	servertest.MustAcquire(t, c.client, "held", "a", time.Minute)
	conn := c.Dial(t)
	waiting := make(chan error, 1)
	go func() {
		_, err := coordinatorv1.NewCoordinatorClient(conn).TryAcquire(context.Background(), &coordinatorv1.TryAcquireRequest{
			Name: "held", Holder: "b", Ttl: servertest.Dur(time.Minute), Wait: servertest.Dur(5 * time.Minute),
		})
		waiting <- err
	}()
	servertest.WaitQueued(t, c.client, "held", 1)
	stopped := make(chan struct{})
	go func() { c.Stop(); close(stopped) }()
	select {
	case err := <-waiting:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("waiting call ended with %v; want Unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("shutdown left a waiting call hanging")
	}
	<-stopped
}
