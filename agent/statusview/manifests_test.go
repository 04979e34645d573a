package statusview_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/output"
	"github.com/probed/probed/agent/statusview"
)

func TestParseServer(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8089":              "http://127.0.0.1:8089",
		"localhost:8089":              "http://localhost:8089",
		"[::1]:8089":                  "http://[::1]:8089",
		"http://127.0.0.1:8089/":      "http://127.0.0.1:8089",
		"https://node-1:8443/probed/": "https://node-1:8443/probed",
	} {
		if got, err := statusview.ParseServer(in); err != nil || got != want {
			t.Errorf("ParseServer(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":                        "--server: empty",
		"ftp://127.0.0.1:21":      `--server "ftp://127.0.0.1:21": scheme "ftp"`,
		"http://":                 `--server "http://": no host`,
		"http://h:1/?x=1":         `--server "http://h:1/?x=1": a base URL has no query or fragment`,
		"http://bad host:1":       `--server "http://bad host:1"`,
		"unix:///run/probed.sock": `--server "unix:///run/probed.sock": scheme "unix"`,
	} {
		if _, err := statusview.ParseServer(in); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParseServer(%q): %v, want an error starting %q", in, err, want)
		}
	}
}

var manifestReport = `{"kind":"ManifestReport","source":"directory","path":"/srv/pods","files":3,
 "rejected":[
  {"file":"/srv/pods/web.yaml","document":2,"line":14,"pod":"shop/web","error":"/srv/pods/web.yaml: document 2: pod shop/web: bad\u001b[2J","since":"2026-11-29T12:00:00Z","stale":true},
  {"file":"/srv/pods/other.yaml","document":1,"line":0,"pod":"other/x","error":"other error","since":"2026-11-29T12:01:00Z","stale":false},
  {"file":"/srv/pods/junk.yaml","document":1,"line":3,"pod":"","error":"yaml: line 3: did not find expected key","since":"2026-11-29T12:02:00Z","stale":false}],
 "skipped":[{"file":"/srv/pods/secret.yaml","document":1,"kind":"Secret","reason":"kind Secret holds no pod template"}]}`

// TestPrintManifests: the rejected and skipped documents of GET /manifests
// follow the pods' table (file names, not paths; LINE "-" when unknown;
// control characters escaped) and are in the JSON and YAML documents; -n
// keeps the rejected documents of that namespace and those whose pod is
// unknown; an agent without /manifests has no section and no error.
func TestPrintManifests(t *testing.T) {
	pods := []v1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Status: v1.PodStatus{Phase: v1.PodRunning}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "x"}, Status: v1.PodStatus{Phase: v1.PodRunning}},
	}
	stub := newAgentStub(t, pods, map[string][]history.Probe{})
	var buf bytes.Buffer
	opts := statusview.Options{Server: stub.srv.URL, Now: func() time.Time { return now }}
	if err := statusview.Print(context.Background(), opts, &buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "MANIFESTS") {
		t.Errorf("agent without /manifests: a section:\n%s", buf.String())
	}
	buf.Reset()
	opts.Output = output.JSON
	if err := statusview.Print(context.Background(), opts, &buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), `"manifests"`) {
		t.Errorf("agent without /manifests: -o json has manifests:\n%s", buf.String())
	}

	stub.setManifests(manifestReport)
	buf.Reset()
	opts.Output = output.Table
	if err := statusview.Print(context.Background(), opts, &buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"\nREJECTED MANIFESTS (3)\n", "\nSKIPPED MANIFESTS (1)\n",
		"web.yaml    2    14    shop/web  2026-11-29T12:00:00Z  yes    /srv/pods/web.yaml: document 2: pod shop/web: bad\\x1b[2J\n",
		"junk.yaml   1    3     -         2026-11-29T12:02:00Z  no     yaml: line 3",
		"other.yaml  1    -     other/x",
		"secret.yaml  1    Secret  kind Secret holds no pod template\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}

	for _, f := range []output.Format{output.JSON, output.YAML} {
		buf.Reset()
		opts.Output, opts.Namespace = f, "shop"
		if err := statusview.Print(context.Background(), opts, &buf); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		if f == output.YAML {
			var err error
			if data, err = yaml.YAMLToJSON(data); err != nil {
				t.Fatal(err)
			}
		}
		var st statusview.Status
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&st); err != nil {
			t.Fatalf("-o %s: %v\n%s", f, err, buf.String())
		}
		if len(st.Pods) != 1 || st.Pods[0].Name != "web" || st.Namespace != "shop" {
			t.Errorf("-o %s -n shop: pods %+v", f, st.Pods)
		}
		m := st.Manifests
		if m == nil || m.Path != "/srv/pods" || m.Files != 3 || len(m.Rejected) != 2 || m.Rejected[0].Pod != "shop/web" || !m.Rejected[0].Stale ||
			m.Rejected[0].Line != 14 || m.Rejected[1].Pod != "" || len(m.Skipped) != 1 || m.Skipped[0].Reason != "kind Secret holds no pod template" {
			t.Errorf("-o %s -n shop: manifests %+v", f, m)
		}
	}

	stub.setManifests("{not json")
	opts.Output = output.Table
	if err := statusview.Print(context.Background(), opts, &buf); err == nil || !strings.Contains(err.Error(), "/manifests") {
		t.Errorf("a broken /manifests: %v, want an error naming it", err)
	}
}

