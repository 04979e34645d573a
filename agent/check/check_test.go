package check_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/probed/probed/agent/check"
	"github.com/probed/probed/agent/source"
)

// TestMain fails the package's tests if a check leaves goroutines behind
// (its runtime, a probe's connection). ants starts its default pool in its
// package init.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	)
}

// target is an HTTP server on 127.0.0.1: /ok 200, /fail 500, /redirect a
// 302 to another host name, localhost (not followed: a warning), anything
// else 404.
func target(t *testing.T) int {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
		case "/fail":
			w.WriteHeader(http.StatusInternalServerError)
		case "/redirect":
			http.Redirect(w, r, "http://localhost/ok", http.StatusFound)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// grpcHealth serves grpc.health.v1 with "" SERVING.
func grpcHealth(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return l.Addr().(*net.TCPAddr).Port
}

func manifest(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs check.Run and returns the table's rows (each "POD CONTAINER
// PROBE HANDLER RESULT | MESSAGE"), stderr and the exit code.
func run(t *testing.T, opts check.Options) (rows []string, errOut string, code int) {
	t.Helper()
	var out, errBuf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = check.Run(ctx, opts, &out, &errBuf)
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if out.Len() == 0 {
		return nil, errBuf.String(), code
	}
	const header = "POD CONTAINER PROBE HANDLER RESULT DURATION MESSAGE"
	if got := strings.Join(strings.Fields(lines[0]), " "); got != header {
		t.Fatalf("header %q, want %q", lines[0], header)
	}
	msgAt := strings.Index(lines[0], "MESSAGE")
	durAt := strings.Index(lines[0], "DURATION")
	for _, l := range lines[1:] {
		f := strings.Fields(l[:durAt])
		if len(f) != 5 {
			t.Fatalf("row %q: %d cells before DURATION, want 5", l, len(f))
		}
		dur := strings.TrimSpace(l[durAt:min(msgAt, len(l))])
		if _, err := time.ParseDuration(dur); err != nil {
			t.Fatalf("row %q: DURATION %q: %v", l, dur, err)
		}
		msg := ""
		if len(l) > msgAt {
			msg = l[msgAt:]
		}
		rows = append(rows, strings.Join(f, " ")+" | "+msg)
	}
	return rows, errBuf.String(), code
}

func wantRows(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d:\n  %s", len(got), len(want), strings.Join(got, "\n  "))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d:\n  got  %q\n  want %q", i, got[i], want[i])
		}
	}
}

