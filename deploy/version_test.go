package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The VERSION file is the one source of the release's version: the chart
// (its version and appVersion, which is the image tag it deploys) and the
// Dockerfile's default VERSION (its image label, and -version) must carry
// it. make image passes it on, and TestImage checks the image built.
func TestTheChartAndTheDockerfileCarryTheVersionFilesVersion(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(raw))
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(version) {
		t.Fatalf("VERSION holds %q, not a semantic version", version)
	}
	for _, c := range []struct {
		file string
		re   *regexp.Regexp
	}{
		{"deploy/helm/coordinator/Chart.yaml", regexp.MustCompile(`(?m)^version:\s*"?([^"\s]+)"?\s*$`)},
		{"deploy/helm/coordinator/Chart.yaml", regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?\s*$`)},
		{"Dockerfile", regexp.MustCompile(`(?m)^ARG VERSION=(\S+)\s*$`)},
	} {
		raw, err := os.ReadFile(filepath.Join(root, c.file))
		if err != nil {
			t.Fatal(err)
		}
		m := c.re.FindAllStringSubmatch(string(raw), -1)
		if len(m) != 1 || m[0][1] != version {
			t.Errorf("%s: %s matches %v, want exactly once the VERSION file's %q", c.file, c.re, m, version)
		}
	}
}
