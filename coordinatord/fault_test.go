package coordinatord_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordinator-dev/coordinator/coordinatord"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

// onPrivateRedis is a coordinator whose Redis store is a private redis-server
// the test may restart, kill or pause; its lease calls go the via way.
func onPrivateRedis(t *testing.T, persist bool, quarantine time.Duration, via string) (*coordinator, *redistest.Server) {
	t.Helper()
	rs := redistest.Start(t, persist)
	cfg := testConfig(t, coordinatord.StoreMemory)
	cfg.Store, cfg.RedisURL, cfg.RedisKeyPrefix = coordinatord.StoreRedis, rs.URL(), "coordinator"
	cfg.DataLossQuarantine = quarantine
	return startVia(t, cfg, via), rs
}

// acquireThroughOutage retries TryAcquire while the store is merely
// unreachable (a reconnect after a restart) and returns the first other answer.
func acquireThroughOutage(t *testing.T, c *coordinator, name, holder string) (resp *coordinatorv1.TryAcquireResponse, err error) {
	t.Helper()
	testwait.Until(t, 10*time.Second, "the store to be reachable again", func() bool {
		resp, err = servertest.TryAcquire(c.client, name, holder, time.Minute, 0)
		_, reason, _ := errorDetails(err)
		return reason != "STORE_UNAVAILABLE"
	})
	return resp, err
}

func TestRedisRestartWithoutDataQuarantinesGrants(t *testing.T) {
	forEachPath(t, testRedisRestartWithoutDataQuarantinesGrants)
}

func testRedisRestartWithoutDataQuarantinesGrants(t *testing.T, via string) {
	const quarantine = 1500 * time.Millisecond
	c, rs := onPrivateRedis(t, false, quarantine, via)
	before := servertest.MustAcquire(t, c.client, "job", "a", time.Minute)

	rs.Restart() // comes back empty: a holds a lease the store forgot
	_, err := acquireThroughOutage(t, c, "job", "b")
	code, reason, _ := errorDetails(err)
	if code != codes.Unavailable || reason != "DATA_LOSS_QUARANTINE" {
		t.Fatalf("acquire after data loss: %v (reason %q); want Unavailable DATA_LOSS_QUARANTINE", err, reason)
	}
	var retry time.Duration
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri.GetRetryDelay().AsDuration()
		}
	}
	if retry <= 0 || retry > quarantine {
		t.Fatalf("RetryInfo delay %v; want within (0, %v]", retry, quarantine)
	}
	rec := httptest.NewRecorder()
	c.Server().MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if body, _ := io.ReadAll(rec.Body); !strings.Contains(string(body), "coordinator_store_data_loss_total 1") {
		t.Fatal("the data loss was not counted")
	}

	var after *coordinatorv1.Lease
	testwait.Until(t, retry+10*time.Second, "granted again after the quarantine", func() bool {
		resp, err := servertest.TryAcquire(c.client, "job", "b", time.Minute, 0)
		if _, reason, _ := errorDetails(err); err != nil && reason != "DATA_LOSS_QUARANTINE" {
			t.Fatal(err)
		}
		after = resp.GetLease()
		return resp.GetAcquired()
	})
	if after.GetToken() <= before.GetToken() {
		t.Fatalf("token after data loss %d <= token before %d", after.GetToken(), before.GetToken())
	}
}

func TestTokensIncreaseAcrossAFlushWithoutQuarantine(t *testing.T) {
	forEachPath(t, testTokensIncreaseAcrossAFlushWithoutQuarantine)
}

