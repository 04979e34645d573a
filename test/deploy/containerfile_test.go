package deploy

import (
	"debug/elf"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestContainerfileBuildsAStaticBinary: no container engine runs here, so the
// image itself is not built; what the image depends on is tested instead. The
// Containerfile's build line, run as written (output into a temporary
// directory), makes a static binary (no ELF interpreter, no shared
// libraries: it runs in distroless/static), the image runs it as the
// DaemonSet's user, and the version argument reaches `probed version`.
func TestContainerfileBuildsAStaticBinary(t *testing.T) {
	data, err := os.ReadFile("../../Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	build := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build .*-o /out/probed \./cmd/probed)$`).FindStringSubmatch(text)
	if build == nil {
		t.Fatalf("Containerfile has no `RUN CGO_ENABLED=0 go build ... -o /out/probed ./cmd/probed` line")
	}
	for _, want := range []string{"-trimpath", "FROM gcr.io/distroless/static-debian12:nonroot",
		"COPY --from=build /out/probed /usr/local/bin/probed", "USER 65532:65532", `ENTRYPOINT ["/usr/local/bin/probed"]`} {
		if !strings.Contains(text, want) {
			t.Errorf("Containerfile lacks %q", want)
		}
	}

	bin := staticBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("binary has an ELF interpreter: not static (CGO_ENABLED=0 lost?)")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("binary needs shared libraries %v", libs)
	}
	v, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), "9.9.9-test") {
		t.Errorf("probed version: %v %q, want 9.9.9-test", err, v)
	}
}
