package source_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/internal/testlog"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

func newSource(t *testing.T, dir string, logs *testlog.Buffer) *source.Source {
	t.Helper()
	if logs == nil {
		logs = &testlog.Buffer{}
	}
	s, err := source.New(source.Options{Path: dir, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Rescan: time.Hour, Debounce: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// podYAML is a valid pod manifest; extra is appended to the container.
func podYAML(name, port string, extra ...string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  containers:
  - name: app
    image: example/app
    readinessProbe:
      tcpSocket: {port: %s}
%s`, name, port, strings.Join(extra, "\n"))
}

func podJSON(name string, port int) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":"ns2"},
"spec":{"containers":[{"name":"app","image":"example/app","livenessProbe":{"httpGet":{"port":%d}}}]}}`, name, port)
}

// byName indexes a snapshot's pods by namespace/name.
func byName(snap source.Snapshot) map[string]*source.Pod {
	out := map[string]*source.Pod{}
	for _, p := range snap.Pods {
		out[p.Pod.Namespace+"/"+p.Pod.Name] = p
	}
	return out
}

func errorsText(snap source.Snapshot) string {
	var b strings.Builder
	for _, err := range snap.Errors {
		b.WriteString(err.Error())
		b.WriteString("\n")
	}
	return b.String()
}

// TestScan_YAMLAndJSONFiles: every .yaml, .yml and .json file is read;
// a file may hold several documents; pods are defaulted (namespace
// "default", probe defaults) and get a UID; each pod names its file.
func TestScan_YAMLAndJSONFiles(t *testing.T) {
	dir := t.TempDir()
	pa := write(t, dir, "a.yaml", podYAML("alpha", "8080"))
	pb := write(t, dir, "b.json", podJSON("beta", 8081))
	pc := write(t, dir, "c.yml", podYAML("gamma", "8082")+"---\n"+podYAML("delta", "8083"))
	snap := newSource(t, dir, nil).Scan()
	if len(snap.Errors) != 0 {
		t.Fatalf("errors: %s", errorsText(snap))
	}
	if snap.Files != 3 {
		t.Errorf("Files = %d, want 3", snap.Files)
	}
	pods := byName(snap)
	for name, file := range map[string]string{"default/alpha": pa, "ns2/beta": pb, "default/gamma": pc, "default/delta": pc} {
		p, ok := pods[name]
		if !ok {
			t.Errorf("pod %s missing; have %v", name, pods)
			continue
		}
		if p.Source != file {
			t.Errorf("%s: Source = %q, want %q", name, p.Source, file)
		}
		if p.Pod.UID == "" || snap.Pods[p.Pod.UID] != p {
			t.Errorf("%s: UID %q not the snapshot key", name, p.Pod.UID)
		}
	}
	if len(snap.Pods) != 4 {
		t.Errorf("%d pods, want 4", len(snap.Pods))
	}
	if d := pods["default/delta"]; d != nil && d.Doc != 2 {
		t.Errorf("delta Doc = %d, want 2", d.Doc)
	}
	if b := pods["ns2/beta"]; b != nil {
		p := b.Pod.Spec.Containers[0].LivenessProbe
		if p.PeriodSeconds != 10 || p.TimeoutSeconds != 1 || p.FailureThreshold != 3 || p.HTTPGet.Path != "/" {
			t.Errorf("probe not defaulted: %+v", p)
		}
	}
}

// TestScan_BrokenFileReportedOthersLoad: a file that does not decode is
// reported with its name (once in the log, however often it is scanned)
// while the other files load; once fixed it is picked up by the next Scan.
func TestScan_BrokenFileReportedOthersLoad(t *testing.T) {
	dir := t.TempDir()
	logs := &testlog.Buffer{}
	s := newSource(t, dir, logs)
	write(t, dir, "a-good.yaml", podYAML("good", "8080"))
	bad := write(t, dir, "b-bad.yaml", podYAML("bad", "8080", "    livenessProbe:\n      tcpSocket: {port: 8080}\n      successThreshold: 2"))
	syntax := write(t, dir, "c-syntax.json", `{"apiVersion": "v1", "kind": "Pod",`)
	write(t, dir, "d-good.json", podJSON("good2", 9000))
	snap := s.Scan()
	pods := byName(snap)
	if pods["default/good"] == nil || pods["ns2/good2"] == nil || len(snap.Pods) != 2 {
		t.Errorf("pods = %v, want good and good2", pods)
	}
	if len(snap.Errors) != 2 {
		t.Fatalf("errors = %q, want 2", errorsText(snap))
	}
	if msg := snap.Errors[0].Error(); !strings.Contains(msg, bad) || !strings.Contains(msg, "successThreshold") {
		t.Errorf("error %q does not name %s and the field", msg, bad)
	}
	if msg := snap.Errors[1].Error(); !strings.Contains(msg, syntax) {
		t.Errorf("error %q does not name %s", msg, syntax)
	}
	s.Scan()
	if n := logs.Count("manifest rejected"); n != 2 {
		t.Errorf("%d rejection log lines after two scans, want 2 (one per error)", n)
	}

	write(t, dir, "b-bad.yaml", podYAML("bad", "8080"))
	snap = s.Scan()
	if byName(snap)["default/bad"] == nil || len(snap.Errors) != 1 {
		t.Errorf("fixed file not picked up: pods %v, errors %q", byName(snap), errorsText(snap))
	}
}

// TestScan_RemovedFileRemovesItsPods: a removed file's pods are gone from
// the next snapshot.
func TestScan_RemovedFileRemovesItsPods(t *testing.T) {
	dir := t.TempDir()
	s := newSource(t, dir, nil)
	write(t, dir, "a.yaml", podYAML("a", "8080"))
	pb := write(t, dir, "b.yaml", podYAML("b1", "8080")+"---\n"+podYAML("b2", "8080"))
	if n := len(s.Scan().Pods); n != 3 {
		t.Fatalf("%d pods, want 3", n)
	}
	if err := os.Remove(pb); err != nil {
		t.Fatal(err)
	}
	snap := s.Scan()
	if pods := byName(snap); len(pods) != 1 || pods["default/a"] == nil || snap.Files != 1 {
		t.Errorf("after removal: pods %v, files %d", pods, snap.Files)
	}
}

// TestScan_DuplicatePodNameFirstFileWins: the same namespace/name in two
// files: the lexically first file's pod is kept and the error names both
// files; a same name in another namespace is no conflict.
func TestScan_DuplicatePodNameFirstFileWins(t *testing.T) {
	dir := t.TempDir()
	first := write(t, dir, "10-first.yaml", podYAML("web", "8080"))
	second := write(t, dir, "20-second.yaml", podYAML("web", "9090"))
	write(t, dir, "30-other-ns.json", strings.Replace(podJSON("web", 7070), `"ns2"`, `"other"`, 1))
	snap := newSource(t, dir, nil).Scan()
	pods := byName(snap)
	web := pods["default/web"]
	if web == nil || web.Source != first || web.Pod.Spec.Containers[0].ReadinessProbe.TCPSocket.Port.IntValue() != 8080 {
		t.Fatalf("default/web = %+v, want the pod of %s", web, first)
	}
	if pods["other/web"] == nil {
		t.Error("other/web missing")
	}
	if len(snap.Errors) != 1 {
		t.Fatalf("errors = %q, want 1", errorsText(snap))
	}
	if msg := snap.Errors[0].Error(); !strings.Contains(msg, first) || !strings.Contains(msg, second) || !strings.Contains(msg, "default/web") {
		t.Errorf("error %q does not name both files and the pod", msg)
	}
}

// TestScan_DuplicateUID: two pods with the same metadata.uid: the first is
// kept, the error names both files.
func TestScan_DuplicateUID(t *testing.T) {
	dir := t.TempDir()
	uid := "  uid: 11111111-2222-3333-4444-555555555555\n"
	first := write(t, dir, "a.yaml", strings.Replace(podYAML("one", "8080"), "  name: one\n", "  name: one\n"+uid, 1))
	second := write(t, dir, "b.yaml", strings.Replace(podYAML("two", "8080"), "  name: two\n", "  name: two\n"+uid, 1))
	snap := newSource(t, dir, nil).Scan()
	p := snap.Pods[types.UID("11111111-2222-3333-4444-555555555555")]
	if len(snap.Pods) != 1 || p == nil || p.Pod.Name != "one" {
		t.Fatalf("pods = %v, want only one (uid kept as given)", byName(snap))
	}
	if len(snap.Errors) != 1 {
		t.Fatalf("errors = %q, want 1", errorsText(snap))
	}
	if msg := snap.Errors[0].Error(); !strings.Contains(msg, first) || !strings.Contains(msg, second) || !strings.Contains(msg, "metadata.uid") {
		t.Errorf("error %q does not name both files", msg)
	}
}

// TestScan_UIDFollowsTheSpec: a pod without metadata.uid keeps its UID
// while its spec is unchanged (also across Source instances, i.e. agent
// restarts, and when only its status changes) and gets a new UID when the
// spec changes, as the kubelet does for static pods.
func TestScan_UIDFollowsTheSpec(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p.yaml", podYAML("web", "8080"))
	s := newSource(t, dir, nil)
	p1 := byName(s.Scan())["default/web"]
	p2 := byName(newSource(t, dir, nil).Scan())["default/web"]
	if p1 == nil || p2 == nil || p1.Pod.UID != p2.Pod.UID {
		t.Fatalf("UID not stable: %v vs %v", p1, p2)
	}
	// Only the status changes: same UID, new status hash.
	write(t, dir, "p.yaml", podYAML("web", "8080")+"status:\n  podIP: 10.0.0.7\n")
	p3 := byName(s.Scan())["default/web"]
	if p3 == nil || p3.Pod.UID != p1.Pod.UID || p3.SpecHash != p1.SpecHash || p3.StatusHash == p1.StatusHash {
		t.Errorf("status change: %+v, want same UID and spec hash, new status hash", p3)
	}
	if p3 != nil && p3.Pod.Status.PodIP != "10.0.0.7" {
		t.Errorf("status not kept: %+v", p3.Pod.Status)
	}
	// Comments and formatting only: same UID.
	write(t, dir, "p.yaml", "# a comment\n"+podYAML("web", "8080"))
	if p := byName(s.Scan())["default/web"]; p == nil || p.Pod.UID != p1.Pod.UID {
		t.Errorf("UID changed by a comment")
	}
	// The spec changes: a new pod.
	write(t, dir, "p.yaml", podYAML("web", "9090"))
	p4 := byName(s.Scan())["default/web"]
	if p4 == nil || p4.Pod.UID == p1.Pod.UID || p4.SpecHash == p1.SpecHash {
		t.Errorf("spec change kept the UID %s", p1.Pod.UID)
	}
}

// TestScan_NonManifestFilesIgnored: only *.yaml, *.yml and *.json at the top
// level are read: other extensions, hidden files, editor backups and
// subdirectories are ignored.
func TestScan_NonManifestFilesIgnored(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "pod.yaml", podYAML("real", "8080"))
	write(t, dir, "UPPER.YAML", podYAML("upper", "8080"))
	for _, name := range []string{"README.md", "notes.txt", ".hidden.yaml", "pod.yaml~", "pod.yaml.bak", ".#pod.yaml"} {
		write(t, dir, name, podYAML("ignored-"+strings.Trim(strings.ReplaceAll(name, ".", "-"), "-#~"), "8080")+"\n  : : not yaml")
	}
	sub := filepath.Join(dir, "sub.yaml")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, sub, "nested.yaml", podYAML("nested", "8080"))
	snap := newSource(t, dir, nil).Scan()
	pods := byName(snap)
	if len(snap.Errors) != 0 || len(pods) != 2 || pods["default/real"] == nil || pods["default/upper"] == nil || snap.Files != 2 {
		t.Errorf("pods %v, files %d, errors %q; want real and upper only", pods, snap.Files, errorsText(snap))
	}
	for _, name := range []string{"x.yaml", "x.YML", "x.Json"} {
		if !source.IsManifest(name) {
			t.Errorf("IsManifest(%q) = false", name)
		}
	}
}