func testTokensIncreaseAcrossAFlushWithoutQuarantine(t *testing.T, via string) {
	c, rs := onPrivateRedis(t, false, 0, via)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	var last uint64
	for i := range 3 {
		l := servertest.MustAcquire(t, c.client, "job", "a", time.Minute)
		if l.GetToken() <= last {
			t.Fatalf("grant %d: token %d after %d", i, l.GetToken(), last)
		}
		last = l.GetToken()
		if err := rdb.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRedisRestartWithPersistenceKeepsLeases(t *testing.T) {
	forEachPath(t, testRedisRestartWithPersistenceKeepsLeases)
}

func testRedisRestartWithPersistenceKeepsLeases(t *testing.T, via string) {
	c, rs := onPrivateRedis(t, true, time.Minute, via)
	l := servertest.MustAcquire(t, c.client, "job", "a", time.Minute)
	rs.Restart()
	resp, err := acquireThroughOutage(t, c, "job", "b")
	if err != nil || resp.GetAcquired() || resp.GetHolder() != "a" {
		t.Fatalf("after a restart with persistence: %v, %v; want refused, held by a", resp, err)
	}
	if _, err := c.client.Renew(servertest.Timeout(t, 5*time.Second), &coordinatorv1.RenewRequest{Name: "job", Holder: "a", Token: l.GetToken(), Ttl: servertest.Dur(time.Minute)}); err != nil {
		t.Fatalf("Renew after restart: %v", err)
	}
}

func TestCoordinatorCrashLosesNothingKeptInRedis(t *testing.T) {
	forEachPath(t, testCoordinatorCrashLosesNothingKeptInRedis)
}

func testCoordinatorCrashLosesNothingKeptInRedis(t *testing.T, via string) {
	cfg := testConfig(t, coordinatord.StoreRedis)
	first := startVia(t, cfg, via)
	l := servertest.MustAcquire(t, first.client, "job", "a", time.Minute)
	first.Kill()

	second := startVia(t, cfg, via)
	if resp := servertest.Acquire(t, second.client, "job", "b", time.Minute, 0); resp.GetAcquired() || resp.GetHolder() != "a" {
		t.Fatalf("after the crash: %v; want refused, held by a", resp)
	}
	rel, err := second.client.Release(servertest.Timeout(t, 5*time.Second), &coordinatorv1.ReleaseRequest{Name: "job", Holder: "a", Token: l.GetToken()})
	if err != nil || !rel.GetReleased() {
		t.Fatalf("Release through the new coordinator: %v, %v", rel, err)
	}
	if next := servertest.MustAcquire(t, second.client, "job", "b", time.Minute); next.GetToken() <= l.GetToken() {
		t.Fatalf("token %d after %d", next.GetToken(), l.GetToken())
	}
}

func TestUnreachableRedisIsUnavailableNeverAWrongAnswer(t *testing.T) {
	forEachPath(t, testUnreachableRedisIsUnavailableNeverAWrongAnswer)
}

func testUnreachableRedisIsUnavailableNeverAWrongAnswer(t *testing.T, via string) {
	c, rs := onPrivateRedis(t, false, 0, via)
	held := servertest.MustAcquire(t, c.client, "job", "a", time.Minute)

	t.Run("paused", func(t *testing.T) {
		rs.Pause(2 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		resp, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "job", Holder: "b", Ttl: servertest.Dur(time.Minute)})
		if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
			t.Fatalf("while Redis is paused: %v, %v; want Unavailable or DeadlineExceeded", resp, err)
		}
		testwait.Until(t, 10*time.Second, "Redis back from its pause", func() bool {
			_, err := c.client.Describe(servertest.Timeout(t, time.Second), &coordinatorv1.DescribeRequest{Name: "job"})
			return err == nil
		})
	})
	t.Run("down", func(t *testing.T) {
		sess, err := c.client.CreateSession(servertest.Timeout(t, 10*time.Second), &coordinatorv1.CreateSessionRequest{Ttl: servertest.Dur(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		rs.Kill()
		// Renewals fail without the lease or session being declared gone.
		for _, call := range []func() error{
			func() error { _, err := servertest.TryAcquire(c.client, "job", "b", time.Minute, 0); return err },
			func() error {
				_, err := c.client.Describe(servertest.Timeout(t, 10*time.Second), &coordinatorv1.DescribeRequest{Name: "job"})
				return err
			},
			func() error {
				_, err := c.client.Renew(servertest.Timeout(t, 10*time.Second), &coordinatorv1.RenewRequest{Name: "job", Holder: "a", Token: held.GetToken(), Ttl: servertest.Dur(time.Minute)})
				return err
			},
			func() error {
				_, err := c.client.RenewSession(servertest.Timeout(t, 10*time.Second), &coordinatorv1.RenewSessionRequest{SessionId: sess.GetSession().GetId()})
				return err
			},
		} {
			err := call()
			if code, reason, _ := errorDetails(err); code != codes.Unavailable || reason != "STORE_UNAVAILABLE" {
				t.Fatalf("with Redis down: %v; want Unavailable STORE_UNAVAILABLE", err)
			}
		}
	})
}

func TestCoordinatorOnClusterAndSentinel(t *testing.T) {
	deployments := map[string]func(t *testing.T) string{
		"cluster": func(t *testing.T) string { return redistest.StartCluster(t, 3).URL() },
		"sentinel": func(t *testing.T) string {
			return "redis+sentinel://" + redistest.StartSentinel(t, redistest.Start(t, false), "main") + "/main"
		},
	}
	for name, url := range deployments {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, coordinatord.StoreMemory)
			cfg.Store, cfg.RedisURL = coordinatord.StoreRedis, url(t)
			c := start(t, cfg)
			for _, lease := range []string{"a", "b{x}", "team/c", "d"} {
				l := servertest.MustAcquire(t, c.client, lease, "h", time.Minute)
				if resp := servertest.Acquire(t, c.client, lease, "other", time.Minute, 0); resp.GetAcquired() {
					t.Fatalf("%s granted twice", lease)
				}
				waiter := goAcquire(t, c, lease, "waiter", 10*time.Second)
				servertest.WaitQueued(t, c.client, lease, 1)
				if _, err := c.client.Release(servertest.Timeout(t, 5*time.Second), &coordinatorv1.ReleaseRequest{Name: lease, Holder: "h", Token: l.GetToken()}); err != nil {
					t.Fatal(err)
				}
				if resp := <-waiter; !resp.GetAcquired() || resp.GetLease().GetToken() <= l.GetToken() {
					t.Fatalf("%s: the waiter got %v", lease, resp)
				}
			}
			list, err := c.client.List(servertest.Timeout(t, 5*time.Second), &coordinatorv1.ListRequest{})
			if err != nil || len(list.GetLeases()) != 4 {
				t.Fatalf("List = %v, %v; want the 4 waiters' leases", list, err)
			}
		})
	}
}

