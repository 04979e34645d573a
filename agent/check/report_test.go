package check_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/probed/probed/agent/check"
	"github.com/probed/probed/agent/output"
)

// document runs a check with -o f and decodes its document.
func document(t *testing.T, opts check.Options, f output.Format) (check.Report, int, string) {
	t.Helper()
	var out, errBuf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts.Output = f
	code := check.Run(ctx, opts, &out, &errBuf)
	var rep check.Report
	var err error
	if f == output.YAML {
		err = yaml.UnmarshalStrict(out.Bytes(), &rep)
	} else {
		dec := json.NewDecoder(&out)
		dec.DisallowUnknownFields()
		err = dec.Decode(&rep)
	}
	if err != nil {
		t.Fatalf("-o %s: %v\n%s", f, err, out.String())
	}
	return rep, code, errBuf.String()
}

// TestReportDocument: -o json and -o yaml write the same Report, whose
// probes carry the file, pod, container, probe, handler, result and
// message; -f DIR reads the directory's manifest files in lexical order
// (other files ignored), as the agent reads --manifests.
func TestReportDocument(t *testing.T) {
	web := target(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	b := write("b.yml", fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: bad, namespace: ns}\nspec:\n  containers:\n  - name: app\n    image: app\n    livenessProbe:\n      httpGet: {path: /fail, port: %d}\n", web))
	a := write("a.yaml", fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: good, namespace: ns}\nspec:\n  containers:\n  - name: app\n    image: app\n    readinessProbe:\n      httpGet: {path: /ok, port: %d}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: svc, namespace: ns}\n", web))
	write("README.md", "not read")
	write(".hidden.yaml", "not read either")

	jsonRep, code, _ := document(t, check.Options{File: dir}, output.JSON)
	if code != check.ExitFailed || jsonRep.ExitCode != check.ExitFailed {
		t.Errorf("exit code %d, document's %d, want %d", code, jsonRep.ExitCode, check.ExitFailed)
	}
	if jsonRep.Kind != check.ReportKind || jsonRep.APIVersion != output.APIVersion {
		t.Errorf("kind/apiVersion %q/%q", jsonRep.Kind, jsonRep.APIVersion)
	}
	if want := []string{a, b}; !reflect.DeepEqual(jsonRep.Files, want) {
		t.Errorf("files %q, want %q", jsonRep.Files, want)
	}
	if len(jsonRep.Probes) != 2 {
		t.Fatalf("probes %+v, want 2", jsonRep.Probes)
	}
	got := jsonRep.Probes[0]
	got.DurationMS = 0
	if want := (check.ProbeResult{File: a, Namespace: "ns", Pod: "good", Container: "app", Probe: "readiness", Origin: "spec", Handler: "http",
		Result: "success", Message: "HTTP 200", PodIP: "127.0.0.1"}); got != want {
		t.Errorf("probe 0 %+v\nwant %+v", got, want)
	}
	if p := jsonRep.Probes[1]; p.File != b || p.Pod != "bad" || p.Result != "failure" || !strings.Contains(p.Message, "statuscode: 500") || p.DurationMS <= 0 {
		t.Errorf("probe 1 %+v", p)
	}
	if want := []check.SkippedDocument{{File: a, Document: 2, Kind: "Service", Name: "ns/svc", Reason: "kind Service holds no pod template"}}; !reflect.DeepEqual(jsonRep.Skipped, want) {
		t.Errorf("skipped %+v, want %+v", jsonRep.Skipped, want)
	}
	if len(jsonRep.Errors) != 0 || len(jsonRep.Warnings) != 0 {
		t.Errorf("errors %q warnings %q", jsonRep.Errors, jsonRep.Warnings)
	}

	yamlRep, code, _ := document(t, check.Options{File: dir}, output.YAML)
	if code != check.ExitFailed {
		t.Errorf("-o yaml exit code %d", code)
	}
	for i := range yamlRep.Probes {
		yamlRep.Probes[i].DurationMS, jsonRep.Probes[i].DurationMS = 0, 0
	}
	if !reflect.DeepEqual(yamlRep, jsonRep) {
		t.Errorf("-o yaml %+v\n-o json %+v", yamlRep, jsonRep)
	}
}

