package e2e

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRunEmptyDirectorySaysItWaits: the real binary on an
// empty manifest directory says once that it waits for manifests, and
// where (it used to say nothing after "probed running"), then picks up a
// manifest written there and probes it; `probed -v` is not the version.
func TestRunEmptyDirectorySaysItWaits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	base := "http://" + listen
	p := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--log-format", "json")
	waitAPI(t, p, base, true)
	waiting := func() []logLine {
		var out []logLine
		for _, l := range p.logs() {
			if strings.HasPrefix(l.str("msg"), "no pod to probe: waiting for manifests in the manifest directory") {
				out = append(out, l)
			}
		}
		return out
	}
	eventually(t, p, 10*time.Second, "the waiting line", func() (bool, string) { return len(waiting()) == 1, p.stderr.String() })
	if l := waiting()[0]; l.str("path") != dir || l.str("level") != "INFO" {
		t.Errorf("waiting line %v, want INFO naming %s", l, dir)
	}

	writeFile(t, filepath.Join(dir, "web.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web, namespace: nu}
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      tcpSocket: {port: %d}
      periodSeconds: 1
`, freePort(t)))
	eventually(t, p, 20*time.Second, "the manifest picked up", func() (bool, string) {
		list, err := getPods(base)
		return err == nil && findPod(list, "nu", "web") != nil, fmt.Sprint(err)
	})
	if n := len(waiting()); n != 1 {
		t.Errorf("%d waiting lines, want 1", n)
	}

	stdout, stderr, code := runProbed(t, nil, "-v")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "unknown shorthand flag: 'v' in -v") {
		t.Errorf("probed -v: exit %d, stdout %q, stderr %q; want an unknown flag", code, stdout, stderr)
	}
}