// TestContentionAcrossRedisDataLoss has workers fight over a few names while
// Redis restarts without its data, twice. The quarantine (at least the
// longest TTL) must keep every holder of a lost lease clear of its successor,
// and tokens must keep growing although every counter is gone.
func TestContentionAcrossRedisDataLoss(t *testing.T) {
	forEachPath(t, testContentionAcrossRedisDataLoss)
}

func testContentionAcrossRedisDataLoss(t *testing.T, via string) {
	const (
		ttl     = 300 * time.Millisecond
		maxTTL  = time.Second
		workers = 16
	)
	rs := redistest.Start(t, false)
	cfg := testConfig(t, coordinatord.StoreMemory)
	cfg.Store, cfg.RedisURL, cfg.RedisKeyPrefix = coordinatord.StoreRedis, rs.URL(), "coordinator"
	cfg.MaxTTL, cfg.DataLossQuarantine = maxTTL, maxTTL
	c := startVia(t, cfg, via)

	names, resources := contendedResources()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var granted, quarantined atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			holder := fmt.Sprintf("w%d", w)
			for i := 0; ctx.Err() == nil; i++ {
				name := names[(w+i)%len(names)]
				sent := time.Now()
				resp, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: servertest.Dur(ttl)})
				if err != nil {
					if _, reason, _ := errorDetails(err); reason == "DATA_LOSS_QUARANTINE" {
						quarantined.Add(1)
					}
					time.Sleep(10 * time.Millisecond) // Unavailable: retry, as a client would
					continue
				}
				if !resp.GetAcquired() {
					time.Sleep(time.Millisecond)
					continue
				}
				granted.Add(1)
				// Valid until sent+ttl by our clock, less a margin for the
				// difference between ours and Redis's.
				if err := resources[name].Enter(holder, resp.GetLease().GetToken(), sent.Add(ttl-50*time.Millisecond)); err != nil {
					t.Error(err)
					return
				}
				// Act for most of the lease, so that a restart strands holders
				// inside it.
				time.Sleep(ttl / 2)
				resources[name].Leave(holder)
				// Most leases are left to expire, so that data loss strands holders.
				if i%4 == 0 {
					_, _ = c.client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: name, Holder: holder, Token: resp.GetLease().GetToken()})
				}
			}
		})
	}
	for range 2 {
		// Two restarts in the workers' 4 s, each past the quarantine that
		// the one before set off: each strands holders inside their leases.
		time.Sleep(1200 * time.Millisecond)
		rs.Restart()
	}
	wg.Wait()
	if granted.Load() < 20 || quarantined.Load() == 0 {
		t.Fatalf("%d grants, %d refusals in quarantine: the test did not exercise data loss", granted.Load(), quarantined.Load())
	}
}
