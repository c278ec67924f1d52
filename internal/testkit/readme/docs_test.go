package readme_test

import (
	"os"
	"path/filepath"
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