// TestRunTable checks the table: one row per probe, containers in order,
// startup, readiness, liveness within a container, then the probes of
// restartable init containers (sidecars); each handler's result and message.
func TestRunTable(t *testing.T) {
	web, rpc := target(t), grpcHealth(t)
	path := manifest(t, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: prod}
spec:
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      initContainers:
      - name: setup
        image: setup
      - name: proxy
        image: proxy
        restartPolicy: Always
        readinessProbe:
          httpGet: {path: /ok, port: %[1]d}
      containers:
      - name: a
        image: a
        ports: [{name: web, containerPort: %[1]d}]
        livenessProbe:
          tcpSocket: {port: web}
        readinessProbe:
          httpGet: {path: /ok, port: web}
        startupProbe:
          httpGet: {path: /ok, port: %[1]d}
      - name: b
        image: b
        readinessProbe:
          grpc: {port: %[2]d}
        livenessProbe:
          httpGet: {path: /fail, port: %[1]d}
      - name: c
        image: c
        readinessProbe:
          httpGet: {path: /redirect, port: %[1]d}
`, web, rpc))
	rows, errOut, code := run(t, check.Options{File: path})
	wantRows(t, rows, []string{
		"prod/app a startup http success | HTTP 200",
		"prod/app a readiness http success | HTTP 200",
		"prod/app a liveness tcp success | ",
		"prod/app b readiness grpc success | ",
		"prod/app b liveness http failure | HTTP probe failed with statuscode: 500",
		"prod/app c readiness http warning | Probe terminated redirects",
		"prod/app proxy readiness http success | HTTP 200",
	})
	if code != check.ExitFailed {
		t.Errorf("exit code %d, want %d (b's liveness fails)", code, check.ExitFailed)
	}
	if errOut != "" {
		t.Errorf("stderr: %q, want none", errOut)
	}
}

// TestRunFilters checks --container and --probe.
func TestRunFilters(t *testing.T) {
	web := target(t)
	path := manifest(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  initContainers:
  - name: setup
    image: setup
  containers:
  - name: a
    image: a
    readinessProbe:
      httpGet: {path: /ok, port: %[1]d}
    livenessProbe:
      httpGet: {path: /fail, port: %[1]d}
  - name: b
    image: b
    readinessProbe:
      tcpSocket: {port: %[1]d}
    startupProbe:
      tcpSocket: {port: %[1]d}
  - name: quiet
    image: quiet
`, web))
	for _, tc := range []struct {
		name      string
		container string
		probe     string
		rows      []string
		code      int
		errOut    string
	}{
		{name: "all", rows: []string{
			"default/p a readiness http success | HTTP 200",
			"default/p a liveness http failure | HTTP probe failed with statuscode: 500",
			"default/p b startup tcp success | ",
			"default/p b readiness tcp success | ",
		}, code: check.ExitFailed},
		{name: "container", container: "b", rows: []string{
			"default/p b startup tcp success | ",
			"default/p b readiness tcp success | ",
		}},
		{name: "probe type", probe: "readiness", rows: []string{
			"default/p a readiness http success | HTTP 200",
			"default/p b readiness tcp success | ",
		}},
		{name: "probe type, any case", probe: "Liveness", rows: []string{
			"default/p a liveness http failure | HTTP probe failed with statuscode: 500",
		}, code: check.ExitFailed},
		{name: "container and probe type", container: "a", probe: "readiness", rows: []string{
			"default/p a readiness http success | HTTP 200",
		}},
		// Nothing to run is bad input (it used to pass).
		{name: "a container without the probe type", container: "b", probe: "liveness", code: check.ExitBadInput,
			errOut: path + ": no probes found\n"},
		{name: "a container without probes", container: "quiet", code: check.ExitBadInput, errOut: path + ": no probes found\n"},
		{name: "a regular init container", container: "setup", code: check.ExitBadInput, errOut: path + ": no probes found\n"},
		{name: "an unknown container", container: "nope", code: check.ExitBadInput,
			errOut: path + ": no container named \"nope\"\n"},
		{name: "an unknown probe type", probe: "sometimes", code: check.ExitBadInput,
			errOut: "--probe: unknown probe type \"sometimes\" (want liveness, readiness or startup)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, errOut, code := run(t, check.Options{File: path, Container: tc.container, ProbeType: tc.probe})
			wantRows(t, rows, tc.rows)
			if code != tc.code {
				t.Errorf("exit code %d, want %d", code, tc.code)
			}
			if errOut != tc.errOut {
				t.Errorf("stderr %q, want %q", errOut, tc.errOut)
			}
		})
	}
}

// TestRunNamedPortNotFound: a probe port name the container does not
// declare is accepted by the API server but errors on every run (BR-20): an
// "error" row with `port "x" not found`, a warning naming the container and
// field, exit code 1.
func TestRunNamedPortNotFound(t *testing.T) {
	web := target(t)
	path := manifest(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
spec:
  containers:
  - name: app
    image: app
    ports: [{name: http, containerPort: %[1]d}]
    readinessProbe:
      httpGet: {path: /ok, port: http}
    livenessProbe:
      httpGet: {path: /ok, port: x}
`, web))
	rows, errOut, code := run(t, check.Options{File: path})
	wantRows(t, rows, []string{
		"ns/p app readiness http success | HTTP 200",
		`ns/p app liveness http error | port "x" not found`,
	})
	if code != check.ExitFailed {
		t.Errorf("exit code %d, want %d", code, check.ExitFailed)
	}
	for _, want := range []string{path + ": document 1: pod ns/p: warning:", `"app"`, "livenessProbe.httpGet.port", `"x"`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

// TestRunExec: exec probes run on this host only with AllowHostExec;
// without it they are "not-run" (exit code 1) and nothing is executed.
func TestRunExec(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	path := manifest(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      exec: {command: ["touch", %q]}
    livenessProbe:
      exec: {command: ["sh", "-c", "echo broken; echo more; exit 3"]}
    startupProbe:
      exec: {command: ["sh", "-c", "echo not yet; exit 1"]}
`, marker))

	rows, _, code := run(t, check.Options{File: path})
	wantRows(t, rows, []string{
		"default/p app startup exec not-run | host exec disabled: exec probes run on this host only with --allow-host-exec",
		"default/p app readiness exec not-run | host exec disabled: exec probes run on this host only with --allow-host-exec",
		"default/p app liveness exec not-run | host exec disabled: exec probes run on this host only with --allow-host-exec",
	})
	if code != check.ExitFailed {
		t.Errorf("exit code %d, want %d", code, check.ExitFailed)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the exec command ran without AllowHostExec (stat: %v)", err)
	}

	rows, _, code = run(t, check.Options{File: path, AllowHostExec: true, ProbeType: "readiness"})
	wantRows(t, rows, []string{"default/p app readiness exec success | "})
	if code != check.ExitOK {
		t.Errorf("exit code %d, want %d", code, check.ExitOK)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the exec command did not run with AllowHostExec: %v", err)
	}
	rows, _, code = run(t, check.Options{File: path, AllowHostExec: true, ProbeType: "liveness"})
	// The output's first line; " …" marks the cut.
	wantRows(t, rows, []string{"default/p app liveness exec failure | broken …"})
	if code != check.ExitFailed {
		t.Errorf("exit code %d, want %d", code, check.ExitFailed)
	}
	// One line and its newline: nothing is cut.
	rows, _, _ = run(t, check.Options{File: path, AllowHostExec: true, ProbeType: "startup"})
	wantRows(t, rows, []string{"default/p app startup exec failure | not yet"})
}

