package coordinatord_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordinator-dev/coordinator/coordinatord"
	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/redistest"
	"github.com/coordinator-dev/coordinator/internal/testkit/testlog"
	"github.com/coordinator-dev/coordinator/server/servertest"
)

// rawBytes is a request sent as it is, so that a test can send what no
// proto library would encode.
type rawBytes []byte

// rawCodec sends rawBytes unchanged and decodes answers as proto.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(rawBytes); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

// fieldOf returns the field a BadRequest detail of err names.
func fieldOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}

func TestUndecodableRequestsAreInvalidArgumentNamingTheField(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	str := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
	ttl := func(b []byte, inner []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, 3, protowire.BytesType), inner)
	}
	validTTL := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 60)
	tests := []struct {
		name      string
		msg       []byte
		wantField string // "" for a message with no field to name
	}{
		{"invalid UTF-8 in name", ttl(str(str(nil, 1, "job\xff"), 2, "h"), validTTL), "name"},
		{"invalid UTF-8 in holder", ttl(str(str(nil, 1, "job"), 2, "\xc3\x28"), validTTL), "holder"},
		{"truncated nested ttl", ttl(str(str(nil, 1, "job"), 2, "h"), []byte{0x08, 0xff}), "ttl.seconds"},
		{"length past the end", append(protowire.AppendTag(nil, 1, protowire.BytesType), 0x10, 'a'), "name"},
		{"garbage", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var resp coordinatorv1.TryAcquireResponse
			err := c.conn.Invoke(servertest.Timeout(t, 10*time.Second), coordinatorv1.Coordinator_TryAcquire_FullMethodName, rawBytes(tc.msg), &resp, grpc.ForceCodecV2(rawCodec{}))
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err = %v; want InvalidArgument", err)
			}
			if got := fieldOf(err); got != tc.wantField {
				t.Fatalf("err = %v naming field %q; want %q", err, got, tc.wantField)
			}
		})
	}

	// On a stream, the bad message ends it with the same error.
	desc := &grpc.StreamDesc{StreamName: "Stream", ServerStreams: true, ClientStreams: true}
	stream, err := c.conn.NewStream(servertest.Timeout(t, 10*time.Second), desc,
		coordinatorv1.Coordinator_Stream_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	// StreamRequest.operations[0].acquire.name, not UTF-8.
	if err := stream.SendMsg(rawBytes(str(nil, 1, string(str(nil, 2, string(str(nil, 1, "job\xff"))))))); err != nil {
		t.Fatal(err)
	}
	var resp coordinatorv1.StreamResponse
	if err := stream.RecvMsg(&resp); status.Code(err) != codes.InvalidArgument || fieldOf(err) != "operations.acquire.name" {
		t.Fatalf("Stream with invalid UTF-8: %v naming %q; want InvalidArgument naming operations.acquire.name", err, fieldOf(err))
	}
	// Nothing was harmed.
	if resp := servertest.Acquire(t, c.client, "job", "h", time.Minute, 0); !resp.GetAcquired() {
		t.Fatal("a valid request after the bad ones was not granted")
	}
}

func TestNamesWithEmptyOrDotSegmentsAreRefused(t *testing.T) {
	c := start(t, testConfig(t, "memory"))
	for _, name := range []string{"/", "//a", "a//b", "/a", "a/", "../../x", "a/./b", "a/..", ".", ".."} {
		_, err := c.client.TryAcquire(servertest.Timeout(t, 5*time.Second), &coordinatorv1.TryAcquireRequest{Name: name, Holder: "h", Ttl: durationpb.New(time.Minute)})
		if status.Code(err) != codes.InvalidArgument || fieldOf(err) != "name" {
			t.Errorf("TryAcquire(%q): %v; want InvalidArgument naming name", name, err)
		}
		_, err = c.client.Campaign(servertest.Timeout(t, 5*time.Second), &coordinatorv1.CampaignRequest{Election: name, Candidate: "h", Ttl: durationpb.New(time.Minute)})
		if status.Code(err) != codes.InvalidArgument || fieldOf(err) != "election" {
			t.Errorf("Campaign(%q): %v; want InvalidArgument naming election", name, err)
		}
	}
	for _, prefix := range []string{"/", "a//", "/a", "a/./", "../"} {
		_, err := c.client.List(servertest.Timeout(t, 5*time.Second), &coordinatorv1.ListRequest{Prefix: prefix})
		if status.Code(err) != codes.InvalidArgument || fieldOf(err) != "prefix" {
			t.Errorf("List(%q): %v; want InvalidArgument naming prefix", prefix, err)
		}
	}
	// A prefix may end inside a segment, or with the separator.
	for _, prefix := range []string{"", "a/", "a/.", "a/..", "team-a/jo"} {
		if _, err := c.client.List(servertest.Timeout(t, 5*time.Second), &coordinatorv1.ListRequest{Prefix: prefix}); err != nil {
			t.Errorf("List(%q): %v", prefix, err)
		}
	}
	for _, name := range []string{"a/b", "a.b/..c/.d", "team-a/job/42"} {
		if resp := servertest.Acquire(t, c.client, name, "h", time.Minute, 0); !resp.GetAcquired() {
			t.Errorf("%q not granted", name)
		}
	}
}

