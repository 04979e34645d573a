package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// The three ways a binary is built, as ReadBuildInfo reports them; the
// binaries themselves are built and run by cmd/probed's TestVersion*.
func TestFromBuildInfo(t *testing.T) {
	checkout := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/probed/probed", Version: "v0.0.0-20261201234500-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-12-01T23:45:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		name     string
		bi       *debug.BuildInfo
		override string
		want     Info
		line     string
	}{{
		name: "go install module@version",
		bi:   &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/probed/probed", Version: "v1.2.3"}},
		want: Info{Version: "v1.2.3", GoVersion: "go1.26.0", Platform: runtime.GOOS + "/" + runtime.GOARCH},
		line: "v1.2.3 (go1.26.0 " + runtime.GOOS + "/" + runtime.GOARCH + ")",
	}, {
		name: "go build in a modified checkout",
		bi:   checkout,
		want: Info{Version: "v0.0.0-20261201234500-0123456789ab+dirty", Commit: "0123456789abcdef0123456789abcdef01234567",
			Modified: true, CommitTime: "2026-12-01T23:45:00Z", GoVersion: "go1.26.0", Platform: "linux/arm64"},
		line: "v0.0.0-20261201234500-0123456789ab+dirty (commit 0123456789ab, modified, 2026-12-01T23:45:00Z; go1.26.0 linux/arm64)",
	}, {
		name:     "the -ldflags override wins over the module version",
		bi:       checkout,
		override: "v9.9.9",
		want: Info{Version: "v9.9.9", Commit: "0123456789abcdef0123456789abcdef01234567",
			Modified: true, CommitTime: "2026-12-01T23:45:00Z", GoVersion: "go1.26.0", Platform: "linux/arm64"},
	}, {
		name: "-buildvcs=false",
		bi:   &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/probed/probed", Version: "(devel)"}},
		want: Info{Version: Devel, GoVersion: "go1.26.0", Platform: runtime.GOOS + "/" + runtime.GOARCH},
	}, {
		name: "no build information",
		want: Info{Version: Devel, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromBuildInfo(tc.bi, tc.override)
			if got != tc.want {
				t.Errorf("fromBuildInfo = %+v\nwant %+v", got, tc.want)
			}
			if tc.line != "" && got.String() != tc.line {
				t.Errorf("String() = %q, want %q", got.String(), tc.line)
			}
		})
	}
}
