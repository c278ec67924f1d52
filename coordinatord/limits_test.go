package coordinatord_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/testwait"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

// metric returns the value of the metric line that starts with series
// (name and labels), or -1 when there is none.
func metric(t *testing.T, c *coordtest.Coordinator, series string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	c.Server().MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for line := range bytes.Lines(body) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(string(line)), series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", series, err)
			}
			return v
		}
	}
	return -1
}

// eventually polls cond until it holds, for up to 30 s: long enough for a
// loaded CI machine, and it returns as soon as it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 30*time.Second, what, cond)
}

// wantRefusal checks that err is the ResourceExhausted of a cap, naming its
// setting.
func wantRefusal(t *testing.T, err error, env string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), env) {
		t.Fatalf("err = %v; want ResourceExhausted naming %s", err, env)
	}
}

func TestOneConnectionOverTheStreamCapIsRefusedAndTheRestKeepWorking(t *testing.T) {
	const allowed, extra = 20, 1000
	cfg := testConfig(t, "memory")
	cfg.Limits.StreamsPerConn = allowed
	c, log := logged(t, cfg)
	ctx := servertest.Timeout(t, time.Minute)

	// The streams within the cap observe one election and get its state.
	var open []coordinatorv1.Coordinator_ObserveClient
	for range allowed {
		stream, err := c.client.Observe(ctx, &coordinatorv1.ObserveRequest{Election: "e"})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := stream.Recv(); err != nil || ev.GetEvent().GetKind() != coordinatorv1.LeaderEvent_KIND_VACANT {
			t.Fatalf("first event %v, %v", ev, err)
		}
		open = append(open, stream)
	}
	runtime.GC()
	goroutinesWithin := runtime.NumGoroutine()

	// Many more on the same connection, all at once: every one is refused.
	var wg sync.WaitGroup
	errs := make(chan error, extra)
	for range extra {
		wg.Go(func() {
			stream, err := c.client.Observe(ctx, &coordinatorv1.ObserveRequest{Election: "e"})
			if err == nil {
				_, err = stream.Recv()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		wantRefusal(t, err, "COORDINATOR_MAX_STREAMS_PER_CONN")
	}
	if got := metric(t, c.Coordinator, `coordinator_limit_refusals_total{limit="streams_per_connection"}`); got != extra {
		t.Errorf("refusals counted: %v, want %d", got, extra)
	}
	// One warning says the cap was reached, not one per refused call.
	if n := strings.Count(log.String(), `level=WARN msg="a cap was reached`); n != 1 {
		t.Errorf("%d warnings about the cap; want 1:\n%s", n, log)
	}
	if strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("an error was logged:\n%s", log)
	}

	// The streams within the cap still work: they see the next leader.
	if _, err := c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: "e", Candidate: "a", Ttl: durationpb.New(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for i, stream := range open {
		if ev, err := stream.Recv(); err != nil || ev.GetEvent().GetKind() != coordinatorv1.LeaderEvent_KIND_ELECTED {
			t.Fatalf("stream %d after the refusals: %v, %v", i, ev, err)
		}
	}
	// Refused streams hold nothing: the goroutines come back to where they
	// were (a few of gRPC's own may linger for a moment).
	eventually(t, "the refused streams' goroutines are gone", func() bool {
		runtime.GC()
		return runtime.NumGoroutine() <= goroutinesWithin+10
	})
	// Another connection has a cap of its own.
	other := coordinatorv1.NewCoordinatorClient(c.Dial(t))
	stream, err := other.Observe(ctx, &coordinatorv1.ObserveRequest{Election: "e"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("another connection's stream: %v", err)
	}
}

func TestStreamsOverTheTotalCapAreRefusedOnAnyConnection(t *testing.T) {
	cfg := testConfig(t, "memory")
	cfg.Limits.Streams = 4
	c := start(t, cfg)
	ctx := servertest.Timeout(t, time.Minute)
	clients := []coordinatorv1.CoordinatorClient{c.client, coordinatorv1.NewCoordinatorClient(c.Dial(t))}
	for i := range 4 {
		stream, err := clients[i%2].Observe(ctx, &coordinatorv1.ObserveRequest{Election: "e"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	for _, client := range clients {
		stream, err := client.Observe(ctx, &coordinatorv1.ObserveRequest{Election: "e"})
		if err == nil {
			_, err = stream.Recv()
		}
		wantRefusal(t, err, "COORDINATOR_MAX_STREAMS")
	}
	// An operation stream is a stream like any other.
	ops, err := c.client.Stream(ctx)
	if err == nil {
		_, err = ops.Recv()
	}
	wantRefusal(t, err, "COORDINATOR_MAX_STREAMS")
}

// waitCaps are the two caps on waiting calls, each set to 2: per
// connection and in total, with the setting a refusal names.
type waitCap struct {
	name    string
	perConn bool
	env     string
}

var waitCaps = []waitCap{
	{"per connection", true, "COORDINATOR_MAX_WAITS_PER_CONN"},
	{"in total", false, "COORDINATOR_MAX_WAITS"},
}

// start runs a coordinator on the memory store with this cap at 2.
func (tc waitCap) start(t *testing.T) *coordinator {
	cfg := testConfig(t, "memory")
	if tc.perConn {
		cfg.Limits.WaitsPerConn = 2
	} else {
		cfg.Limits.Waits = 2
	}
	return start(t, cfg)
}

func TestWaitingCallsOverTheirCapAreRefusedButNotCallsThatDoNotWait(t *testing.T) {
	for _, tc := range waitCaps {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.start(t)
			ctx := servertest.Timeout(t, time.Minute)
			held := servertest.Acquire(t, c.client, "busy", "holder", time.Minute, 0)
			waitReq := func(holder string) *coordinatorv1.TryAcquireRequest {
				return &coordinatorv1.TryAcquireRequest{Name: "busy", Holder: holder, Ttl: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)}
			}
			granted := make(chan error, 2)
			for i := range 2 {
				go func() {
					_, err := c.client.TryAcquire(ctx, waitReq(fmt.Sprint("waiter-", i)))
					granted <- err
				}()
			}
			eventually(t, "two calls wait", func() bool { return metric(t, c.Coordinator, "coordinator_waiting_calls") == 2 })

			_, err := c.client.TryAcquire(ctx, waitReq("third"))
			wantRefusal(t, err, tc.env)
			_, err = c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: "busy", Candidate: "third", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)})
			wantRefusal(t, err, tc.env)
			if resp := servertest.Acquire(t, c.client, "busy", "no-wait", time.Minute, 0); resp.GetAcquired() {
				t.Fatal("a call without a wait was granted a held name")
			}

			// The waiters are unharmed: a release hands the name on.
			if _, err := c.client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: "busy", Holder: "holder", Token: held.GetLease().GetToken()}); err != nil {
				t.Fatal(err)
			}
			if err := <-granted; err != nil {
				t.Fatalf("a waiter within the cap: %v", err)
			}
		})
	}
}