// reasonOf returns the ErrorInfo reason of err.
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// logged starts a coordinator that logs at debug into the returned buffer.
func logged(t *testing.T, cfg coordinatord.Config) (*coordinator, *testlog.Buffer) {
	t.Helper()
	var buf testlog.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := &coordinator{Coordinator: coordtest.Start(t, cfg, coordtest.WithLogger(log))}
	c.conn = c.Dial(t)
	c.client = coordinatorv1.NewCoordinatorClient(c.conn)
	return c, &buf
}

// series sums the metric lines of name whose labels contain every one of
// labels.
func series(t *testing.T, c *coordtest.Coordinator, name string, labels ...string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	c.Server().MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	var sum float64
lines:
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' '):]), 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	return sum
}

// finishedLine returns the log line of a finished call of method with code.
func finishedLine(log, method string, code codes.Code) string {
	for line := range strings.Lines(log) {
		if strings.Contains(line, `msg="finished call"`) && strings.Contains(line, "grpc.method="+method+" ") && strings.Contains(line, "grpc.code="+code.String()+" ") {
			return line
		}
	}
	return ""
}

func TestTheCallersDeadlineAndCancelAreTheirOwnCodesLoggedAtDebug(t *testing.T) {
	srv := redistest.Start(t, false)
	cfg := testConfig(t, "redis")
	cfg.RedisURL = srv.URL()
	cfg.StoreTimeout = 3 * time.Second // the caller gives up first
	c, log := logged(t, cfg)
	srv.Freeze()

	// A deadline that passes while the store does not answer. The server
	// ends the call at its own copy of the deadline (DeadlineExceeded), or a
	// moment before when the client's cancellation, sent at the client's
	// deadline, arrives first (Canceled): both are the caller's doing.
	_, err := c.client.Describe(servertest.Timeout(t, 500*time.Millisecond), &coordinatorv1.DescribeRequest{Name: "d"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Describe past its deadline: %v", err)
	}
	eventually(t, "the server ends the call", func() bool {
		return series(t, c.Coordinator, "grpc_server_handled_total", `grpc_method="Describe"`) == 1
	})
	describeCode := codes.DeadlineExceeded
	if series(t, c.Coordinator, "grpc_server_handled_total", `grpc_code="DeadlineExceeded"`, `grpc_method="Describe"`) != 1 {
		describeCode = codes.Canceled
		if series(t, c.Coordinator, "grpc_server_handled_total", `grpc_code="Canceled"`, `grpc_method="Describe"`) != 1 {
			t.Fatalf("the server ended Describe with neither DeadlineExceeded nor Canceled:\n%s", log)
		}
	}

	// A cancel while the store does not answer, once the call has reached
	// the server.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.client.Leader(ctx, &coordinatorv1.LeaderRequest{Election: "e"})
		done <- err
	}()
	eventually(t, "the call reached the server", func() bool {
		return series(t, c.Coordinator, "grpc_server_started_total", `grpc_method="Leader"`) == 1
	})
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("Leader cancelled: %v", err)
	}
	eventually(t, "the server reports Canceled", func() bool {
		return series(t, c.Coordinator, "grpc_server_handled_total", `grpc_code="Canceled"`, `grpc_method="Leader"`) == 1
	})

	eventually(t, "both calls are logged", func() bool {
		return finishedLine(log.String(), "Describe", describeCode) != "" && finishedLine(log.String(), "Leader", codes.Canceled) != ""
	})
	for _, line := range []string{finishedLine(log.String(), "Describe", describeCode), finishedLine(log.String(), "Leader", codes.Canceled)} {
		if !strings.Contains(line, "level=DEBUG") {
			t.Errorf("logged above debug: %s", line)
		}
	}
	if n := series(t, c.Coordinator, "grpc_server_handled_total", `grpc_code="Unavailable"`); n != 0 {
		t.Errorf("%v calls reported Unavailable", n)
	}
}