// TestRunLongMessage: a message is cut to its first line and 200 bytes,
// at a rune boundary, marked with "…".
func TestRunLongMessage(t *testing.T) {
	long := "x" + strings.Repeat("é", 150) // 301 bytes; byte 200 is inside an é
	path := manifest(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      exec: {command: ["sh", "-c", "echo %s; exit 1"]}
`, long))
	rows, _, code := run(t, check.Options{File: path, AllowHostExec: true})
	want := "default/p app readiness exec failure | x" + strings.Repeat("é", 99) + "…"
	wantRows(t, rows, []string{want})
	if code != check.ExitFailed {
		t.Errorf("exit code %d, want %d", code, check.ExitFailed)
	}
	for _, r := range rows {
		if !utf8.ValidString(r) {
			t.Errorf("row %q is not valid UTF-8", r)
		}
	}
}

// TestRunExitCodes: 0 when every probe succeeds (a warning counts as
// success), 1 when one fails, errors or is not run, 2 on bad input.
func TestRunExitCodes(t *testing.T) {
	web := target(t)
	pod := func(probe string) string {
		return manifest(t, fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: app\n    image: app\n    readinessProbe:\n      %s\n", probe))
	}
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "notes.txt"), []byte("not a manifest"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		opts   check.Options
		code   int
		errOut []string
	}{
		{"success", check.Options{File: pod(fmt.Sprintf("httpGet: {path: /ok, port: %d}", web))}, check.ExitOK, nil},
		{"warning", check.Options{File: pod(fmt.Sprintf("httpGet: {path: /redirect, port: %d}", web))}, check.ExitOK, nil},
		{"failure", check.Options{File: pod(fmt.Sprintf("httpGet: {path: /nope, port: %d}", web))}, check.ExitFailed, nil},
		{"error", check.Options{File: pod("tcpSocket: {port: missing}")}, check.ExitFailed, []string{"warning"}},
		{"not run", check.Options{File: pod(`exec: {command: ["true"]}`)}, check.ExitFailed, nil},
		{"no probes", check.Options{File: manifest(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: app, image: app}\n")},
			check.ExitBadInput, []string{"no probes found"}},
		{"missing file", check.Options{File: filepath.Join(t.TempDir(), "nope.yaml")}, check.ExitBadInput, []string{"nope.yaml"}},
		// Not regular files are refused at once, naming them.
		{"FIFO", check.Options{File: fifo}, check.ExitBadInput, []string{fifo + ": is a FIFO (named pipe), not a regular file"}},
		{"/dev/zero", check.Options{File: zero}, check.ExitBadInput, []string{zero + ": is a character device, not a regular file"}},
		// A directory is read as the agent reads --manifests: each of its
		// manifest files, here both refused.
		{"directory of special files", check.Options{File: dir}, check.ExitBadInput, []string{
			fifo + ": is a FIFO (named pipe), not a regular file", zero + ": is a character device, not a regular file"}},
		{"empty directory", check.Options{File: empty}, check.ExitBadInput, []string{empty + ": the directory holds no manifest file (*.yaml, *.yml, *.json)"}},
		{"unknown field", check.Options{File: pod(fmt.Sprintf("httpget: {path: /ok, port: %d}", web))}, check.ExitBadInput,
			[]string{"pod.yaml: document 1: pod default/p: container \"app\": spec.containers[0].readinessProbe.httpget: unknown field \"httpget\""}},
		{"invalid probe", check.Options{File: pod(fmt.Sprintf("httpGet: {path: /ok, port: %d}\n      periodSeconds: -1", web))}, check.ExitBadInput,
			[]string{"pod default/p", `"app"`, "readinessProbe.periodSeconds"}},
		{"pod IP not an IP", check.Options{File: pod(fmt.Sprintf("httpGet: {path: /ok, port: %d}", web)), PodIP: "localhost"}, check.ExitBadInput,
			[]string{`--pod-ip "localhost" is not an IP address`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, errOut, code := run(t, tc.opts)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; rows %q, stderr %q", code, tc.code, rows, errOut)
			}
			if tc.code == check.ExitBadInput && rows != nil {
				t.Errorf("bad input printed rows %q", rows)
			}
			for _, want := range tc.errOut {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
			}
			if tc.errOut == nil && errOut != "" {
				t.Errorf("stderr %q, want none", errOut)
			}
		})
	}
}

// TestRunPodIP: probes go to the manifest's status.podIP when it has one,
// else to Options.PodIP.
func TestRunPodIP(t *testing.T) {
	web := target(t)
	withIP := manifest(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      httpGet: {path: /ok, port: %d}
status:
  podIP: 127.0.0.1
`, web))
	rows, _, code := run(t, check.Options{File: withIP, PodIP: "127.0.0.2"})
	wantRows(t, rows, []string{"default/p app readiness http success | HTTP 200"})
	if code != check.ExitOK {
		t.Errorf("exit code %d, want 0", code)
	}

	without := manifest(t, fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: app\n    image: app\n    readinessProbe:\n      tcpSocket: {port: %d}\n", web))
	rows, _, _ = run(t, check.Options{File: without, PodIP: "::1"})
	if len(rows) != 1 || !strings.Contains(rows[0], fmt.Sprintf("[::1]:%d", web)) {
		t.Errorf("with PodIP ::1 the probe went to %q, want [::1]:%d (refused or not, but there)", rows, web)
	}
}

