package app

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionTextNamesTheReleaseTheModuleAndTheRevision(t *testing.T) {
	info := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/coordinator-dev/coordinator", Version: "v0.0.0-20261110120000-752fd83abcde+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "752fd83abcdef0123456789abcdef0123456789a"},
			{Key: "vcs.time", Value: "2026-11-10T12:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		name             string
		info             *debug.BuildInfo
		release, stamped string
		want             string
	}{
		{"a stamped build from a git tree", info, "0.1.0", "", `coordinator 0.1.0
module   github.com/coordinator-dev/coordinator v0.0.0-20261110120000-752fd83abcde+dirty
revision 752fd83abcdef0123456789abcdef0123456789a (2026-11-10T12:00:00Z, modified)
go       go1.26.8
`},
		{"the build info's revision wins over a stamped one", info, "0.1.0", "0000000", `coordinator 0.1.0
module   github.com/coordinator-dev/coordinator v0.0.0-20261110120000-752fd83abcde+dirty
revision 752fd83abcdef0123456789abcdef0123456789a (2026-11-10T12:00:00Z, modified)
go       go1.26.8
`},
		{"a tree without .git: the stamped revision", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/coordinator-dev/coordinator", Version: "(devel)"}},
			"0.1.0", "752fd83", `coordinator 0.1.0
module   github.com/coordinator-dev/coordinator (devel)
revision 752fd83
go       go1.26.8
`},
		{"a plain go build: the module version first", info, "", "", `coordinator v0.0.0-20261110120000-752fd83abcde+dirty
module   github.com/coordinator-dev/coordinator v0.0.0-20261110120000-752fd83abcde+dirty
revision 752fd83abcdef0123456789abcdef0123456789a (2026-11-10T12:00:00Z, modified)
go       go1.26.8
`},
		{"no build info at all", nil, "", "", `coordinator (unknown)
module   (unknown) (unknown)
revision (unknown)
go       (unknown)
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionOf(tc.info, tc.release, tc.stamped).Text("coordinator"); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestBuildVersionReadsThisTestBinarysBuildInfo(t *testing.T) {
	v := BuildVersion()
	if !strings.HasPrefix(v.Go, "go") {
		t.Errorf("Go = %q, want the toolchain version", v.Go)
	}
}
