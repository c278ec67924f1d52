package readme_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/coordinator-dev/coordinator/internal/testkit/readme"
)

// root is the repository's root, from this package's directory.
const root = "../../.."

// TestREADMEIsAFrontPage: README.md is what a new user reads first, and
// depth belongs in docs/, so it stays short.
func TestREADMEIsAFrontPage(t *testing.T) {
	const maxLines = 300
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines > maxLines {
		t.Errorf("README.md has %d lines; a front page has at most %d: move the depth to docs/", lines, maxLines)
	}
}

// TestREADMEAndDocsLinksResolve: every relative link of README.md,
// CONTRIBUTING.md, docs/*.md and the READMEs of the folders they send
// readers to leads to a file or folder that exists, and an anchor to a
// heading of that file.
func TestREADMEAndDocsLinksResolve(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md")
	}
	for _, name := range []string{"README.md", "CONTRIBUTING.md", "housekeeper/README.md", "bench/README.md"} {
		docs = append(docs, filepath.Join(root, name))
	}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, doc)
		for _, link := range readme.Links(string(b)) {
			if strings.Contains(link.Target, "://") || strings.HasPrefix(link.Target, "mailto:") {
				continue
			}
			if problem := resolve(doc, link.Target); problem != "" {
				t.Errorf("%s:%d: link %s: %s", rel, link.Line, link.Target, problem)
			}
		}
	}
}

// resolve says what is wrong with target, a link of the file from, or "".
func resolve(from, target string) string {
	path, anchor, _ := strings.Cut(target, "#")
	file := from
	if path != "" {
		file = filepath.Join(filepath.Dir(from), filepath.FromSlash(path))
	}
	st, err := os.Stat(file)
	if err != nil {
		return "no such file"
	}
	if anchor == "" {
		return ""
	}
	if st.IsDir() || !strings.HasSuffix(file, ".md") {
		return "an anchor in what is not a markdown file"
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	if !readme.Anchors(string(b))[anchor] {
		return "no heading makes the anchor #" + anchor
	}
	return ""
}

func TestLinksAndAnchors(t *testing.T) {
	md := strings.Join([]string{
		"# Title",
		"See [the API](api.md#the-calls) and [here](#title), not `[code](x.md)`.",
		"```sh",
		"echo '[no](link.md)'",
		"```",
		"## Leases of their own, and leases in sessions",
		"## Tracing",
		"## Tracing",
		"## What a paused or cut-off instance can do",
	}, "\n")
	got := readme.Links(md)
	want := []readme.Link{{Line: 2, Target: "api.md#the-calls"}, {Line: 2, Target: "#title"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Links = %v, want %v", got, want)
	}
	anchors := readme.Anchors(md)
	for _, a := range []string{"title", "leases-of-their-own-and-leases-in-sessions", "tracing", "tracing-1", "what-a-paused-or-cut-off-instance-can-do"} {
		if !anchors[a] {
			t.Errorf("no anchor %q in %v", a, anchors)
		}
	}
	if len(anchors) != 5 {
		t.Errorf("Anchors = %v, want 5", anchors)
	}
}

// TestREADMEGoFragmentsCompile builds each Go fragment of README.md and
// docs/sessions.md, as the body of a function that declares what the
// fragment takes as given, against the SDK as it is: a fragment that
// names a call the SDK no longer has, or uses one the wrong way, fails.
// (docs/semaphores.md's fragments are parts of client/example_test.go,
// which coordinatord's README tests check.)
func TestREADMEGoFragmentsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	for _, tc := range []struct {
		doc, section string
		params, tail string
	}{
		{"README.md", "Use it from Go", "writeReport func(context.Context, uint64) error", "return err"},
		{"docs/sessions.md", "How the SDKs keep leases alive", "c *client.Client, partitions []string, work func(context.Context, string, uint64)", "return nil"},
	} {
		t.Run(tc.doc, func(t *testing.T) {
			section := readme.Section(t, filepath.Join(root, tc.doc), tc.section)
			_, block, ok := strings.Cut(section, "```go\n")
			if !ok {
				t.Fatalf("no Go block in %s's %s", tc.doc, tc.section)
			}
			block, _, _ = strings.Cut(block, "```")
			src := "package main\n\nimport (\n\t\"context\"\n\t\"time\"\n\n\t\"github.com/coordinator-dev/coordinator/client\"\n)\n\n" +
				"var _ = time.Second\n\n" +
				"func fragment(ctx context.Context, " + tc.params + ") error {\n" + block + tc.tail + "\n}\n\n" +
				"func main() { _ = fragment }\n"
			buildFragment(t, src)
		})
	}
}

// buildFragment builds src as a main package of this module, placed by an
// overlay in a folder that does not exist, so that nothing is written to
// the tree.
func buildFragment(t *testing.T, src string) {
	t.Helper()
	dir := t.TempDir()
	abs, err := filepath.Abs(filepath.Join(root, "internal", "testkit", "readme", "fragment", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "main.go")
	overlay := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(overlay, []byte(`{"Replace": {`+strconv.Quote(abs)+`: `+strconv.Quote(file)+`}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", overlay, "-o", os.DevNull, "./fragment")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the fragment does not build: %v\n%s\n%s", err, out, src)
	}
}
