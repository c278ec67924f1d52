package readme

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Section returns the text of the "## title" section of the README at path
// (relative to the test's package directory), up to the next "## ".
func Section(t testing.TB, path, title string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("%s has no ## %s section", path, title)
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	return section
}
