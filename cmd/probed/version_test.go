package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/probed/probed/internal/version"
)

// TestMain: no goroutine outlives the tests but the default pool ants
// starts in its package init.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	)
}

// buildProbed builds cmd/probed into a temporary directory with the given
// go build flags (GOFLAGS cleared: CI sets -buildvcs=false there) and
// returns the binary.
func buildProbed(t *testing.T, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "probed")
	args := append(append([]string{"build", "-o", bin}, flags...), ".")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// probedVersion runs `probed version -o json`, `probed version` and
// `probed --version`: the two lines must be "probed " + Info.String().
func probedVersion(t *testing.T, bin string) version.Info {
	t.Helper()
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("probed version -o json: %v", err)
	}
	var info version.Info
	dec := json.NewDecoder(strings.NewReader(string(out)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&info); err != nil {
		t.Fatalf("probed version -o json: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		line, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("probed %s: %v", args[0], err)
		}
		if want := "probed " + info.String() + "\n"; string(line) != want {
			t.Errorf("probed %s = %q, want %q", args[0], line, want)
		}
	}
	if want := runtime.Version(); info.GoVersion != want {
		t.Errorf("goVersion %q, want the toolchain's %q", info.GoVersion, want)
	}
	if want := runtime.GOOS + "/" + runtime.GOARCH; info.Platform != want {
		t.Errorf("platform %q, want %q", info.Platform, want)
	}
	return info
}

// git runs git in this package's directory; ok is false when git or the
// repository is missing.
func git(args ...string) (string, bool) {
	out, err := exec.Command("git", args...).Output()
	return strings.TrimSpace(string(out)), err == nil
}

// TestVersionFromBuildInfo builds the real binary two ways and reads what
// it prints: with -buildvcs=false and no override the version is
// "(devel)", with no commit; with -buildvcs=true and -ldflags -X, the
// override is the version, and in a git checkout the commit, its time and
// the modified flag are the repository's (`git rev-parse HEAD`, the
// commit's time, `git status --porcelain`). The Go toolchain reads VCS
// information only where .git is a directory: in a `git worktree`
// checkout, whose .git is a file, it records none, and the binary has no
// commit.
func TestVersionFromBuildInfo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/probed")
	}
	devel := probedVersion(t, buildProbed(t, "-buildvcs=false"))
	if devel.Version != version.Devel || devel.Commit != "" || devel.Modified || devel.CommitTime != "" {
		t.Errorf("-buildvcs=false: %+v, want version %s and no commit", devel, version.Devel)
	}

	top, inRepo := git("rev-parse", "--show-toplevel")
	fi, err := os.Stat(filepath.Join(top, ".git"))
	readable := inRepo && err == nil && fi.IsDir()
	head, _ := git("rev-parse", "HEAD")
	commitTime, _ := git("log", "-1", "--format=%cd", "--date=format-local:%Y-%m-%dT%H:%M:%SZ")
	status, _ := git("status", "--porcelain")
	bin := buildProbed(t, "-buildvcs=true", "-ldflags", "-X github.com/probed/probed/internal/version.version=v9.9.9-test")
	// The toolchain's vcs.modified is `git status --porcelain` at build
	// time: a tree that changed during the build (another test writing
	// into it) leaves it unknown.
	after, _ := git("status", "--porcelain")
	vcs := probedVersion(t, bin)
	if vcs.Version != "v9.9.9-test" {
		t.Errorf("-ldflags -X: version %q, want v9.9.9-test", vcs.Version)
	}
	switch {
	case !readable:
		t.Logf("no git directory at %q (not a checkout, or a git worktree): the toolchain records no VCS information", top)
		if vcs.Commit != "" || vcs.CommitTime != "" {
			t.Errorf("-buildvcs=true without VCS: %+v, want no commit", vcs)
		}
	case vcs.Commit != head || vcs.CommitTime != commitTime || (status == after && vcs.Modified != (status != "")):
		t.Errorf("-buildvcs=true: commit %q modified %v time %q, want %q %v %q", vcs.Commit, vcs.Modified, vcs.CommitTime, head, status != "", commitTime)
	}
}