// TestWatch_DeliversSnapshotAfterWrite: Watch applies a new snapshot shortly
// (Debounce) after a file is written, changed or removed, and returns nil
// when its context ends.
func TestWatch_DeliversSnapshotAfterWrite(t *testing.T) {
	dir := t.TempDir()
	wait := watchSnapshots(t, newSource(t, dir, nil))
	// Give the watcher a moment to register the directory; a write before
	// that must still be seen (the first snapshot after the watch starts).
	write(t, dir, "a.yaml", podYAML("a", "8080"))
	wait("pod a", func(p map[string]*source.Pod) bool { return p["default/a"] != nil })
	write(t, dir, "b.json", podJSON("b", 8081))
	wait("pod b", func(p map[string]*source.Pod) bool { return p["ns2/b"] != nil && p["default/a"] != nil })
	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	wait("a removed", func(p map[string]*source.Pod) bool { return p["default/a"] == nil && p["ns2/b"] != nil })
	// An atomic replace (write elsewhere, rename over) is seen as well.
	tmp := filepath.Join(t.TempDir(), "b.json")
	if err := os.WriteFile(tmp, []byte(podJSON("b-renamed", 8081)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "b.json")); err != nil {
		t.Fatal(err)
	}
	wait("b replaced", func(p map[string]*source.Pod) bool { return p["ns2/b-renamed"] != nil && p["ns2/b"] == nil })
}

