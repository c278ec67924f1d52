package coordinatord_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/readme"
)

// docSection returns the text of the "## title" section of doc, a markdown
// file named from the repository's root.
func docSection(t *testing.T, doc, title string) string {
	t.Helper()
	return readme.Section(t, "../"+doc, title)
}

var grpcurlCall = regexp.MustCompile(`^grpcurl -plaintext -d '([^']*)' 127\.0\.0\.1:7400 coordinator\.v1\.Coordinator/(\w+)\s*(?:#\s*(.*))?$`)

// TestREADMESemaphoreGrpcurlExamplesRunAsWritten sends every grpcurl call
// of docs/semaphores.md's grpcurl section as replayGrpcurl does.
func TestREADMESemaphoreGrpcurlExamplesRunAsWritten(t *testing.T) {
	section := docSection(t, "docs/semaphores.md", "With grpcurl")
	_, block, ok := strings.Cut(section, "```sh\n# A semaphore")
	if !ok {
		t.Fatal("no grpcurl block in the section")
	}
	c := start(t, testConfig(t, "memory"))
	ctx := ctxTimeout(t, time.Minute)
	if calls := replayGrpcurl(t, c, block); calls < 6 {
		t.Fatalf("only %d grpcurl calls found", calls)
	}
	d, err := c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: "demo/pool"})
	if err != nil || len(d.GetHolders()) != 2 || d.GetCapacity() != 3 {
		t.Fatalf("after the doc's calls, Describe = %v, %v", d, err)
	}
}

// TestGroupsGrpcurlExamplesRunAsWritten sends every grpcurl call of
// docs/groups.md's grpcurl section as replayGrpcurl does.
func TestGroupsGrpcurlExamplesRunAsWritten(t *testing.T) {
	section := docSection(t, "docs/groups.md", "With grpcurl")
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatal("no grpcurl block in the section")
	}
	c := start(t, testConfig(t, "memory"))
	ctx := ctxTimeout(t, time.Minute)
	if calls := replayGrpcurl(t, c, block); calls < 4 {
		t.Fatalf("only %d grpcurl calls found", calls)
	}
	// The refused group left nothing of itself behind.
	d, err := c.client.Describe(ctx, &coordinatorv1.DescribeRequest{Name: "demo/acct/carol"})
	if err != nil || d.GetHeld() || d.GetWaiters() != 0 {
		t.Fatalf("after the doc's calls, Describe carol = %v, %v", d, err)
	}
}

// replayGrpcurl sends every grpcurl call of a markdown sh block, its JSON as
// grpcurl would (protojson), to c, in order, and checks the outcome its
// comment states: "granted, weight N", "granted", "refused…", or "fails:
// CODE REASON". It returns how many calls it sent.
func replayGrpcurl(t *testing.T, c *coordinator, block string) int {
	t.Helper()
	block, _, _ = strings.Cut(block, "```")
	ctx := ctxTimeout(t, time.Minute)
	calls := 0
	for _, line := range strings.Split(strings.ReplaceAll(block, "\\\n", ""), "\n") {
		line = strings.Join(strings.Fields(line), " ")
		if !strings.HasPrefix(line, "grpcurl") {
			continue
		}
		m := grpcurlCall.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("a grpcurl line this test cannot read: %q", line)
		}
		body, method, want := m[1], m[2], m[3]
		md, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName("coordinator.v1.Coordinator." + method))
		if err != nil {
			t.Fatal(err)
		}
		mdesc := md.(protoreflect.MethodDescriptor)
		req := dynamicMessage(t, mdesc.Input().FullName())
		if err := protojson.Unmarshal([]byte(body), req); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		resp := dynamicMessage(t, mdesc.Output().FullName())
		err = c.conn.Invoke(ctx, "/coordinator.v1.Coordinator/"+method, req, resp)
		calls++
		switch {
		case strings.HasPrefix(want, "fails"):
			if err == nil || !strings.Contains(want, status.Code(err).String()) || !strings.Contains(want, reasonOf(err)) {
				t.Fatalf("%s: %v; the doc says it %s", body, err, want)
			}
		case err != nil:
			t.Fatalf("%s: %v", body, err)
		case strings.HasPrefix(want, "granted"), strings.HasPrefix(want, "refused"):
			r, ok := resp.(interface{ GetAcquired() bool })
			if !ok {
				t.Fatalf("%s: %T answers no acquisition; the doc says %s", body, resp, want)
			}
			if r.GetAcquired() != strings.HasPrefix(want, "granted") {
				t.Fatalf("%s: %v; the doc says %s", body, r, want)
			}
			if w, ok := strings.CutPrefix(want, "granted, weight "); ok {
				if l, _ := resp.(*coordinatorv1.TryAcquireResponse); w != strconv.FormatUint(uint64(l.GetLease().GetWeight()), 10) {
					t.Fatalf("%s: weight %d; the doc says %s", body, l.GetLease().GetWeight(), want)
				}
			}
		}
	}
	return calls
}

func dynamicMessage(t *testing.T, name protoreflect.FullName) proto.Message {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return mt.New().Interface()
}

// TestREADMESemaphoreGoExamplesAreTheRunnableOnes: the Go blocks of
// docs/semaphores.md are, line for line, parts of client/example_test.go's
// runnable examples (which go test runs and checks the output of).
func TestREADMESemaphoreGoExamplesAreTheRunnableOnes(t *testing.T) {
	section := docSection(t, "docs/semaphores.md", "Go")
	src, err := os.ReadFile("../client/example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	trim := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
		return out
	}
	example := strings.Join(trim(string(src)), "\n")
	blocks := 0
	for _, part := range strings.Split(section, "```go\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		if !strings.Contains(example, strings.Join(trim(block), "\n")) {
			t.Errorf("docs/semaphores.md's Go block is not in client/example_test.go:\n%s", block)
		}
		blocks++
	}
	if blocks != 2 {
		t.Fatalf("%d Go blocks in the section, want 2", blocks)
	}
}