func TestClosingAnObserveStreamIsLoggedAtDebug(t *testing.T) {
	c, log := logged(t, testConfig(t, "memory"))
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.client.Observe(ctx, &coordinatorv1.ObserveRequest{Election: "e"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	eventually(t, "the stream's end is logged", func() bool { return finishedLine(log.String(), "Observe", codes.Canceled) != "" })
	if line := finishedLine(log.String(), "Observe", codes.Canceled); !strings.Contains(line, "level=DEBUG") {
		t.Errorf("logged above debug: %s", line)
	}
	if strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("an error was logged:\n%s", log.String())
	}
}

func TestAHungRedisGivesUnavailableWithinTheStoreTimeout(t *testing.T) {
	const storeTimeout = time.Second
	srv := redistest.Start(t, false)
	cfg := testConfig(t, "redis")
	cfg.RedisURL = srv.URL()
	cfg.StoreTimeout = storeTimeout
	c := start(t, cfg)
	servertest.Acquire(t, c.client, "warm", "h", time.Minute, 0) // the connections to Redis are open
	srv.Freeze()

	for _, call := range []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"TryAcquire, the first call after the hang", func(ctx context.Context) error {
			_, err := c.client.TryAcquire(ctx, &coordinatorv1.TryAcquireRequest{Name: "n", Holder: "h", Ttl: durationpb.New(time.Minute)})
			return err
		}},
		{"Describe", func(ctx context.Context) error {
			_, err := c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: "n"})
			return err
		}},
	} {
		began := time.Now()
		err := call.do(servertest.Timeout(t, time.Minute))
		took := time.Since(began)
		t.Logf("%s on a hung Redis: %s after %s", call.name, status.Code(err), took.Round(time.Millisecond))
		if status.Code(err) != codes.Unavailable || reasonOf(err) != "STORE_UNAVAILABLE" {
			t.Fatalf("%s: %v; want Unavailable, STORE_UNAVAILABLE", call.name, err)
		}
		// The store's timer fires at storeTimeout; the rest is slack for a
		// loaded machine.
		if took > storeTimeout+3*time.Second {
			t.Errorf("%s took %s; want about the store timeout, %s", call.name, took, storeTimeout)
		}
	}
}

func TestHealthFollowsTheStore(t *testing.T) {
	srv := redistest.Start(t, false)
	cfg := testConfig(t, "redis")
	cfg.RedisURL = srv.URL()
	cfg.StoreTimeout = 500 * time.Millisecond
	c := start(t, cfg)
	health := healthpb.NewHealthClient(c.conn)
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := health.Check(servertest.Timeout(t, 5*time.Second), &healthpb.HealthCheckRequest{Service: coordinatorv1.Coordinator_ServiceDesc.ServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	if got := check(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health with Redis up: %s", got)
	}

	srv.Freeze()
	frozeAt := time.Now()
	eventually(t, "health is NOT_SERVING", func() bool { return check() == healthpb.HealthCheckResponse_NOT_SERVING })
	t.Logf("NOT_SERVING %s after Redis hung", time.Since(frozeAt).Round(time.Millisecond))
	if time.Since(frozeAt) < 2*time.Second {
		t.Errorf("NOT_SERVING after %s: one failed ping should not be enough", time.Since(frozeAt))
	}
	for _, service := range []string{"", coordinatorv1.Coordinator_ServiceDesc.ServiceName, coordinatord.LivenessService} {
		want := healthpb.HealthCheckResponse_NOT_SERVING
		if service == coordinatord.LivenessService {
			want = healthpb.HealthCheckResponse_SERVING // the process is fine: no restart
		}
		resp, err := health.Check(servertest.Timeout(t, 5*time.Second), &healthpb.HealthCheckRequest{Service: service})
		if err != nil || resp.GetStatus() != want {
			t.Errorf("Check(%q) while Redis hangs: %v, %v; want %s", service, resp, err, want)
		}
	}
	if got := metric(t, c.Coordinator, "coordinator_store_up"); got != 0 {
		t.Errorf("coordinator_store_up = %v while Redis hangs", got)
	}

	srv.Thaw()
	thawedAt := time.Now()
	eventually(t, "health is SERVING again", func() bool { return check() == healthpb.HealthCheckResponse_SERVING })
	t.Logf("SERVING %s after Redis came back", time.Since(thawedAt).Round(time.Millisecond))
	if got := metric(t, c.Coordinator, "coordinator_store_up"); got != 1 {
		t.Errorf("coordinator_store_up = %v once Redis answers", got)
	}
}