func TestLeasesPerHolderAreCappedUntilReleasedOrExpired(t *testing.T) {
	cfg := testConfig(t, "memory")
	cfg.Limits.LeasesPerHolder = 3
	c := start(t, cfg)
	ctx := servertest.Timeout(t, time.Minute)
	acquire := func(name, holder string, ttl time.Duration) (*coordinatorv1.TryAcquireResponse, error) {
		return c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: name, Holder: holder, Ttl: durationpb.New(ttl)})
	}
	tokens := map[string]uint64{}
	for _, name := range []string{"a", "b"} {
		resp, err := acquire(name, "h", time.Minute)
		if err != nil || !resp.GetAcquired() {
			t.Fatalf("acquire %s: %v, %v", name, resp, err)
		}
		tokens[name] = resp.GetLease().GetToken()
	}
	if _, err := c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: "c", Candidate: "h", Ttl: durationpb.New(500 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}

	_, err := acquire("d", "h", time.Minute)
	wantRefusal(t, err, "COORDINATOR_MAX_LEASES_PER_HOLDER")
	if got := metric(t, c.Coordinator, `coordinator_limit_refusals_total{limit="leases_per_holder"}`); got != 1 {
		t.Errorf("refusals counted: %v, want 1", got)
	}
	// Asking again for a lease it holds is a renewal, not one more.
	if resp, err := acquire("a", "h", time.Minute); err != nil || !resp.GetAcquired() {
		t.Fatalf("acquire a again: %v, %v", resp, err)
	}
	// Another holder has a cap of its own.
	if resp, err := acquire("d", "other", time.Minute); err != nil || !resp.GetAcquired() {
		t.Fatalf("another holder: %v, %v", resp, err)
	}
	// The leadership of c ran out: its place is free again.
	eventually(t, "the short leadership has expired", func() bool {
		_, err := acquire("e", "h", time.Minute)
		return err == nil
	})
	_, err = acquire("f", "h", time.Minute)
	wantRefusal(t, err, "COORDINATOR_MAX_LEASES_PER_HOLDER")
	// A release frees a place at once.
	if _, err := c.client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: "a", Holder: "h", Token: tokens["a"]}); err != nil {
		t.Fatal(err)
	}
	if resp, err := acquire("f", "h", time.Minute); err != nil || !resp.GetAcquired() {
		t.Fatalf("after a release: %v, %v", resp, err)
	}
}