// watchSnapshots runs s.Watch until the test ends (then it must return nil
// within 5 s) and returns a wait that reads its snapshots until one whose
// pods, by namespace/name, satisfy ok (at most 5 s; what names it).
func watchSnapshots(t *testing.T, s *source.Source) (wait func(what string, ok func(map[string]*source.Pod) bool)) {
	t.Helper()
	snaps := make(chan source.Snapshot, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, func(snap source.Snapshot) { snaps <- snap }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch returned %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return after cancel")
		}
	})
	return func(what string, ok func(map[string]*source.Pod) bool) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case snap := <-snaps:
				if ok(byName(snap)) {
					return
				}
			case <-deadline:
				t.Fatalf("no snapshot with %s", what)
			}
		}
	}
}

// TestScan_NoPodSaysItWaits: a scan that finds no pod logs
// once that the agent waits for manifests, and where; not again while it
// stays empty; again when the pods are gone after some were there.
func TestScan_NoPodSaysItWaits(t *testing.T) {
	dir := t.TempDir()
	logs := &testlog.Buffer{}
	s := newSource(t, dir, logs)
	const line = "no pod to probe: waiting for manifests in the manifest directory"
	s.Scan()
	s.Scan()
	if n := logs.Count(line); n != 1 || logs.Count("path="+dir) != 1 {
		t.Fatalf("empty directory: %d lines, want 1 naming %s:\n%s", n, dir, logs.String())
	}
	path := write(t, dir, "web.yaml", podYAML("web", "8080"))
	if snap := s.Scan(); len(snap.Pods) != 1 || logs.Count(line) != 1 {
		t.Fatalf("a pod: %d pods, %d lines", len(snap.Pods), logs.Count(line))
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s.Scan()
	if n := logs.Count(line); n != 2 {
		t.Errorf("emptied again: %d lines, want 2", n)
	}
}