// TestReportBadInput: with -o json a manifest error still writes the
// document, with the error (naming file, pod, container and field) and
// exit code 2, and no probe.
func TestReportBadInput(t *testing.T) {
	path := manifest(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: app\n    image: app\n    readinessProbe:\n      tcpSocket: {port: 80}\n      periodSeconds: -1\n")
	rep, code, errOut := document(t, check.Options{File: path}, output.JSON)
	if code != check.ExitBadInput || rep.ExitCode != check.ExitBadInput {
		t.Errorf("exit code %d, document's %d", code, rep.ExitCode)
	}
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], "pod default/p") || !strings.Contains(rep.Errors[0], "readinessProbe.periodSeconds") {
		t.Errorf("errors %q", rep.Errors)
	}
	if !strings.Contains(errOut, rep.Errors[0]) {
		t.Errorf("stderr %q lacks the error", errOut)
	}
	if len(rep.Probes) != 0 {
		t.Errorf("probes %+v", rep.Probes)
	}
}

// TestRunStdin: -f - reads the manifest from Stdin; errors name it "-".
func TestRunStdin(t *testing.T) {
	web := target(t)
	in := strings.NewReader(fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: app\n    image: app\n    readinessProbe:\n      httpGet: {path: /ok, port: %d}\n", web))
	rows, errOut, code := run(t, check.Options{File: check.Stdin, Stdin: in})
	wantRows(t, rows, []string{"default/p app readiness http success | HTTP 200"})
	if code != check.ExitOK || errOut != "" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = run(t, check.Options{File: check.Stdin, Stdin: strings.NewReader("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: app, image: app, bogus: 1}]}\n")})
	if code != check.ExitBadInput || !strings.HasPrefix(errOut, "-: document 1: pod default/p") || !strings.Contains(errOut, "bogus") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestRunWide: -o wide adds the pod IP and prints the whole message on one
// line, its line breaks and control characters escaped and its quotes left
// as they are (not `Get \"http://…\"`).
func TestRunWide(t *testing.T) {
	path := manifest(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nstatus: {podIP: 127.0.0.1}\nspec:\n  containers:\n  - name: app\n    image: app\n    readinessProbe:\n      exec: {command: [sh, -c, 'printf \"one\\ntwo \\\"q\\\"\\033\\n\"; exit 1']}\n")
	var out, errBuf bytes.Buffer
	code := check.Run(context.Background(), check.Options{File: path, Output: output.Wide, AllowHostExec: true}, &out, &errBuf)
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if code != check.ExitFailed || len(lines) != 2 {
		t.Fatalf("exit %d:\n%s%s", code, out.String(), errBuf.String())
	}
	if got := strings.Join(strings.Fields(lines[0]), " "); got != "POD CONTAINER PROBE HANDLER RESULT DURATION POD IP MESSAGE" {
		t.Errorf("header %q", lines[0])
	}
	if f := strings.Fields(lines[1]); len(f) != 9 || f[6] != "127.0.0.1" || f[7] != `one\ntwo` || f[8] != `"q"\x1b` {
		t.Errorf("row %q", lines[1])
	}
}

// TestCheck_AnnotationProbesRun: a pod whose only probes are in its
// probed.io/probes annotation is checked, not "no probes found": each
// annotation probe runs once against its real target (the annotation's own
// fields: a sub-second period, expect on the answer, a sidecar's probe), in
// annotation order after the spec's probes, with its origin in the report;
// a plugin kind is not run (check starts no plugin) and says so; the
// filters select annotation probes as they select spec probes.
func TestCheck_AnnotationProbesRun(t *testing.T) {
	web := target(t)
	path := manifest(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: ann
  namespace: shop
  annotations:
    probed.io/probes: |
      [{"container":"app","type":"readiness","periodSeconds":1,"periodMilliseconds":-500,"httpGet":{"path":"/ok","port":%[1]d,"expect":{"status":[200]}}},
       {"container":"app","type":"liveness","httpGet":{"path":"/fail","port":%[1]d}},
       {"container":"proxy","type":"startup","tcpSocket":{"port":%[1]d}},
       {"container":"app","type":"startup","plugin":{"name":"redis-ping","port":6379}}]
spec:
  initContainers:
  - name: proxy
    image: proxy
    restartPolicy: Always
  containers:
  - name: app
    image: app
---
apiVersion: v1
kind: Pod
metadata:
  name: both
  namespace: shop
  annotations:
    probed.io/probes: '[{"container":"app","type":"readiness","tcpSocket":{"port":%[1]d}}]'
spec:
  containers:
  - name: app
    image: app
    livenessProbe:
      httpGet: {path: /ok, port: %[1]d}
`, web))
	rows, errOut, code := run(t, check.Options{File: path})
	wantRows(t, rows, []string{
		"shop/ann app readiness http success | HTTP 200",
		"shop/ann app liveness http failure | HTTP probe failed with statuscode: 500",
		"shop/ann proxy startup tcp success | ",
		`shop/ann app startup redis-ping not-run | probe kind "redis-ping" is served by a plugin; probed check runs no plugins`,
		"shop/both app liveness http success | HTTP 200",
		"shop/both app readiness tcp success | ",
	})
	if code != check.ExitFailed || errOut != "" {
		t.Errorf("exit code %d (want %d: a liveness probe fails), stderr %q", code, check.ExitFailed, errOut)
	}

	rep, _, _ := document(t, check.Options{File: path, Pod: "shop/both"}, output.JSON)
	var origins []string
	for _, p := range rep.Probes {
		origins = append(origins, p.Container+"/"+p.Probe+"="+p.Origin)
	}
	if want := []string{"app/liveness=spec", "app/readiness=annotation"}; !reflect.DeepEqual(origins, want) {
		t.Errorf("origins %q, want %q", origins, want)
	}

	rows, _, code = run(t, check.Options{File: path, Pod: "ann", Container: "app", ProbeType: "readiness"})
	wantRows(t, rows, []string{"shop/ann app readiness http success | HTTP 200"})
	if code != check.ExitOK {
		t.Errorf("exit code %d for the passing annotation probe alone", code)
	}
}

// TestCheck_AnnotationErrorsAreBadInput: an annotation the agent would
// refuse is the same error here, naming file, pod and field, and nothing
// runs.
func TestCheck_AnnotationErrorsAreBadInput(t *testing.T) {
	path := manifest(t, `apiVersion: v1
kind: Pod
metadata:
  name: ann
  annotations:
    probed.io/probes: '[{"container":"nope","type":"readiness","tcpSocket":{"port":1}}]'
spec:
  containers:
  - name: app
    image: app
`)
	rows, errOut, code := run(t, check.Options{File: path})
	if len(rows) != 0 || code != check.ExitBadInput ||
		!strings.Contains(errOut, `pod default/ann: metadata.annotations[probed.io/probes][0].container: Invalid value: "nope"`) {
		t.Errorf("rows %q, exit code %d, stderr %q", rows, code, errOut)
	}
}

// TestCheck_OffloadedProbesRun: a pod read back from a cluster whose
// offload webhook moved its probes into probed.io/offloaded (kubectl get
// pod -o yaml) has its probes checked as the cluster's agent runs them,
// each of origin offloaded; a record element the agent would refuse is an
// error naming the file, the pod and the field.
func TestCheck_OffloadedProbesRun(t *testing.T) {
	web := target(t)
	path := manifest(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: moved
  namespace: shop
  annotations:
    probed.io/offloaded: '[{"container":"app","type":"readiness","probe":{"httpGet":{"path":"/ok","port":%[1]d,"scheme":"HTTP"},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3}}]'
spec:
  readinessGates:
  - conditionType: probed.io/ready
  containers:
  - name: app
    image: app
`, web))
	rep, code, _ := document(t, check.Options{File: path}, output.JSON)
	var rows []string
	var errOut string
	if code != check.ExitOK || len(rep.Probes) != 1 || rep.Probes[0].Origin != "offloaded" || rep.Probes[0].Result != "success" {
		t.Fatalf("exit %d, probes %+v", code, rep.Probes)
	}

	broken := manifest(t, `apiVersion: v1
kind: Pod
metadata:
  name: moved
  annotations:
    probed.io/offloaded: '[{"container":"app","type":"readiness","probe":{"httpGet":{"port":1},"keepAlive":true}}]'
spec:
  containers:
  - name: app
    image: app
`)
	rows, errOut, code = run(t, check.Options{File: broken})
	if len(rows) != 0 || code != check.ExitBadInput || !strings.Contains(errOut, `pod default/moved: metadata.annotations[probed.io/offloaded][0].probe`) {
		t.Errorf("rows %q, exit code %d, stderr %q", rows, code, errOut)
	}
}
