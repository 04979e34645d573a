package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStatusCommand runs `probed status` against a running `probed run`:
// the table lists each pod with READY, STARTED, RESTARTS, STATUS and the
// last failure of its probes; against an address where no agent listens
// it fails with exit status 2 and says so.
func TestStatusCommand(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, "token=EXAMPLE-SECRET-123")
		}
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "pods.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: healthy, namespace: st}
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      httpGet: {path: /ok, port: %[1]d}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: unready, namespace: st}
spec:
  containers:
  - name: web
    image: web
    readinessProbe:
      httpGet: {path: /fail, port: %[1]d}
      periodSeconds: 1
`, port))
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	base := "http://" + listen
	p := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--log-format", "json")
	waitAPI(t, p, base, true)

	var out string
	eventually(t, p, 20*time.Second, "probed status shows both pods and the failure", func() (bool, string) {
		stdout, stderr, code := runProbed(t, nil, "status", "--server", base)
		out = stdout
		if code != 0 {
			return false, fmt.Sprintf("exit %d: %s", code, stderr)
		}
		// Ready once its first readiness run succeeded; failed once.
		ready := false
		for _, l := range strings.Split(stdout, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[1] == "healthy" {
				ready = f[2] == "1/1"
			}
		}
		return ready && strings.Contains(stdout, "statuscode: 500"), stdout
	})
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("status printed %d lines, want a header and two pods:\n%s", len(lines), out)
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "NAMESPACE NAME READY STARTED RESTARTS STATUS AGE LAST FAILURE" {
		t.Errorf("header %q", lines[0])
	}
	healthy, unready := strings.Fields(lines[1]), strings.Fields(lines[2])
	if len(healthy) != 7 || strings.Join(healthy[:6], " ") != "st healthy 1/1 1/1 0 Running" {
		t.Errorf("healthy row %q, want st healthy 1/1 1/1 0 Running <age> and no failure", lines[1])
	}
	if len(unready) < 8 || strings.Join(unready[:6], " ") != "st unready 0/1 1/1 0 Running" ||
		!strings.Contains(lines[2], "web readiness: HTTP probe failed with statuscode: 500 (") {
		t.Errorf("unready row %q, want st unready 0/1 1/1 0 Running <age> web readiness: HTTP probe failed with statuscode: 500 (<time>)", lines[2])
	}
	if strings.Contains(out, "EXAMPLE-SECRET") {
		t.Errorf("status printed a response body:\n%s", out)
	}
	if code := p.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("probed run exited %d after SIGTERM", code)
	}

	_, stderr, code := runProbed(t, nil, "status", "--server", base)
	if code != 2 || !strings.Contains(stderr, "cannot reach the agent") {
		t.Errorf("status without an agent: exit %d, stderr %q; want 2 and \"cannot reach the agent\"", code, stderr)
	}
}
