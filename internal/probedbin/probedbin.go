// Package probedbin gives end-to-end tests the probed binary: the one
// `make test` built once for every package (PROBED_TEST_BINARY, and
// PROBED_TEST_BINARY_NORACE for the build without the race detector), or,
// when a package's tests run on their own without them, one built by the
// package's TestMain into a temporary directory. So the binary is built
// once per `make test`, not once per end-to-end package.
package probedbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The variables `make test` sets (Makefile, target test-binaries).
const (
	// EnvBinary names a probed binary built like the tests: with -race
	// when the tests run with -race.
	EnvBinary = "PROBED_TEST_BINARY"
	// EnvBinaryNoRace names one built without the race detector, for
	// one-shot runs whose real timeouts a race-instrumented binary on a
	// loaded machine can miss, and for figures of the binary as shipped.
	EnvBinaryNoRace = "PROBED_TEST_BINARY_NORACE"
)

// Binaries are the two builds of cmd/probed a test package uses.
type Binaries struct {
	// Race is built like the tests (with -race when race is true);
	// NoRace without the race detector (the same file when race is false).
	Race, NoRace string
	// cleanup removes what Build made (nil for the variables' binaries).
	cleanup func()
}

// Close removes binaries Build made.
func (b Binaries) Close() {
	if b.cleanup != nil {
		b.cleanup()
	}
}

// Build returns the binaries: those the variables name when set (and
// executable), else cmd/probed built now into a temporary directory, with
// -race too when race is true. Progress goes to stderr.
func Build(race bool) (Binaries, error) {
	b := Binaries{Race: os.Getenv(EnvBinary), NoRace: os.Getenv(EnvBinaryNoRace)}
	if b.Race != "" && b.NoRace == "" && !race {
		b.NoRace = b.Race
	}
	if b.Race != "" && b.NoRace != "" {
		for _, p := range []string{b.Race, b.NoRace} {
			if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
				return Binaries{}, fmt.Errorf("probedbin: $%s/$%s: %s is not an executable file", EnvBinary, EnvBinaryNoRace, p)
			}
		}
		return b, nil
	}
	dir, err := os.MkdirTemp("", "probed-test-bin-")
	if err != nil {
		return Binaries{}, err
	}
	b.cleanup = func() { os.RemoveAll(dir) }
	b.NoRace = filepath.Join(dir, "probed")
	if err := build(b.NoRace); err != nil {
		b.Close()
		return Binaries{}, err
	}
	b.Race = b.NoRace
	if race {
		b.Race = filepath.Join(dir, "probed-race")
		if err := build(b.Race, "-race"); err != nil {
			b.Close()
			return Binaries{}, err
		}
	}
	return b, nil
}

func build(out string, flags ...string) error {
	args := append(append([]string{"build", "-o", out}, flags...), "github.com/probed/probed/cmd/probed")
	cmd := exec.Command(goTool(), args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("probedbin: go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// goTool is the go command: the one on PATH, else $GOROOT/bin/go.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}