// TestCheck_FilesWithoutProbesSaySoAndFail: a file that
// yields no probe — empty, only comments, only `---`, a Secret, a List of a
// Secret and a pod without probes — exits ExitBadInput, prints no table,
// and says what was skipped and why; a List with a Secret and a probed Pod
// checks the pod, keeps stderr quiet about the Secret (a real manifest's
// Services and RBAC objects are no news beside probes that ran) and still
// reports it as skipped in Check's Result, the source of the JSON and YAML
// Report.
func TestCheck_FilesWithoutProbesSaySoAndFail(t *testing.T) {
	web := target(t)
	noObject := "skipped: the file holds no object: it is empty, or has only comments, blank lines and --- markers"
	secret := "- {apiVersion: v1, kind: Secret, metadata: {name: creds}, stringData: {password: hunter2}}\n"
	for _, tc := range []struct {
		name, content string
		code          int
		errOut        []string
		rows          int
	}{
		{"empty", "", check.ExitBadInput, []string{noObject, "no probes found"}, 0},
		{"only comments", "# a comment\n\n# another\n", check.ExitBadInput, []string{noObject, "no probes found"}, 0},
		{"only markers", "---\n---\n", check.ExitBadInput, []string{noObject, "no probes found"}, 0},
		{"a Secret", "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\n", check.ExitBadInput,
			[]string{"document 1: skipped Secret default/creds: kind Secret holds no pod template", "no probes found"}, 0},
		{"a List: a Secret and a pod without probes", "apiVersion: v1\nkind: List\nitems:\n" + secret + "- {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app}]}}\n",
			check.ExitBadInput, []string{"document 1 items[0]: skipped Secret default/creds: kind Secret holds no pod template", "no probes found"}, 0},
		{"a List: a Secret and a probed pod", "apiVersion: v1\nkind: List\nitems:\n" + secret +
			fmt.Sprintf("- {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: app, readinessProbe: {httpGet: {path: /ok, port: %d}}}]}}\n", web),
			check.ExitOK, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := manifest(t, tc.content)
			rows, errOut, code := run(t, check.Options{File: path})
			if code != tc.code || len(rows) != tc.rows {
				t.Errorf("exit code %d, %d rows; want %d, %d; stderr %q", code, len(rows), tc.code, tc.rows, errOut)
			}
			for _, want := range tc.errOut {
				if !strings.Contains(errOut, path+": "+want+"\n") {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
			}
			if tc.rows > 0 && errOut != "" {
				t.Errorf("probes ran, yet stderr has %q, want nothing", errOut)
			}
			if strings.Contains(errOut, "hunter2") {
				t.Errorf("a Secret's value on stderr: %s", errOut)
			}
			res := check.Check(context.Background(), check.Options{File: path})
			if res.Code != tc.code || len(res.Skipped) == 0 || res.File != path {
				t.Errorf("Check: code %d, skipped %v", res.Code, res.Skipped)
			}
		})
	}
}

