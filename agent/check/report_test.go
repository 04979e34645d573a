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
	if want := (check.ProbeResult{File: a, Namespace: "ns", Pod: "good", Container: "app", Probe: "readiness", Handler: "http",
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
// as they are (issue 18 §7: not `Get \"http://…\"`).
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
