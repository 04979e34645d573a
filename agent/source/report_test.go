package source_test

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/manifest"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/internal/testlog"
)

var t0 = time.Date(2026, 12, 1, 23, 50, 0, 0, time.UTC)

func reportSource(t *testing.T, path string, logs *testlog.Buffer, clk *clocktesting.FakePassiveClock, reg prometheus.Registerer) *source.Source {
	t.Helper()
	if logs == nil {
		logs = &testlog.Buffer{}
	}
	var c clock.PassiveClock = clock.RealClock{}
	if clk != nil {
		c = clk
	}
	s, err := source.New(source.Options{Path: path, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Rescan: time.Hour, Debounce: 20 * time.Millisecond, Clock: c, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestScan_InvalidatedPodStaysStaleUntilFixedOrDeleted: a pod
// whose file turns invalid is delivered again at its last valid version
// (same UID and spec, so its probes go on), marked stale with the error;
// the report says stale, since when; fixing the file clears it and the new
// version replaces it; deleting the file removes the pod. A document of the
// same file that stays valid is unaffected.
func TestScan_InvalidatedPodStaysStaleUntilFixedOrDeleted(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakePassiveClock(t0)
	logs := &testlog.Buffer{}
	s := reportSource(t, dir, logs, clk, nil)
	path := write(t, dir, "web.yaml", podYAML("web", "8080")+"---\n"+podYAML("other", "8081"))
	snap := s.Scan()
	web := byName(snap)["default/web"]
	if web == nil || web.Stale != nil || len(snap.Report.Rejected) != 0 {
		t.Fatalf("valid file: %+v, report %+v", byName(snap), snap.Report)
	}

	// A typo in the first document: an unknown field.
	clk.SetTime(t0.Add(time.Minute))
	write(t, dir, "web.yaml", podYAML("web", "8080", "    readinesProbe: {}\n")+"---\n"+podYAML("other", "8081"))
	for i := 0; i < 2; i++ { // the error and its since hold over scans
		clk.SetTime(t0.Add(time.Duration(i+1) * time.Minute))
		snap = s.Scan()
		got := byName(snap)["default/web"]
		if got == nil || got.Stale == nil || got.Pod.UID != web.Pod.UID || got.SpecHash != web.SpecHash {
			t.Logf("errors %s", errorsText(snap))
			t.Fatalf("scan %d after the typo: web %+v, want the last valid version, stale", i, got)
		}
		if !strings.Contains(got.Stale.Error, `unknown field "readinesProbe"`) || !got.Stale.Since.Equal(t0.Add(time.Minute)) {
			t.Errorf("stale %+v", got.Stale)
		}
		if o := byName(snap)["default/other"]; o == nil || o.Stale != nil {
			t.Errorf("the valid document's pod: %+v", o)
		}
		rej := snap.Report.Rejected
		if len(rej) != 1 || rej[0].File != path || rej[0].Document != 1 || rej[0].Pod != "default/web" || !rej[0].Stale ||
			!rej[0].Since.Equal(t0.Add(time.Minute)) || rej[0].Line != 11 { // the line of readinesProbe
			t.Errorf("scan %d: rejected %+v", i, rej)
		}
		if st := got.Stale; st.Field != "spec.containers[0].readinesProbe" || !strings.HasPrefix(st.Detail, `unknown field "readinesProbe"`) {
			t.Errorf("scan %d: stale field %q, detail %q", i, st.Field, st.Detail)
		}
	}
	if n := logs.Count("still probing the pod's last valid version"); n != 1 {
		t.Errorf("stale logged %d times, want once", n)
	}

	// A YAML syntax error (the pod's name still readable) keeps it stale too.
	write(t, dir, "web.yaml", podYAML("web", "8080", "    image: [unclosed\n")+"---\n"+podYAML("other", "8081"))
	snap = s.Scan()
	if got := byName(snap)["default/web"]; got == nil || got.Stale == nil || got.Pod.UID != web.Pod.UID {
		t.Fatalf("after a syntax error: %+v", got)
	}
	if rej := snap.Report.Rejected; len(rej) != 1 || !rej[0].Stale || rej[0].Line != 11 || !strings.Contains(rej[0].Error, "invalid YAML: line 11") {
		t.Errorf("syntax error rejected %+v", rej)
	}

	// Fixed, with a change: the new version, not stale.
	write(t, dir, "web.yaml", podYAML("web", "9090")+"---\n"+podYAML("other", "8081"))
	snap = s.Scan()
	if got := byName(snap)["default/web"]; got == nil || got.Stale != nil || got.Pod.UID == web.Pod.UID || len(snap.Report.Rejected) != 0 {
		t.Fatalf("fixed: %+v, report %+v", got, snap.Report)
	}

	// Broken again, then deleted: gone.
	write(t, dir, "web.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: web\n")
	if got := byName(s.Scan())["default/web"]; got == nil || got.Stale == nil {
		t.Fatalf("broken again: %+v", got)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	snap = s.Scan()
	if len(snap.Pods) != 0 || len(snap.Report.Rejected) != 0 {
		t.Errorf("deleted: pods %v, report %+v", byName(snap), snap.Report)
	}
}

// TestScan_UnreadableFileKeepsPodsStale: a file replaced by something that
// cannot be read (over the size limit, a FIFO) keeps its pods stale with
// the whole-file error; a pod never valid is not made up.
func TestScan_UnreadableFileKeepsPodsStale(t *testing.T) {
	dir := t.TempDir()
	content := podYAML("web", "8080")
	s, err := source.New(source.Options{Path: dir, Logger: slog.New(slog.NewTextHandler(&testlog.Buffer{}, nil)),
		Manifest: manifest.Options{MaxFileBytes: int64(len(content) + 10)}})
	if err != nil {
		t.Fatal(err)
	}
	path := write(t, dir, "web.yaml", content)
	uid := byName(s.Scan())["default/web"].Pod.UID
	write(t, dir, "web.yaml", content+strings.Repeat("#", 100))
	snap := s.Scan()
	got := byName(snap)["default/web"]
	if got == nil || got.Pod.UID != uid || got.Stale == nil || !strings.Contains(got.Stale.Error, "more than the limit") {
		t.Fatalf("oversized: %+v", got)
	}
	if rej := snap.Report.Rejected; len(rej) != 1 || rej[0].Document != 0 || !rej[0].Stale || rej[0].Pod != "default/web" || rej[0].File != path {
		t.Errorf("rejected %+v", rej)
	}
}

// TestReport_JSONShape: the report's JSON is the documented contract
// (docs/operations.md, GET /manifests): kind, source, path, files, rejected
// oldest first with file, document, line, pod, error, since, stale, and
// skipped with file, document, kind, reason; empty lists are [], not null.
func TestReport_JSONShape(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakePassiveClock(t0)
	s := reportSource(t, dir, nil, clk, nil)
	empty, _ := json.Marshal(s.Scan().Report)
	want := `{"kind":"ManifestReport","source":"directory","path":"` + dir + `","files":0,"rejected":[],"skipped":[]}`
	if string(empty) != want {
		t.Errorf("empty report\n got %s\nwant %s", empty, want)
	}
	write(t, dir, "b.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: app, readinessProbe: {tcpSocket: {port: 0}}}]}\n")
	s.Scan()
	clk.SetTime(t0.Add(90 * time.Second))
	write(t, dir, "a.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\nstringData: {password: hunter2}\n---\n# nothing\n---\nkind: Pod\nmetadata: {name: a\n")
	got, _ := json.Marshal(s.Scan().Report)
	var r source.Report
	if err := json.Unmarshal(got, &r); err != nil {
		t.Fatal(err)
	}
	if r.Files != 2 || len(r.Rejected) != 2 || len(r.Skipped) != 1 {
		t.Fatalf("report %s", got)
	}
	// b.yaml's error is older: first, although a.yaml sorts first.
	if r.Rejected[0].File != filepath.Join(dir, "b.yaml") || !r.Rejected[0].Since.Equal(t0) || r.Rejected[0].Pod != "default/b" || r.Rejected[0].Stale {
		t.Errorf("first rejected %+v", r.Rejected[0])
	}
	// The field and what is wrong with it, apart (what
	// `probed status` shows), and together in the message.
	if b := r.Rejected[0]; b.Field != "spec.containers[0].readinessProbe.tcpSocket.port" || !strings.HasPrefix(b.Detail, "Invalid value: 0") ||
		!strings.HasSuffix(b.Error, ": "+b.Field+": "+b.Detail) {
		t.Errorf("first rejected: field %q, detail %q, error %q", b.Field, b.Detail, b.Error)
	}
	if a := r.Rejected[1]; a.Field != "" || !strings.HasPrefix(a.Detail, "invalid YAML: line 9") {
		t.Errorf("a YAML error: field %q, detail %q", a.Field, a.Detail)
	}
	if a := r.Rejected[1]; a.File != filepath.Join(dir, "a.yaml") || a.Document != 3 || a.Line != 9 || a.Pod != "default/a" || !a.Since.Equal(t0.Add(90*time.Second)) {
		t.Errorf("second rejected %+v", a)
	}
	if sk := r.Skipped[0]; sk != (source.SkippedDocument{File: filepath.Join(dir, "a.yaml"), Document: 1, Kind: "Secret", Reason: "kind Secret holds no pod template"}) {
		t.Errorf("skipped %+v", sk)
	}
	for _, key := range []string{`"file":`, `"document":`, `"line":`, `"pod":`, `"error":`, `"since":"2026-12-01T23:50:00Z"`, `"stale":false`, `"kind":"Secret"`, `"reason":`} {
		if !strings.Contains(string(got), key) {
			t.Errorf("report lacks %s: %s", key, got)
		}
	}
	if strings.Contains(string(got), "hunter2") {
		t.Errorf("the Secret's data in the report: %s", got)
	}
}

// TestScan_FilesWithoutPodsAreReported: files that yield no pod (empty,
// only comments, only `---`, a Secret, a List with a Secret and a Pod) are
// in the report's skipped list with why, and logged once per file version.
func TestScan_FilesWithoutPodsAreReported(t *testing.T) {
	dir := t.TempDir()
	logs := &testlog.Buffer{}
	s := reportSource(t, dir, logs, nil, nil)
	write(t, dir, "a-empty.yaml", "")
	write(t, dir, "b-comments.yaml", "# just a comment\n\n# and another\n")
	write(t, dir, "c-markers.yaml", "---\n---\n")
	write(t, dir, "d-secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {}\n")
	write(t, dir, "e-list.yaml", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: s2}}\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n  spec: {containers: [{name: app, readinessProbe: {tcpSocket: {port: 80}}}]}\n")
	snap := s.Scan()
	if len(snap.Pods) != 1 || byName(snap)["default/p"] == nil || len(snap.Errors) != 0 || snap.Report.Files != 5 {
		t.Fatalf("pods %v errors %q files %d", byName(snap), errorsText(snap), snap.Report.Files)
	}
	var got []string
	for _, sk := range snap.Report.Skipped {
		got = append(got, filepath.Base(sk.File)+"#"+itoa(sk.Document)+" "+sk.Kind+": "+sk.Reason)
	}
	noObject := "the file holds no object: it is empty, or has only comments, blank lines and --- markers"
	want := []string{
		"a-empty.yaml#0 : " + noObject,
		"b-comments.yaml#0 : " + noObject,
		"c-markers.yaml#0 : " + noObject,
		"d-secret.yaml#1 Secret: kind Secret holds no pod template",
		"e-list.yaml#1 Secret: kind Secret holds no pod template",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("skipped\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
	s.Scan()
	if n, m := logs.Count("manifest holds no pod"), logs.Count("manifest document skipped"); n != 3 || m != 2 {
		t.Errorf("after two scans: %d 'holds no pod' and %d 'document skipped' lines, want 3 and 2 (once per file version)", n, m)
	}
	write(t, dir, "d-secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {k: dg==}\n")
	s.Scan()
	if m := logs.Count("manifest document skipped"); m != 3 {
		t.Errorf("a new version of the Secret's file: %d lines, want 3", m)
	}
}

// TestGauge_DocumentsRejected: probed_manifest_documents_rejected is the
// number of rejections of the last scan.
func TestGauge_DocumentsRejected(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	s := reportSource(t, dir, nil, nil, reg)
	write(t, dir, "a.yaml", "kind: Pod\n")
	write(t, dir, "b.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: b\n---\napiVersion: v1\nkind: Pod\n")
	write(t, dir, "c.yaml", podYAML("c", "80"))
	s.Scan()
	expect := func(n string) {
		t.Helper()
		want := "# HELP probed_manifest_documents_rejected Manifest documents (or whole files) the last scan rejected: not readable, not decoding, not valid, or in conflict (GET /manifests).\n# TYPE probed_manifest_documents_rejected gauge\nprobed_manifest_documents_rejected " + n + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "probed_manifest_documents_rejected"); err != nil {
			t.Error(err)
		}
	}
	expect("3") // b.yaml's second document has two errors: one document
	write(t, dir, "b.yaml", podYAML("b", "80"))
	s.Scan()
	expect("1")
}

// TestSource_SingleFile: Path may be one manifest file (any name), as the
// kubelet's --pod-manifest-path: its pods are read, other files beside it
// are not, a change is picked up by Watch, and deleting it removes its pods.
func TestSource_SingleFile(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "pods.conf", podYAML("one", "8080"))
	write(t, dir, "other.yaml", podYAML("other", "8080"))
	s := reportSource(t, path, nil, nil, nil)
	snap := s.Scan()
	if pods := byName(snap); len(pods) != 1 || pods["default/one"] == nil || snap.Report.Path != path || snap.Files != 1 {
		t.Fatalf("pods %v, report %+v", pods, snap.Report)
	}
	wait := watchSnapshots(t, s)
	// Replaced by a rename, as editors and ConfigMap mounts do.
	tmp := filepath.Join(dir, ".tmp")
	if err := os.WriteFile(tmp, []byte(podYAML("two", "8080")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	wait("pod two", func(p map[string]*source.Pod) bool { return p["default/two"] != nil && len(p) == 1 })
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	wait("no pods", func(p map[string]*source.Pod) bool { return len(p) == 0 })

	if _, err := source.New(source.Options{Path: "/dev/null"}); err == nil || !strings.Contains(err.Error(), "a character device, not a directory or a regular file") {
		t.Errorf("a device as manifests: %v", err)
	}
}

// TestScan_HugeSparseManifestRefusedUnread: a manifest of 64 GiB (sparse)
// is refused by its size, naming the file and the limit, without being read
// (the scan stays fast and small; the other file loads).
func TestScan_HugeSparseManifestRefusedUnread(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 30); err != nil {
		f.Close()
		t.Skipf("no sparse files here: %v", err)
	}
	f.Close()
	write(t, dir, "ok.yaml", podYAML("ok", "80"))
	snap := reportSource(t, dir, nil, nil, nil).Scan()
	want := big + ": file is 68719476736 bytes, more than the limit of 8388608 bytes (Options.MaxFileBytes)"
	if len(snap.Pods) != 1 || len(snap.Errors) != 1 || snap.Errors[0].Error() != want {
		t.Errorf("pods %d, errors %s\nwant %s", len(snap.Pods), errorsText(snap), want)
	}
}

// TestScan_UnlistableDirectoryKeepsPodsStale: a manifest directory that can
// no longer be listed (here: replaced by a regular file) keeps every pod at
// its last version, stale with the listing error; deleted, it removes them.
func TestScan_UnlistableDirectoryKeepsPodsStale(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "a.yaml", podYAML("a", "80"))
	write(t, dir, "b.yaml", podYAML("b", "80"))
	s := reportSource(t, dir, nil, nil, nil)
	before := s.Scan()
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	write(t, root, "manifests", "not a directory")
	snap := s.Scan()
	if len(snap.Pods) != 2 {
		t.Fatalf("pods %v, want a and b kept", byName(snap))
	}
	for uid, p := range snap.Pods {
		if before.Pods[uid] == nil || p.Stale == nil || !strings.Contains(p.Stale.Error, "cannot list the manifest directory") {
			t.Errorf("%s: %+v", p.Pod.Name, p.Stale)
		}
	}
	if rej := snap.Report.Rejected; len(rej) != 1 || rej[0].File != dir || rej[0].Document != 0 || !rej[0].Stale {
		t.Errorf("rejected %+v", rej)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if snap := s.Scan(); len(snap.Pods) != 0 || len(snap.Report.Rejected) != 0 {
		t.Errorf("deleted directory: pods %v, report %+v", byName(snap), snap.Report)
	}
}

// TestScan_EmptiedFileKeepsPodsStale: a file truncated (as os.WriteFile,
// editors and `>` do before writing) holds no object for a moment: its pods
// stay, stale, instead of being removed and re-added; written again, they
// are current; a file empty from the start is only skipped.
func TestScan_EmptiedFileKeepsPodsStale(t *testing.T) {
	dir := t.TempDir()
	s := reportSource(t, dir, nil, nil, nil)
	path := write(t, dir, "web.yaml", podYAML("web", "80"))
	write(t, dir, "empty.yaml", "")
	uid := byName(s.Scan())["default/web"].Pod.UID
	write(t, dir, "web.yaml", "")
	snap := s.Scan()
	if p := byName(snap)["default/web"]; p == nil || p.Pod.UID != uid || p.Stale == nil || !strings.Contains(p.Stale.Error, "kept at their last version") {
		t.Fatalf("emptied: %+v", p)
	}
	if rej := snap.Report.Rejected; len(rej) != 1 || rej[0].File != path || !rej[0].Stale {
		t.Errorf("rejected %+v", rej)
	}
	if sk := snap.Report.Skipped; len(sk) != 1 || filepath.Base(sk[0].File) != "empty.yaml" {
		t.Errorf("skipped %+v", sk)
	}
	write(t, dir, "web.yaml", podYAML("web", "80"))
	if p := byName(s.Scan())["default/web"]; p == nil || p.Pod.UID != uid || p.Stale != nil {
		t.Errorf("written again: %+v", p)
	}
}
