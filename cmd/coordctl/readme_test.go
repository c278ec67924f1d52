package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/coordinator-dev/coordinator/coordinatord/coordtest"
	coordinatorv1 "github.com/coordinator-dev/coordinator/gen/coordinator/v1"
	"github.com/coordinator-dev/coordinator/internal/testkit/readme"
)

// grpcurl is the part of grpcurl that the docs' blocks use, for the tests
// to run them as written with sh (there is no grpcurl here): grpcurl
// -plaintext -d JSON ADDR coordinator.v1.Coordinator/METHOD sends JSON as
// grpcurl would (protojson), and prints the answer as grpcurl does (JSON
// indented by two spaces, camelCase names, default values left out), or
// the error on stderr with the status grpcurl exits with (64 + the code).
// The test binary runs it when started under the name grpcurl (TestMain).
func grpcurl(args []string, stdout, stderr io.Writer) int {
	var body, addr, method string
	for i := 0; i < len(args); i++ {
		switch arg := args[i]; {
		case arg == "-plaintext":
		case arg == "-d" && i+1 < len(args):
			i++
			body = args[i]
		case strings.HasPrefix(arg, "-"):
			_, _ = fmt.Fprintf(stderr, "grpcurl (test stand-in): flag %s is not supported\n", arg)
			return 2
		case addr == "":
			addr = arg
		case method == "":
			method = arg
		default:
			_, _ = fmt.Fprintf(stderr, "grpcurl (test stand-in): too many arguments: %q\n", args)
			return 2
		}
	}
	service, name, ok := strings.Cut(method, "/")
	if !ok || addr == "" {
		_, _ = fmt.Fprintf(stderr, "grpcurl (test stand-in): want -plaintext -d JSON ADDR SERVICE/METHOD, got %q\n", args)
		return 2
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service + "." + name))
	md, isMethod := d.(protoreflect.MethodDescriptor)
	if err != nil || !isMethod {
		_, _ = fmt.Fprintf(stderr, "Error invoking method %q: %v\n", method, err)
		return 1
	}
	in, _ := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	out, _ := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	req, resp := in.New().Interface(), out.New().Interface()
	if err := protojson.Unmarshal([]byte(cmpOr(body, "{}")), req); err != nil {
		_, _ = fmt.Fprintf(stderr, "Error invoking method %q: error getting request data: %v\n", method, err)
		return 1
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "Failed to dial target host %q: %v\n", addr, err)
		return 1
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.Invoke(ctx, "/"+method, req, resp); err != nil {
		st := status.Convert(err)
		_, _ = fmt.Fprintf(stderr, "ERROR:\n  Code: %s\n  Message: %s\n", st.Code(), st.Message())
		return 64 + int(st.Code())
	}
	compact, err := protojson.Marshal(resp)
	var indented bytes.Buffer
	if err == nil {
		err = json.Indent(&indented, compact, "", "  ")
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "grpcurl (test stand-in): %v\n", err)
		return 1
	}
	_, _ = fmt.Fprintf(stdout, "%s\n", indented.Bytes())
	return 0
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// docSection returns the text of the "## title" section of doc, a markdown
// file named from the repository's root (README.md, docs/sessions.md…).
func docSection(t *testing.T, doc, title string) string {
	t.Helper()
	return readme.Section(t, "../../"+doc, title)
}

// shBlocks returns the ```sh blocks of section.
func shBlocks(section string) []string {
	var blocks []string
	for _, part := range strings.Split(section, "```sh\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		blocks = append(blocks, block)
	}
	return blocks
}

// runREADMEBlock runs block with sh -e, as a reader pastes it with
// `make run` going: 127.0.0.1:7400 is coord, grpcurl is the stand-in and
// `go run ./cmd/coordctl` the coordctl built for the tests.
func runREADMEBlock(t *testing.T, coord *coordtest.Coordinator, block string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "grpcurl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(bin, "coordctl")); err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(block, "127.0.0.1:7400", coord.Addr())
	script = strings.ReplaceAll(script, "go run ./cmd/coordctl ", "coordctl ")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "COORDINATOR_ADDR="+coord.Addr(),
		// Under -race the stand-in would sleep a second at each exit.
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the doc's block failed: %v\n%s\nstdout:\n%s\nstderr:\n%s", err, block, stdout.String(), stderr.String())
	}
	return stdout.String()
}

var sessionIDInOutput = regexp.MustCompile(`"id": "([0-9a-f]{32})"`)

// TestREADMESessionsGrpcurlBlockRunsAsWritten runs docs/sessions.md's
// grpcurl block with sh, as written, and checks what it claims: three
// leases attached to one session, which describe and List name, until
// CloseSession releases them all.
func TestREADMESessionsGrpcurlBlockRunsAsWritten(t *testing.T) {
	var block string
	for _, b := range shBlocks(docSection(t, "docs/sessions.md", "With grpcurl")) {
		if strings.Contains(b, "grpcurl ") {
			block = b
		}
	}
	if block == "" {
		t.Fatal("no grpcurl block in docs/sessions.md's With grpcurl")
	}
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			coord := coordtest.Start(t, coordtest.Config(t, store))
			out := runREADMEBlock(t, coord, block)
			m := sessionIDInOutput.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no session id in the output:\n%s", out)
			}
			id := m[1]
			for _, want := range []struct {
				text  string
				count int
			}{
				{`"acquired": true`, 3},
				{`"sessionId": "` + id + `"`, 6}, // 3 grants, 3 in List
				{`"demo/part-1"`, 1},             // DescribeSession's names
			} {
				if got := strings.Count(out, want.text); got < want.count {
					t.Errorf("%q %d times in the output; want at least %d:\n%s", want.text, got, want.count, out)
				}
			}
			c := dial(t, coord)
			list, err := c.API().List(context.Background(), &coordinatorv1.ListRequest{Prefix: "demo/"})
			if err != nil || len(list.GetLeases()) != 0 {
				t.Fatalf("after CloseSession, List = %v, %v; want every lease released", list, err)
			}
		})
	}
}

