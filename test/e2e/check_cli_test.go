package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckExitCodes runs `probed check` on small manifests: exit status 0
// when every probe succeeds, 1 when one fails, errors or is not run, 2 on
// bad input (a manifest error names file, pod, container and field).
func TestCheckExitCodes(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	good := write("good.yaml", fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: good, namespace: e2e}
spec:
  selector: {matchLabels: {app: good}}
  template:
    metadata: {labels: {app: good}}
    spec:
      containers:
      - name: web
        image: web
        readinessProbe:
          httpGet: {path: /ok, port: %[1]d}
        livenessProbe:
          tcpSocket: {port: %[1]d}
      - name: sidecar
        image: sidecar
        startupProbe:
          httpGet: {path: /started, port: %[1]d}
`, port))
	failing := write("failing.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: failing, namespace: e2e}
spec:
  containers:
  - name: web
    image: web
    readinessProbe:
      httpGet: {path: /ok, port: %[1]d}
    livenessProbe:
      httpGet: {path: /fail, port: %[1]d}
`, port))
	execPod := write("exec.yaml", `apiVersion: v1
kind: Pod
metadata: {name: exec, namespace: e2e}
spec:
  containers:
  - name: c
    image: c
    readinessProbe:
      exec: {command: ["true"]}
`)
	namedPort := write("named-port.yaml", `apiVersion: v1
kind: Pod
metadata: {name: named, namespace: e2e}
spec:
  containers:
  - name: c
    image: c
    ports: [{name: http, containerPort: 8080}]
    livenessProbe:
      tcpSocket: {port: metrics}
`)
	// A broken handler key, as in real manifests: `gRPC:` for `grpc:`.
	broken := write("broken.yaml", `apiVersion: v1
kind: Pod
metadata: {name: broken, namespace: e2e}
spec:
  containers:
  - name: ok
    image: ok
  - name: server
    image: server
    livenessProbe:
      gRPC:
        port: 9555
`)

	type want struct {
		code   int
		rows   []string // "pod container probe handler result", in order
		msgs   []string // substrings of the rows' messages, by row ("" = empty)
		stderr []string // substrings of stderr
	}
	for _, tc := range []struct {
		name string
		args []string
		want want
	}{
		{"all succeed", []string{"-f", good}, want{code: 0,
			rows: []string{"e2e/good web readiness http success", "e2e/good web liveness tcp success", "e2e/good sidecar startup http success"},
			msgs: []string{"HTTP 200", "", "HTTP 200"}}},
		{"a probe fails", []string{"-f", failing}, want{code: 1,
			rows: []string{"e2e/failing web readiness http success", "e2e/failing web liveness http failure"},
			msgs: []string{"HTTP 200", "HTTP probe failed with statuscode: 500"}}},
		{"select the passing probe of a failing pod", []string{"-f", failing, "--probe", "readiness"}, want{code: 0,
			rows: []string{"e2e/failing web readiness http success"}}},
		{"select a container and a probe type", []string{"-f", good, "--container", "web", "--probe", "LIVENESS"}, want{code: 0,
			rows: []string{"e2e/good web liveness tcp success"}}},
		{"exec without --allow-host-exec is not run", []string{"-f", execPod}, want{code: 1,
			rows: []string{"e2e/exec c readiness exec not-run"}, msgs: []string{"allow-host-exec"}}},
		{"exec with --allow-host-exec", []string{"-f", execPod, "--allow-host-exec"}, want{code: 0,
			rows: []string{"e2e/exec c readiness exec success"}, msgs: []string{""}}},
		{"a named port that does not exist is errored", []string{"-f", namedPort}, want{code: 1,
			rows:   []string{"e2e/named c liveness tcp error"},
			msgs:   []string{`port "metrics" not found`},
			stderr: []string{"named-port.yaml", "e2e/named", "warning", "metrics"}}},
		{"a broken handler key", []string{"-f", broken}, want{code: 2,
			stderr: []string{broken, "pod e2e/broken", `container "server"`, "spec.containers[1].livenessProbe.gRPC", `unknown field "gRPC"`}}},
		{"a missing file", []string{"-f", filepath.Join(dir, "nope.yaml")}, want{code: 2, stderr: []string{"nope.yaml"}}},
		{"no -f", nil, want{code: 2, stderr: []string{"-f FILE is required"}}},
		{"an unknown probe type", []string{"-f", good, "--probe", "sometimes"}, want{code: 2, stderr: []string{"sometimes"}}},
		{"an unknown container", []string{"-f", good, "--container", "nope"}, want{code: 2, stderr: []string{`no container named "nope"`}}},
		{"a pod IP that is not an IP", []string{"-f", good, "--pod-ip", "localhost"}, want{code: 2, stderr: []string{"--pod-ip", "localhost"}}},
		{"an unknown flag", []string{"-f", good, "--frobnicate"}, want{code: 2, stderr: []string{"frobnicate"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runProbed(t, nil, append([]string{"check"}, tc.args...)...)
			if code != tc.want.code {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.want.code, stdout, stderr)
			}
			for _, s := range tc.want.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
			if tc.want.code == 2 {
				if strings.TrimSpace(stdout) != "" && !strings.HasPrefix(stdout, "Usage:") {
					t.Errorf("bad input printed a table:\n%s", stdout)
				}
				return
			}
			rows := parseTable(t, stdout)
			if len(rows) != len(tc.want.rows) {
				t.Fatalf("%d rows, want %d:\n%s", len(rows), len(tc.want.rows), stdout)
			}
			for i, r := range rows {
				got := strings.Join([]string{r.Pod, r.Container, r.Probe, r.Handler, r.Result}, " ")
				if got != tc.want.rows[i] {
					t.Errorf("row %d = %q, want %q", i, got, tc.want.rows[i])
				}
				if i < len(tc.want.msgs) {
					if m := tc.want.msgs[i]; (m == "" && r.Message != "") || !strings.Contains(r.Message, m) {
						t.Errorf("row %d message %q, want %q", i, r.Message, m)
					}
				}
			}
		})
	}
}
