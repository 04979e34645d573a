package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/probed/probed/internal/version"
)

// TestVersionFlagHasNoShorthand (issue 18 §7): `probed --version` prints
// the version line, and -v is not the version (kubectl's -v is log
// verbosity): it is an unknown flag, exit 2, and the help lists
// --version without it.
func TestVersionFlagHasNoShorthand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := execute([]string{"--version"}, &out, &errOut); code != 0 || out.String() != "probed "+version.Get().String()+"\n" {
		t.Errorf("--version: exit %d, %q %q", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := execute([]string{"-v"}, &out, &errOut); code != 2 || strings.Contains(out.String(), version.Get().String()) ||
		!strings.Contains(errOut.String(), "unknown shorthand flag: 'v' in -v") {
		t.Errorf("-v: exit %d, stdout %q, stderr %q; want an unknown flag", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := execute([]string{"--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "      --version ") || strings.Contains(out.String(), "-v, --version") {
		t.Errorf("--help: exit %d:\n%s", code, out.String())
	}
}
