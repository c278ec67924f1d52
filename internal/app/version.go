package app

import (
	"cmp"
	"fmt"
	"runtime/debug"
	"strings"
)

// Stamped at link time by builds that know them (make image, make run, the
// Dockerfile), with
//
//	-ldflags "-X github.com/coordinator-dev/coordinator/internal/app.release=0.1.0"
//
// release is the version in the repository's VERSION file, which the image
// label and the Helm chart carry too. stampedRevision stands in for the VCS
// revision when the build info has none: a build from a tree without .git,
// as in the Dockerfile, where the revision comes in as a build argument.
var (
	release         string
	stampedRevision string
)

// Version describes the running binary.
type Version struct {
	// Release is the stamped release ("0.1.0"); empty for a plain go build.
	Release string
	// Module is the main module's path and version from the build info: a
	// tag, a pseudo-version derived from the VCS, or "(devel)".
	Module, ModuleVersion string
	// Revision is the VCS commit the binary was built from, Time its commit
	// time, and Modified whether the tree had uncommitted changes; Revision
	// is empty when unknown.
	Revision, Time string
	Modified       bool
	// Go is the toolchain that built it.
	Go string
}

// BuildVersion returns the running binary's Version, from
// runtime/debug.ReadBuildInfo and what was stamped at link time.
func BuildVersion() Version {
	info, _ := debug.ReadBuildInfo()
	return versionOf(info, release, stampedRevision)
}

func versionOf(info *debug.BuildInfo, release, stampedRevision string) Version {
	v := Version{Release: release}
	if info != nil {
		v.Module, v.ModuleVersion, v.Go = info.Main.Path, info.Main.Version, info.GoVersion
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Revision == "" {
		v.Revision = stampedRevision
	}
	return v
}

// Text is what -version prints for program: the release (or the module
// version when none was stamped) on the first line, then the module, the
// revision and the toolchain.
func (v Version) Text(program string) string {
	var b strings.Builder
	first := v.Release
	if first == "" {
		first = cmp.Or(v.ModuleVersion, "(unknown)")
	}
	fmt.Fprintf(&b, "%s %s\n", program, first)
	fmt.Fprintf(&b, "module   %s %s\n", cmp.Or(v.Module, "(unknown)"), cmp.Or(v.ModuleVersion, "(unknown)"))
	var about []string
	if v.Time != "" {
		about = append(about, v.Time)
	}
	if v.Modified {
		about = append(about, "modified")
	}
	rev := cmp.Or(v.Revision, "(unknown)")
	if len(about) > 0 {
		rev += " (" + strings.Join(about, ", ") + ")"
	}
	fmt.Fprintf(&b, "revision %s\n", rev)
	fmt.Fprintf(&b, "go       %s\n", cmp.Or(v.Go, "(unknown)"))
	return b.String()
}