// TestREADMESessionsCoordctlBlockRunsAsWritten runs docs/sessions.md's
// coordctl block with sh, as written.
func TestREADMESessionsCoordctlBlockRunsAsWritten(t *testing.T) {
	var block string
	for _, b := range shBlocks(docSection(t, "docs/sessions.md", "With coordctl")) {
		if strings.Contains(b, "coordctl session") {
			block = b
		}
	}
	if block == "" {
		t.Fatal("no coordctl block in docs/sessions.md's With coordctl")
	}
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	out := runREADMEBlock(t, coord, block)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^token [0-9]+ in session [0-9a-f]{32}$`),
		regexp.MustCompile(`(?m)^session [0-9a-f]{32} renewed: ttl 1m0s, expires `),
		regexp.MustCompile(`(?m)^session [0-9a-f]{32}: ttl 1m0s, expires .*, 0 leases$`),
		regexp.MustCompile(`(?m)^session [0-9a-f]{32} closed: its leases are released$`),
		regexp.MustCompile(`(?m)^tokens [0-9]+ [0-9]+$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("no line matching %s in the output:\n%s", want, out)
		}
	}
}

// TestREADMEGrpcurlBlockRunsAsWritten runs README.md's grpcurl block with
// sh, as written, and checks what it shows: alice's token, bob told who
// holds it after his wait, alice's renewal and release under that token,
// and alice elected and named the leader.
func TestREADMEGrpcurlBlockRunsAsWritten(t *testing.T) {
	blocks := shBlocks(docSection(t, "README.md", "Try it with grpcurl"))
	if len(blocks) != 1 {
		t.Fatalf("%d sh blocks in README.md's Try it with grpcurl; want 1", len(blocks))
	}
	coord := coordtest.Start(t, coordtest.Config(t, "memory"))
	out := runREADMEBlock(t, coord, blocks[0])
	token := regexp.MustCompile(`(?m)^token ([0-9]+)$`).FindStringSubmatch(out)
	if token == nil {
		t.Fatalf("no token echoed:\n%s", out)
	}
	for _, want := range []struct {
		text  string
		count int
	}{
		{`"retryAfter"`, 1},                // bob is refused after his wait…
		{`"holder": "alice"`, 2},           // …told who holds it, and Describe names her
		{`"token": "` + token[1] + `"`, 3}, // Describe's lease and holder, the renewal
		{`"released": true`, 1},
		{`"elected": true`, 1},
		{`"hasLeader": true`, 1},
		{`"candidate": "alice"`, 2}, // the campaign and Leader
	} {
		if got := strings.Count(out, want.text); got < want.count {
			t.Errorf("%q %d times in the output; want at least %d:\n%s", want.text, got, want.count, out)
		}
	}
	c := dial(t, coord)
	if d, err := c.API().Describe(context.Background(), &coordinatorv1.DescribeRequest{Name: "demo/job"}); err != nil || len(d.GetHolders()) != 0 {
		t.Fatalf("after the block, Describe(demo/job) = %v, %v; want released", d, err)
	}
}

// TestREADMECoordctlBlocksRunAsWritten runs the coordctl blocks of
// README.md, docs/coordctl.md and docs/semaphores.md with sh, as written,
// and checks that each command under a lock got its fencing token.
func TestREADMECoordctlBlocksRunAsWritten(t *testing.T) {
	for _, tc := range []struct {
		doc, section string
		want         []*regexp.Regexp
	}{
		{"README.md", "Use it from a shell", []*regexp.Regexp{
			regexp.MustCompile(`(?m)^token [0-9]+$`),
			regexp.MustCompile(`demo/report`),
		}},
		{"docs/coordctl.md", "Commands", []*regexp.Regexp{
			regexp.MustCompile(`(?m)^token [0-9]+$`),
			regexp.MustCompile(`(?m)^tokens [0-9]+ [0-9]+ for demo/from demo/to$`),
			regexp.MustCompile(`(?m)^leading in term [0-9]+$`),
			regexp.MustCompile(`host-a:8080`),
			regexp.MustCompile(`"name": ?"demo/`),
		}},
		{"docs/semaphores.md", "coordctl", []*regexp.Regexp{
			regexp.MustCompile(`(?m)^slot token [0-9]+$`),
			regexp.MustCompile(`(?m)^reading$`),
			regexp.MustCompile(`(?m)^writing with token [0-9]+$`),
			regexp.MustCompile(`demo/migrations`),
		}},
	} {
		t.Run(tc.doc, func(t *testing.T) {
			blocks := shBlocks(docSection(t, tc.doc, tc.section))
			if len(blocks) != 1 {
				t.Fatalf("%d sh blocks in %s's %s; want 1", len(blocks), tc.doc, tc.section)
			}
			coord := coordtest.Start(t, coordtest.Config(t, "memory"))
			out := runREADMEBlock(t, coord, blocks[0])
			for _, want := range tc.want {
				if !want.MatchString(out) {
					t.Errorf("no match for %s in the output:\n%s", want, out)
				}
			}
		})
	}
}
