package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/probed/probed/agent/check"
	"github.com/probed/probed/agent/output"
	"github.com/probed/probed/agent/statusview"
	"github.com/probed/probed/internal/version"
)

// httpTarget serves /ok (200) and /fail (500) on 127.0.0.1 and returns
// its port.
func httpTarget(t *testing.T) int {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// podYAML is a pod with one readiness probe GETting path on port.
func podYAML(namespace, name, path string, port int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      httpGet: {path: %s, port: %d}
      periodSeconds: 1
`, name, namespace, path, port)
}

// statusDoc runs `probed status` with args and decodes its -o json or -o
// yaml document strictly (an unknown field fails).
func statusDoc(t *testing.T, f output.Format, args ...string) (*statusview.Status, string, error) {
	t.Helper()
	stdout, stderr, code := runProbed(t, nil, append([]string{"status", "-o", string(f)}, args...)...)
	if code != 0 {
		return nil, stdout, fmt.Errorf("exit %d: %s", code, stderr)
	}
	var st statusview.Status
	var err error
	if f == output.YAML {
		err = yaml.UnmarshalStrict([]byte(stdout), &st)
	} else {
		dec := json.NewDecoder(strings.NewReader(stdout))
		dec.DisallowUnknownFields()
		err = dec.Decode(&st)
	}
	if err != nil {
		return nil, stdout, fmt.Errorf("-o %s: %v", f, err)
	}
	return &st, stdout, nil
}

func statusPod(st *statusview.Status, namespace, name string) *statusview.Pod {
	for i := range st.Pods {
		if st.Pods[i].Namespace == namespace && st.Pods[i].Name == name {
			return &st.Pods[i]
		}
	}
	return nil
}

// TestStatusOutputFormats runs `probed status` against a running `probed
// run` (pods in two namespaces, one failing; a manifest file that does not
// decode): -o json is a ProbedStatus document with each pod's readiness,
// probes and last failure, reached with --server host:port (no scheme);
// -o yaml decodes to the same document; -n keeps one namespace; -o wide
// adds IP and PROBES; the rejected manifest is listed under the table and
// in the document when the agent serves GET /manifests (an agent without
// it: no section, no error); a bad --server or -o is exit 2 naming the
// flag.
func TestStatusOutputFormats(t *testing.T) {
	t.Parallel()
	port := httpTarget(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "pods.yaml"), podYAML("one", "healthy", "/ok", port)+"---\n"+podYAML("two", "unready", "/fail", port))
	writeFile(t, filepath.Join(dir, "broken.yaml"), podYAML("two", "broken", "/ok", port)+"    bogusField: 1\n")
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	p := startProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--log-format", "json")
	waitAPI(t, p, "http://"+listen, true)

	var st *statusview.Status
	eventually(t, p, 20*time.Second, "status -o json shows the ready pod and the failure", func() (bool, string) {
		var out string
		var err error
		st, out, err = statusDoc(t, output.JSON, "--server", listen) // no scheme
		if err != nil {
			return false, err.Error() + "\n" + out
		}
		h, u := statusPod(st, "one", "healthy"), statusPod(st, "two", "unready")
		return h != nil && h.Ready && u != nil && u.LastFailure != nil, out
	})
	if st.Kind != statusview.StatusKind || st.APIVersion != output.APIVersion || st.Server != "http://"+listen || len(st.Pods) != 2 {
		t.Errorf("document: kind %q apiVersion %q server %q, %d pods", st.Kind, st.APIVersion, st.Server, len(st.Pods))
	}
	h := statusPod(st, "one", "healthy")
	if h.Phase != "Running" || h.Status != "Running" || h.ReadyContainers != 1 || h.Containers != 1 || h.StartTime == nil || h.UID == "" {
		t.Errorf("healthy pod %+v", *h)
	}
	if len(h.Probes) != 1 || h.Probes[0].Container != "app" || h.Probes[0].Type != "readiness" || h.Probes[0].Handler != "http" || h.Probes[0].LastResult != "success" {
		t.Errorf("healthy pod's probes %+v", h.Probes)
	}
	u := statusPod(st, "two", "unready")
	if u.Ready || u.Status != "Running" || u.LastFailure.Container != "app" || u.LastFailure.Type != "readiness" ||
		u.LastFailure.Result != "failure" || !strings.Contains(u.LastFailure.Message, "statuscode: 500") {
		t.Errorf("unready pod %+v, last failure %+v", *u, *u.LastFailure)
	}

	// GET /manifests: broken.yaml's document is rejected, naming the field.
	if m := st.Manifests; m == nil || m.Kind != "ManifestReport" || len(m.Rejected) != 1 || m.Rejected[0].File != filepath.Join(dir, "broken.yaml") ||
		m.Rejected[0].Pod != "two/broken" || !strings.Contains(m.Rejected[0].Error, "bogusField") || m.Rejected[0].Stale {
		t.Errorf("manifests %+v, want broken.yaml rejected", st.Manifests)
	}

	ys, out, err := statusDoc(t, output.YAML, "-s", "http://"+listen)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !reflect.DeepEqual(names(ys), names(st)) || ys.Kind != st.Kind || !reflect.DeepEqual(ys.Manifests, st.Manifests) {
		t.Errorf("-o yaml: pods %v manifests %+v; -o json: pods %v manifests %+v", names(ys), ys.Manifests, names(st), st.Manifests)
	}

	ns, out, err := statusDoc(t, output.JSON, "-s", listen, "-n", "two")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := names(ns); !reflect.DeepEqual(got, []string{"two/unready"}) || ns.Namespace != "two" {
		t.Errorf("-n two: pods %v namespace %q", got, ns.Namespace)
	}
	if one, out, err := statusDoc(t, output.JSON, "-s", listen, "-n", "one"); err != nil || len(one.Manifests.Rejected) != 0 {
		t.Errorf("-n one: the rejected document of namespace two is listed (%v):\n%s", err, out)
	}

	stdout, stderr, code := runProbed(t, nil, "status", "-s", listen, "-o", "wide")
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if code != 0 || strings.Join(strings.Fields(lines[0]), " ") != "NAMESPACE NAME READY STARTED RESTARTS STATUS AGE IP PROBES LAST FAILURE" {
		t.Fatalf("-o wide: exit %d %s\n%s", code, stderr, stdout)
	}
	if !strings.Contains(stdout, "app/readiness=success") || !strings.Contains(stdout, "app/readiness=failure") {
		t.Errorf("-o wide lacks the probes' results:\n%s", stdout)
	}
	if !strings.Contains(stdout, "\nREJECTED MANIFESTS (1)\n") || !strings.Contains(stdout, filepath.Join(dir, "broken.yaml")) {
		t.Errorf("-o wide lacks the rejected manifest with its path:\n%s", stdout)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-s", "ftp://" + listen}, `--server "ftp://` + listen + `": scheme "ftp"`},
		{[]string{"-s", listen, "-o", "xml"}, `-o/--output "xml": want table, wide, json or yaml`},
	} {
		_, stderr, code := runProbed(t, nil, append([]string{"status"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("status %v: exit %d, stderr %q, want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

// TestRunManifestsFile: `probed run --manifests FILE` probes the pods of
// that one file, as the kubelet's --pod-manifest-path takes a file; the
// other manifests of its directory are not read.
func TestRunManifestsFile(t *testing.T) {
	t.Parallel()
	port := httpTarget(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "only.yaml")
	writeFile(t, file, podYAML("one", "listed", "/ok", port))
	writeFile(t, filepath.Join(dir, "other.yaml"), podYAML("one", "unlisted", "/ok", port))
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	p := startProbed(t, nil, "run", "--manifests", file, "--listen", listen, "--log-format", "json")
	waitAPI(t, p, "http://"+listen, true)
	eventually(t, p, 20*time.Second, "the file's pod is ready", func() (bool, string) {
		st, out, err := statusDoc(t, output.JSON, "-s", listen)
		if err != nil {
			return false, err.Error()
		}
		pod := statusPod(st, "one", "listed")
		return pod != nil && pod.Ready && len(st.Pods) == 1, out
	})
	st, out, err := statusDoc(t, output.JSON, "-s", listen)
	if err != nil || len(st.Pods) != 1 || st.Manifests == nil || st.Manifests.Path != file || st.Manifests.Files != 1 {
		t.Errorf("status: %v\n%s", err, out)
	}
}

func names(st *statusview.Status) []string {
	var out []string
	for _, p := range st.Pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// TestCheckDirectoryStdinAndDocuments runs `probed check`: -f DIR reads
// every manifest file of the directory (as `probed run --manifests` does,
// other files ignored) and -o json reports each probe with its file and
// the exit code; -n keeps one namespace; -f - reads the manifest from
// stdin (table, and -o yaml).
func TestCheckDirectoryStdinAndDocuments(t *testing.T) {
	t.Parallel()
	port := httpTarget(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.json")
	writeFile(t, a, podYAML("one", "good", "/ok", port))
	bJSON, err := yaml.YAMLToJSON([]byte(podYAML("two", "bad", "/fail", port)))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, b, string(bJSON))
	writeFile(t, filepath.Join(dir, "notes.txt"), "not a manifest")

	stdout, stderr, code := runProbed(t, nil, "check", "-f", dir, "-o", "json")
	var rep check.Report
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("check -o json: %v\n%s\nstderr: %s", err, stdout, stderr)
	}
	if code != 1 || rep.ExitCode != 1 || !reflect.DeepEqual(rep.Files, []string{a, b}) || len(rep.Probes) != 2 {
		t.Fatalf("check -f DIR -o json: exit %d, document %+v", code, rep)
	}
	if g := rep.Probes[0]; g.File != a || g.Namespace != "one" || g.Pod != "good" || g.Result != "success" || g.Message != "HTTP 200" {
		t.Errorf("probe 0 %+v", g)
	}
	if f := rep.Probes[1]; f.File != b || f.Pod != "bad" || f.Result != "failure" || !strings.Contains(f.Message, "statuscode: 500") {
		t.Errorf("probe 1 %+v", f)
	}

	stdout, stderr, code = runProbed(t, nil, "check", "-f", dir, "-n", "one")
	rows := parseTable(t, stdout)
	if code != 0 || len(rows) != 1 || rows[0].Pod != "one/good" || rows[0].Result != "success" {
		t.Errorf("check -f DIR -n one: exit %d rows %v stderr %s", code, rows, stderr)
	}

	stdin := func(args ...string) (string, string, int) {
		cmd := exec.Command(checkBin, append([]string{"check", "-f", "-"}, args...)...)
		cmd.Stdin = strings.NewReader(podYAML("piped", "web", "/ok", port))
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		cmd.WaitDelay = 5 * time.Second
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return out.String(), errOut.String(), exitCode(err)
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("check -f - did not finish")
		}
		return "", "", -1
	}
	stdout, stderr, code = stdin()
	rows = parseTable(t, stdout)
	if code != 0 || len(rows) != 1 || rows[0].Pod != "piped/web" || rows[0].Result != "success" {
		t.Errorf("check -f -: exit %d rows %v stderr %s", code, rows, stderr)
	}
	stdout, _, code = stdin("-o", "yaml")
	var yrep check.Report
	if err := yaml.UnmarshalStrict([]byte(stdout), &yrep); err != nil || code != 0 {
		t.Fatalf("check -f - -o yaml: exit %d %v\n%s", code, err, stdout)
	}
	if !reflect.DeepEqual(yrep.Files, []string{"-"}) || len(yrep.Probes) != 1 || yrep.Probes[0].File != "-" || yrep.Probes[0].Result != "success" {
		t.Errorf("check -f - -o yaml: %+v", yrep)
	}
}

// TestPluginHandshakeVersion: the plugin host learns each plugin's version
// in the handshake (GetInfo) and logs it when the plugin starts: with
// `probed plugin serve tcp` as the plugin it is the binary's own version,
// as `probed version -o json` prints it.
func TestPluginHandshakeVersion(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(checkBin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var info version.Info
	if err := json.Unmarshal(out, &info); err != nil || info.Version == "" {
		t.Fatalf("version -o json: %v %q", err, out)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good.yaml"), fmt.Sprintf(plainPod, "good"))
	cfg := filepath.Join(t.TempDir(), "plugins.json")
	b, _ := json.Marshal(map[string]any{"plugins": []any{map[string]any{"name": "tcp", "path": checkBin, "args": []string{"plugin", "serve", "tcp"}}}})
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t))
	_, stderr, code := runProbed(t, nil, "run", "--manifests", dir, "--listen", listen, "--log-format", "json", "--for", "2s", "--plugin-config", cfg)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, tail(stderr, 20))
	}
	for _, line := range strings.Split(stderr, "\n") {
		var l logLine
		if json.Unmarshal([]byte(line), &l) == nil && l.str("msg") == "plugin started" {
			if l.str("plugin") != "tcp" || l.str("version") != info.Version {
				t.Errorf("plugin started: %s, want plugin tcp version %q", line, info.Version)
			}
			return
		}
	}
	t.Errorf("no \"plugin started\" line:\n%s", tail(stderr, 20))
}