func TestRenewalLossesFreeTheHoldersPlaces(t *testing.T) {
	// Two coordinators on one Redis: what one releases, the other learns
	// only from the store, as a lost renewal.
	cfg := testConfig(t, "redis")
	cfg.Limits.LeasesPerHolder = 1
	c := start(t, cfg)
	other := start(t, cfg)
	ctx := servertest.Timeout(t, time.Minute)
	lease := servertest.Acquire(t, c.client, "a", "h", time.Minute, 0).GetLease()
	renew := func(token uint64) error {
		_, err := c.client.Renew(ctx, &coordinatorv1.RenewRequest{Name: "a", Holder: "h", Token: token, Ttl: durationpb.New(time.Minute)})
		return err
	}
	secondLease := func() error {
		_, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "b", Holder: "h", Ttl: durationpb.New(time.Minute)})
		return err
	}
	if err := renew(lease.GetToken()); err != nil {
		t.Fatalf("renewal: %v", err)
	}
	wantRefusal(t, secondLease(), "COORDINATOR_MAX_LEASES_PER_HOLDER")
	// A loss under another token leaves the lease of this one counted.
	if err := renew(lease.GetToken() + 1); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("renewal with a wrong token: %v; want FailedPrecondition", err)
	}
	wantRefusal(t, secondLease(), "COORDINATOR_MAX_LEASES_PER_HOLDER")

	if _, err := other.client.Release(ctx, &coordinatorv1.ReleaseRequest{Name: "a", Holder: "h", Token: lease.GetToken()}); err != nil {
		t.Fatal(err)
	}
	if err := renew(lease.GetToken()); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("renewal of a lease released elsewhere: %v; want FailedPrecondition", err)
	}
	if err := secondLease(); err != nil {
		t.Fatalf("after the loss: %v", err)
	}
}

func TestOversizedMessagesAreRefusedAndValuesWithinTheLimitPass(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	ctx := servertest.Timeout(t, time.Minute)
	// The largest valid request: a 64 KiB value with the longest names.
	if _, err := c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{
		Election: strings.Repeat("e", 256), Candidate: strings.Repeat("c", 128), Value: make([]byte, 64<<10), Ttl: durationpb.New(time.Minute),
	}); err != nil {
		t.Fatalf("the largest valid Campaign: %v", err)
	}
	_, err := c.client.Campaign(ctx, &coordinatorv1.CampaignRequest{Election: "e", Candidate: "c", Value: make([]byte, 1<<20), Ttl: durationpb.New(time.Minute)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 1 MiB Campaign: %v; want ResourceExhausted", err)
	}
	if resp := servertest.Acquire(t, c.client, "after", "h", time.Minute, 0); !resp.GetAcquired() {
		t.Fatal("the connection is unusable after an oversized message")
	}
}

func TestLimitsAreSettings(t *testing.T) {
	cfg, err := parse(t, nil, map[string]string{
		"COORDINATOR_MAX_STREAMS_PER_CONN": "7", "COORDINATOR_MAX_STREAMS": "70",
		"COORDINATOR_MAX_WAITS_PER_CONN": "8", "COORDINATOR_MAX_WAITS": "80", "COORDINATOR_MAX_LEASES_PER_HOLDER": "9",
	})
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.Limits; l.StreamsPerConn != 7 || l.Streams != 70 || l.WaitsPerConn != 8 || l.Waits != 80 || l.LeasesPerHolder != 9 {
		t.Fatalf("limits %+v", l)
	}
	if _, err := parse(t, []string{"-max-waits", "-1"}, nil); err == nil || !strings.Contains(err.Error(), "max-waits") {
		t.Fatalf("a negative cap: %v", err)
	}
	defaults, err := parse(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := defaults.Limits; l.StreamsPerConn == 0 || l.Streams == 0 || l.WaitsPerConn == 0 || l.Waits == 0 || l.LeasesPerHolder == 0 {
		t.Fatalf("a cap is off by default: %+v", l)
	}
}
