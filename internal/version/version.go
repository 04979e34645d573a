// Package version is probed's build identity — its version, the commit it
// was built from and the Go toolchain — read in one place from the binary's
// build information (runtime/debug.ReadBuildInfo), for `probed version`,
// `probed --version`, GET /version and /healthz?verbose, the User-Agent of
// cluster mode, traces' service.version and the plugin handshake (the host
// sends its version in Configure; a plugin's comes back in GetInfo).
//
// Where the values come from:
//   - Version: the -ldflags override
//     (-X github.com/probed/probed/internal/version.version=v1.2.3) when set;
//     else the main module's version, which `go install
//     github.com/probed/probed/cmd/probed@v1.2.3` sets to v1.2.3 and `go
//     build` in a git checkout sets from the commit (Go 1.24+: the tag, or a
//     pseudo-version such as v0.0.0-20261201234500-abcdef123456, with
//     "+dirty" for a modified tree); else "(devel)".
//   - Commit, Modified, CommitTime: the vcs.revision, vcs.modified and
//     vcs.time settings `go build` records in a checkout (empty with
//     -buildvcs=false or outside a repository; `go install pkg@version`
//     records none either — the module version names the source then).
//   - GoVersion and Platform: the toolchain that built the binary, and its
//     GOOS/GOARCH.
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// version overrides the module version when set at link time:
// go build -ldflags "-X github.com/probed/probed/internal/version.version=v1.2.3".
var version string

// Devel is the version of a binary whose build records none (built with
// -buildvcs=false, or outside a repository): the Go toolchain's own word.
const Devel = "(devel)"

// Info is probed's build identity. Its JSON shape is part of GET /version
// and `probed version -o json` (docs/operations.md).
type Info struct {
	// Version is the release ("v1.2.3"), a pseudo-version or Devel.
	Version string `json:"version"`
	// Commit is the full revision hash the binary was built from; "" when
	// unknown.
	Commit string `json:"commit,omitempty"`
	// Modified is true when the working tree had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// CommitTime is the commit's time, RFC 3339 in UTC; "" when unknown.
	CommitTime string `json:"commitTime,omitempty"`
	// GoVersion is the toolchain's version, e.g. "go1.26.0".
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH, e.g. "linux/amd64".
	Platform string `json:"platform"`
}

// Get returns the running binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi, version)
}

// fromBuildInfo computes Info from bi (nil: no build information, as in a
// binary built without module support) and the link-time override.
func fromBuildInfo(bi *debug.BuildInfo, override string) Info {
	info := Info{Version: Devel, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		if override != "" {
			info.Version = override
		}
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if v := bi.Main.Version; v != "" {
		info.Version = v
	}
	if override != "" {
		info.Version = override
	}
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		case "vcs.time":
			info.CommitTime = s.Value
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" && goarch != "" {
		info.Platform = goos + "/" + goarch
	}
	return info
}

// String is the one line of `probed version` and `probed --version`:
// "v1.2.3 (commit 0123456789ab, modified, 2026-12-01T23:50:00Z; go1.26.0 linux/amd64)".
// The commit is cut to 12 characters, as Go's pseudo-versions cut it; the
// parts that are unknown are left out.
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	b.WriteString(" (")
	if i.Commit != "" {
		b.WriteString("commit ")
		b.WriteString(short(i.Commit))
		if i.Modified {
			b.WriteString(", modified")
		}
		if i.CommitTime != "" {
			b.WriteString(", ")
			b.WriteString(i.CommitTime)
		}
		b.WriteString("; ")
	}
	b.WriteString(i.GoVersion)
	b.WriteString(" ")
	b.WriteString(i.Platform)
	b.WriteString(")")
	return b.String()
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