// TestPrintRejectedShowsFieldAndReason: the table's ERROR
// column of a rejected document is its field and what is wrong with it,
// whole, not the message that repeats the file, document and pod the
// other columns show (cut before the field name); -o wide prints the
// whole message.
func TestPrintRejectedShowsFieldAndReason(t *testing.T) {
	field := "spec.template.spec.containers[0].livenessProbe.httpGet.port"
	detail := `Invalid value: "metrics-http-port-x": must be no more than 15 characters`
	full := "/srv/deployments/team-payments/payments-api-production.yaml: document 3: deployment payments/payments-api: container \"payments-api\": " + field + ": " + detail
	report := map[string]any{"kind": "ManifestReport", "source": "directory", "path": "/srv", "files": 1, "skipped": []any{},
		"rejected": []any{
			map[string]any{"file": "/srv/deployments/team-payments/payments-api-production.yaml", "document": 3, "line": 40, "pod": "payments/payments-api",
				"error": full, "field": field, "detail": detail, "since": "2026-11-29T12:00:00Z", "stale": false},
			// An agent that serves no field or detail: the message, cut.
			map[string]any{"file": "/srv/old.yaml", "document": 1, "line": 1, "pod": "", "error": strings.Repeat("x", 200), "since": "2026-11-29T12:00:00Z", "stale": false},
		}}
	body, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	stub := newAgentStub(t, nil, nil)
	stub.setManifests(string(body))
	var buf bytes.Buffer
	opts := statusview.Options{Server: stub.srv.URL, Now: func() time.Time { return now }}
	if err := statusview.Print(context.Background(), opts, &buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "  "+field+": "+detail+"\n") {
		t.Errorf("the table does not end the row with the field and the reason:\n%s", out)
	}
	if strings.Contains(out, "document 3: deployment") {
		t.Errorf("the table repeats the columns in the error:\n%s", out)
	}
	if !strings.Contains(out, strings.Repeat("x", 160)+"…\n") || strings.Contains(out, strings.Repeat("x", 161)) {
		t.Errorf("an error without detail is not cut at 160 characters:\n%s", out)
	}
	buf.Reset()
	opts.Output = output.Wide
	if err := statusview.Print(context.Background(), opts, &buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), full+"\n") {
		t.Errorf("-o wide does not print the whole message:\n%s", buf.String())
	}
}