// TestCheck_DirectoryReadAsTheAgentReadsIt: `check -f DIR`
// reads a directory as `probed run --manifests DIR` does — the same files
// (source.ManifestFiles) and the same rule that a pod is defined once
// (source.Conflicts) —, so a pod defined in two files, or a metadata.uid
// used twice, is the agent's error, word for word, and bad input: nothing
// is probed twice. Standard input holds to the same rule.
func TestCheck_DirectoryReadAsTheAgentReadsIt(t *testing.T) {
	web := target(t)
	dir := t.TempDir()
	pod := func(name, uid string) string {
		meta := "{name: " + name + ", namespace: shop}"
		if uid != "" {
			meta = "{name: " + name + ", namespace: shop, uid: " + uid + "}"
		}
		return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: %s\nspec:\n  containers:\n  - name: app\n    image: app\n    readinessProbe:\n      httpGet: {path: /ok, port: %d}\n", meta, web)
	}
	for name, body := range map[string]string{
		"a-web.yaml":   pod("web", ""),
		"b-web.yaml":   pod("web", ""), // web again
		"c-api.yaml":   pod("api", "4c2d1f3e-0000-4000-8000-000000000001"),
		"d-other.yaml": pod("other", "4c2d1f3e-0000-4000-8000-000000000001"), // api's UID
		".hidden.yaml": pod("hidden", ""),                                    // not read by either
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src, err := source.New(source.Options{Path: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	snap := src.Scan()
	var agentErrors []string
	for _, e := range snap.Errors {
		agentErrors = append(agentErrors, e.Error())
	}
	if len(agentErrors) != 2 {
		t.Fatalf("the agent's errors %q, want the two conflicts", agentErrors)
	}
	res := check.Check(context.Background(), check.Options{File: dir})
	sort.Strings(agentErrors)
	sort.Strings(res.Errors)
	if !reflect.DeepEqual(res.Errors, agentErrors) {
		t.Errorf("check's errors\n %q\nthe agent's\n %q", res.Errors, agentErrors)
	}
	if res.Code != check.ExitBadInput || len(res.Rows) != 0 {
		t.Errorf("exit %d, rows %d: want bad input and nothing probed", res.Code, len(res.Rows))
	}
	wantFiles := []string{filepath.Join(dir, "a-web.yaml"), filepath.Join(dir, "b-web.yaml"), filepath.Join(dir, "c-api.yaml"), filepath.Join(dir, "d-other.yaml")}
	if !reflect.DeepEqual(res.Files, wantFiles) || snap.Files != len(wantFiles) {
		t.Errorf("files %q (agent: %d), want %q", res.Files, snap.Files, wantFiles)
	}
	for _, want := range []string{"b-web.yaml: document 1: pod shop/web: already defined in " + filepath.Join(dir, "a-web.yaml") + " (document 1)",
		"d-other.yaml: document 1: pod shop/other: metadata.uid: \"4c2d1f3e-0000-4000-8000-000000000001\" is already used by pod shop/api"} {
		if !strings.Contains(strings.Join(res.Errors, "\n"), want) {
			t.Errorf("errors lack %q:\n%s", want, strings.Join(res.Errors, "\n"))
		}
	}

	_, errOut, code := run(t, check.Options{File: check.Stdin, Stdin: strings.NewReader(pod("web", "") + "---\n" + pod("web", ""))})
	if code != check.ExitBadInput || !strings.Contains(errOut, "-: document 2: pod shop/web: already defined in - (document 1)") {
		t.Errorf("stdin with a pod twice: exit %d, stderr %q", code, errOut)
	}
}
