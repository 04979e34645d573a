package manifest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func metav1ObjectMeta(name, ns string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns}
}

// errStrings renders errors, failing when one is not an *Error.
func errStrings(t *testing.T, errs []error) []string {
	t.Helper()
	var out []string
	for _, err := range errs {
		var me *Error
		if !errors.As(err, &me) {
			t.Errorf("error %v is %T, not *Error", err, err)
		}
		out = append(out, err.Error())
	}
	return out
}

func mustOne(t *testing.T, src string) Entry {
	t.Helper()
	r := DecodeAll([]byte(src), "test.yaml", Options{})
	if len(r.Errors) != 0 || len(r.Entries) != 1 {
		t.Fatalf("want 1 entry and no errors, got %d entries, errors %v", len(r.Entries), errStrings(t, r.Errors))
	}
	return r.Entries[0]
}

const podYAML = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: app
    ports:
    - {name: http, containerPort: 8080}
    livenessProbe:
      httpGet: {port: http}
`

func TestDecodePodDefaults(t *testing.T) {
	e := mustOne(t, podYAML)
	if e.WorkloadKind != "Pod" || e.WorkloadName != "web" || e.Doc != 1 || e.Line != 1 || e.Item != -1 || e.Source != "test.yaml" {
		t.Errorf("entry = %+v", e)
	}
	p := e.Pod
	if p.Namespace != "default" || p.Name != "web" || p.UID != "" {
		t.Errorf("pod meta = %+v", p.ObjectMeta)
	}
	if p.Spec.RestartPolicy != v1.RestartPolicyAlways {
		t.Errorf("restartPolicy = %q", p.Spec.RestartPolicy)
	}
	lp := p.Spec.Containers[0].LivenessProbe
	if lp.TimeoutSeconds != 1 || lp.PeriodSeconds != 10 || lp.SuccessThreshold != 1 || lp.FailureThreshold != 3 || lp.InitialDelaySeconds != 0 {
		t.Errorf("timing = %+v", lp)
	}
	if lp.HTTPGet.Path != "/" || lp.HTTPGet.Scheme != v1.URISchemeHTTP {
		t.Errorf("httpGet = %+v", lp.HTTPGet)
	}
}

func TestDecodeKeepsUID(t *testing.T) {
	e := mustOne(t, strings.Replace(podYAML, "  name: web\n", "  name: web\n  namespace: prod\n  uid: \"1234\"\n", 1))
	if e.Pod.UID != "1234" || e.Pod.Namespace != "prod" {
		t.Errorf("meta = %+v", e.Pod.ObjectMeta)
	}
}

// TestDecodeStrict: decoding is kubectl --validate=strict: case-sensitive
// keys, no unknown fields, no duplicates, values of the field's type. Each
// error names file, document, object, container and field.
func TestDecodeStrict(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		want string
	}{
		{"misspelled gRPC", `apiVersion: v1
kind: Pod
metadata: {name: etcd}
spec:
  containers:
  - name: etcd
    livenessProbe:
      gRPC: {port: 2379}
`, `test.yaml: document 1: pod default/etcd: container "etcd": spec.containers[0].livenessProbe.gRPC: unknown field "gRPC" (did you mean "grpc"?)`},
		{"initialDelaySecond", `apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: app
    readinessProbe:
      tcpSocket: {port: 80}
      initialDelaySecond: 5
`, `test.yaml: document 1: pod default/web: container "app": spec.containers[0].readinessProbe.initialDelaySecond: unknown field "initialDelaySecond" (did you mean "initialDelaySeconds"?)`},
		{"unknown field in a template", `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        readinessProbe:
          httpGet: {port: 80, pth: /ready}
`, `test.yaml: document 1: deployment shop/web: container "app": spec.template.spec.containers[0].readinessProbe.httpGet.pth: unknown field "pth" (did you mean "path"?)`},
		{"handler key at the wrong level", `apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: app
    livenessProbe:
    httpGet: {port: 80}
`, `test.yaml: document 1: pod default/web: container "app": spec.containers[0].httpGet: unknown field "httpGet"`},
		{"duplicate YAML key", `apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: app
    livenessProbe:
      periodSeconds: 5
      periodSeconds: 6
      exec: {command: ["true"]}
`, `test.yaml: document 1: pod default/web: invalid YAML: unmarshal errors: line 9: key "periodSeconds" already set in map`},
		{"string for an int", `apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: app
    livenessProbe:
      periodSeconds: "5"
      exec: {command: ["true"]}
`, `test.yaml: document 1: pod default/web: container "app": spec.containers[0].livenessProbe.periodSeconds: Invalid value: "5": expected an integer, found string`},
		{"grpc named port", `apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: app
    livenessProbe:
      grpc: {port: grpc}
`, `test.yaml: document 1: pod default/web: container "app": spec.containers[0].livenessProbe.grpc.port: Invalid value: "grpc": expected an integer, found string`},
		{"unfilled placeholder in a quantity", `apiVersion: apps/v1
kind: Deployment
metadata: {name: kube-dns, namespace: kube-system}
spec:
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      containers:
      - name: kubedns
        resources:
          limits:
            memory: __DNS__MEMORY__LIMIT__
`, `test.yaml: document 1: deployment kube-system/kube-dns: container "kubedns": spec.template.spec.containers[0].resources.limits[memory]: Invalid value: "__DNS__MEMORY__LIMIT__": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' (__DNS__MEMORY__LIMIT__ looks like an unfilled template placeholder)`},
		{"bad YAML", "apiVersion: v1\nkind: Pod\nmetadata: {name: web\n", `test.yaml: document 1: pod default/web: invalid YAML: line 3: did not find expected ',' or '}'`},
		{"missing kind", "apiVersion: v1\nmetadata: {name: web}\n", `test.yaml: document 1: pod default/web: kind: Required value: every object needs apiVersion and kind`},
		{"missing apiVersion", "kind: Pod\nmetadata: {name: web}\n", `test.yaml: document 1: pod default/web: apiVersion: Required value: every object needs apiVersion and kind`},
		{"kind not a string", "apiVersion: v1\nkind: 7\n", `test.yaml: document 1: kind: Invalid value: 7: must be a string`},
		{"not an object", "- a\n- b\n", `test.yaml: document 1: an object (with apiVersion and kind) is required, found a list`},
		{"scalar document", "hello\n", `test.yaml: document 1: an object (with apiVersion and kind) is required, found "hello"`},
		{"old apiVersion of a workload", "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: web}\nspec: {}\n",
			`test.yaml: document 1: deployment default/web: apiVersion: Unsupported value: "extensions/v1beta1": the API server serves Deployment as apps/v1 only; probed reads ` + supportedKinds},
		{"old apiVersion of a CronJob", "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: c}\nspec: {}\n",
			`test.yaml: document 1: cronjob default/c: apiVersion: Unsupported value: "batch/v1beta1": the API server serves CronJob as batch/v1 only; probed reads ` + supportedKinds},
		{"custom resource sharing a kind name", `apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: vj}
spec:
  tasks:
  - name: t
    template:
      spec:
        containers: [{name: c}]
`, `test.yaml: document 1: job default/vj: spec.tasks[0].template.spec.containers: batch.volcano.sh/v1alpha1 Job has a pod template, but probed does not know this kind and would not probe it; it reads ` + supportedKinds},
		{"pod-like custom resource", `apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: web}
spec:
  template:
    spec:
      containers: [{name: app}]
`, `test.yaml: document 1: rollout default/web: spec.template.spec.containers: argoproj.io/v1alpha1 Rollout has a pod template, but probed does not know this kind and would not probe it; it reads ` + supportedKinds},
		{"pod kind at an unknown version", "apiVersion: v2\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: a}]}\n",
			`test.yaml: document 1: pod default/web: apiVersion: Unsupported value: "v2": the API server serves Pod as v1 only; probed reads ` + supportedKinds},
		{"lower-case kind", "apiVersion: v1\nkind: pod\nmetadata: {name: web}\nspec: {containers: [{name: a}]}\n",
			`test.yaml: document 1: pod default/web: spec.containers: v1 pod has a pod template, but probed does not know this kind and would not probe it; it reads ` + supportedKinds},
		{"liveness successThreshold", `apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: app
    livenessProbe:
      exec: {command: ["true"]}
      successThreshold: 2
`, `test.yaml: document 1: pod default/web: container "app": spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1`},
		{"job restartPolicy", `apiVersion: batch/v1
kind: Job
metadata: {name: pi}
spec:
  template:
    spec:
      containers: [{name: pi}]
`, `test.yaml: document 1: job default/pi: spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"`},
		{"deployment restartPolicy", `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      restartPolicy: Never
      containers: [{name: app}]
`, `test.yaml: document 1: deployment default/web: spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"`},
		{"workload without name", `apiVersion: apps/v1
kind: DaemonSet
metadata: {namespace: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers: [{name: app}]
`, `test.yaml: document 1: metadata.name: Required value: name is required`},
		{"custom probe annotation", `apiVersion: v1
kind: Pod
metadata:
  name: web
  annotations:
    probed.io/probes: '[{"container":"app","type":"readiness","plugin":{"nme":"x"}}]'
spec:
  containers: [{name: app}]
`, `test.yaml: document 1: pod default/web: metadata.annotations[probed.io/probes][0].plugin.nme: Invalid value: "nme": unknown field (did you mean "name"?)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := DecodeAll([]byte(tc.doc), "test.yaml", Options{})
			got := errStrings(t, r.Errors)
			if len(r.Entries) != 0 {
				t.Errorf("got %d entries, want none", len(r.Entries))
			}
			if len(got) == 0 || got[0] != tc.want {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), tc.want)
			}
		})
	}
}

// TestErrorFields checks the structured fields behind the message.
func TestErrorFields(t *testing.T) {
	src := "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n" + `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: data}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
      - name: main
      - name: db
        readinessProbe:
          exec: {command: ["true"]}
          terminationGracePeriodSeconds: 5
`
	_, errs := Decode([]byte(src), "manifests/db.yaml", Options{})
	if len(errs) != 1 {
		t.Fatalf("errors: %v", errs)
	}
	var e *Error
	if !errors.As(errs[0], &e) {
		t.Fatalf("%T", errs[0])
	}
	// Line: the file's line of the offending field (the document starts
	// on line 4).
	want := Error{File: "manifests/db.yaml", Doc: 2, Line: 18, Kind: "StatefulSet", Pod: "data/db", Container: "db",
		Field:  "spec.template.spec.containers[1].readinessProbe.terminationGracePeriodSeconds",
		Detail: "Invalid value: 5: must not be set for readinessProbes"}
	e.Err = nil
	if *e != want {
		t.Errorf("got  %+v\nwant %+v", *e, want)
	}
	if got := e.Error(); got != `manifests/db.yaml: document 2: statefulset data/db: container "db": spec.template.spec.containers[1].readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes` {
		t.Errorf("message: %s", got)
	}
}

// TestOneBadDocument: errors in one document never stop the others.
func TestOneBadDocument(t *testing.T) {
	src := podYAML + "---\n" + strings.Replace(podYAML, "httpGet", "htpGet", 1) + "---\n" +
		strings.Replace(podYAML, "name: web", "name: web2", 1) + "---\n: : :\n---\n" +
		strings.Replace(podYAML, "name: web", "name: web3", 1)
	r := DecodeAll([]byte(src), "f.yaml", Options{})
	var names []string
	for _, e := range r.Entries {
		names = append(names, fmt.Sprintf("%d:%s", e.Doc, e.Pod.Name))
	}
	if strings.Join(names, " ") != "1:web 3:web2 5:web3" {
		t.Errorf("entries %v", names)
	}
	got := errStrings(t, r.Errors)
	if len(got) != 2 || !strings.HasPrefix(got[0], "f.yaml: document 2: pod default/web: container \"app\": spec.containers[0].livenessProbe.htpGet: unknown field") ||
		!strings.HasPrefix(got[1], "f.yaml: document 4: invalid YAML") {
		t.Errorf("errors:\n  %s", strings.Join(got, "\n  "))
	}
}

func TestMultiDocument(t *testing.T) {
	src := `# leading comment
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
---
# only a comment
---
` + podYAML + `---
apiVersion: v1
kind: Service
metadata: {name: s, namespace: ns}
...
---
--- # an empty document with a comment
`
	r := DecodeAll([]byte(src), "m.yaml", Options{})
	if len(r.Errors) != 0 {
		t.Fatal(errStrings(t, r.Errors))
	}
	if len(r.Entries) != 1 || r.Entries[0].Doc != 3 || r.Entries[0].Line != 8 {
		t.Fatalf("entries %+v", r.Entries)
	}
	want := []Skipped{
		{Doc: 1, Line: 2, Item: -1, APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "c", Reason: "kind ConfigMap holds no pod template"},
		{Doc: 4, Line: 20, Item: -1, APIVersion: "v1", Kind: "Service", Namespace: "ns", Name: "s", Reason: "kind Service holds no pod template"},
	}
	if fmt.Sprintf("%#v", r.Skipped) != fmt.Sprintf("%#v", want) {
		t.Errorf("skipped\n got %#v\nwant %#v", r.Skipped, want)
	}
}

// TestDocumentLinesInYAMLErrors: in a multi-document file the line of a
// YAML error, in the message and in Error.Line, is the file's line the
// parser points at, not the line within the document, and
// the pod is named when its metadata can be read.
func TestDocumentLinesInYAMLErrors(t *testing.T) {
	src := podYAML + "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n   bad: indent\n"
	_, errs := Decode([]byte(src), "f.yaml", Options{})
	got := errStrings(t, errs)
	// The document starts on line 12; the bad line is the file's line 17.
	if len(got) != 1 || !strings.Contains(got[0], "document 2: pod default/x: invalid YAML: line 17:") {
		t.Errorf("errors %v", got)
	}
	var e *Error
	if errors.As(errs[0], &e); e.Line != 17 || e.Doc != 2 || e.Pod != "default/x" {
		t.Errorf("line %d, document %d, pod %q; want 17, 2, default/x", e.Line, e.Doc, e.Pod)
	}
}

func TestList(t *testing.T) {
	src := `items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: a}
  spec:
    selector: {matchLabels: {app: a}}
    template:
      metadata: {labels: {app: a}}
      spec:
        containers:
        - name: c
          readinessProbe: {tcpSocket: {port: 80}}
- apiVersion: v1
  kind: Service
  metadata: {name: a}
- apiVersion: v1
  kind: Pod
  metadata: {name: b}
  spec:
    containers:
    - name: c
      livenessProbe: {grpc: {port: 9000}, periodSecnds: 1}
apiVersion: v1
kind: List
metadata: {}
`
	r := DecodeAll([]byte(src), "l.yaml", Options{})
	if len(r.Entries) != 1 || r.Entries[0].Item != 0 || r.Entries[0].WorkloadKind != "Deployment" {
		t.Fatalf("entries %+v", r.Entries)
	}
	if len(r.Skipped) != 1 || r.Skipped[0].Item != 1 || r.Skipped[0].Kind != "Service" {
		t.Errorf("skipped %+v", r.Skipped)
	}
	got := errStrings(t, r.Errors)
	want := `l.yaml: document 1: pod default/b: container "c": items[2].spec.containers[0].livenessProbe.periodSecnds: unknown field "periodSecnds" (did you mean "periodSeconds"?)`
	if len(got) != 1 || got[0] != want {
		t.Errorf("errors\n  %s\nwant\n  %s", strings.Join(got, "\n  "), want)
	}
}

func TestTypedListAndNestedList(t *testing.T) {
	r := DecodeAll([]byte(`{"apiVersion":"v1","kind":"PodList","items":[
  {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","readinessProbe":{"exec":{"command":["true"]}}}]}},
  {"apiVersion":"v1","kind":"List","items":[]}
]}`), "l.json", Options{})
	if len(r.Entries) != 1 || r.Entries[0].Pod.Name != "a" || r.Entries[0].WorkloadKind != "Pod" {
		t.Fatalf("entries %+v", r.Entries)
	}
	got := errStrings(t, r.Errors)
	if len(got) != 1 || got[0] != "l.json: document 1: items[1]: a List may not contain another List" {
		t.Errorf("errors %v", got)
	}
	// Unknown fields of the list itself.
	_, errs := Decode([]byte("apiVersion: v1\nkind: List\nitems: []\nextra: 1\n"), "l.yaml", Options{})
	if got := errStrings(t, errs); len(got) != 1 || got[0] != `l.yaml: document 1: extra: unknown field "extra"` {
		t.Errorf("errors %v", got)
	}
}

func TestJSONInput(t *testing.T) {
	one := `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "%s"},
	"spec": {"containers": [{"name": "app", "startupProbe": {"httpGet": {"port": 80, "scheme": "HTTPS"}, "failureThreshold": 30}}]}}`
	src := fmt.Sprintf(one, "a") + "\n\n" + fmt.Sprintf(one, "b") // tabs, two concatenated values
	r := DecodeAll([]byte(src), "p.json", Options{})
	if len(r.Errors) != 0 || len(r.Entries) != 2 {
		t.Fatalf("entries %d errors %v", len(r.Entries), errStrings(t, r.Errors))
	}
	b := r.Entries[1]
	if b.Pod.Name != "b" || b.Doc != 2 || b.Line != 4 {
		t.Errorf("second entry %+v", b)
	}
	sp := b.Pod.Spec.Containers[0].StartupProbe
	if sp.FailureThreshold != 30 || sp.PeriodSeconds != 10 || sp.HTTPGet.Path != "/" || sp.HTTPGet.Scheme != v1.URISchemeHTTPS {
		t.Errorf("startup probe %+v %+v", sp, sp.HTTPGet)
	}
	// JSON: duplicate and unknown fields, case-sensitive keys.
	_, errs := Decode([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","name":"b"},"spec":{"containers":[{"name":"c","LivenessProbe":{}}]}}`), "p.json", Options{})
	got := errStrings(t, errs)
	want := []string{
		`p.json: document 1: pod default/b: metadata.name: duplicate field "name"`,
		`p.json: document 1: pod default/b: container "c": spec.containers[0].LivenessProbe: unknown field "LivenessProbe" (did you mean "livenessProbe"?)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestKYAML: KYAML (flow-style YAML with unquoted keys and trailing commas,
// which starts like JSON) is read as YAML.
func TestKYAML(t *testing.T) {
	src := `---
{
  apiVersion: "v1",
  kind: "Pod",
  metadata: {
    name: "ky",
  },
  spec: {
    containers: [{
      name: "app",
      livenessProbe: {
        httpGet: {
          path: "/healthz",
          port: 8080,
          httpHeaders: [{
            name: "Custom-Header",
            value: "Awesome",
          }],
        },
        initialDelaySeconds: 3,
        periodSeconds: 3,
      },
    }],
  },
}
---
{
  apiVersion: "v1",
  kind: "Pod",
  metadata: {name: "ky2"},
  spec: {containers: [{name: "etcd", livenessProbe: {grpc: {port: 2379}, initialDelaySeconds: 10}}]},
}
`
	r := DecodeAll([]byte(src), "k.yaml", Options{})
	if len(r.Errors) != 0 || len(r.Entries) != 2 {
		t.Fatalf("entries %d errors %v", len(r.Entries), errStrings(t, r.Errors))
	}
	lp := r.Entries[0].Pod.Spec.Containers[0].LivenessProbe
	if lp.HTTPGet.Port.IntVal != 8080 || lp.HTTPGet.HTTPHeaders[0].Value != "Awesome" || lp.PeriodSeconds != 3 || lp.InitialDelaySeconds != 3 {
		t.Errorf("probe %+v", lp)
	}
	gp := r.Entries[1].Pod.Spec.Containers[0].LivenessProbe
	if gp.GRPC.Port != 2379 || gp.GRPC.Service == nil || *gp.GRPC.Service != "" || gp.PeriodSeconds != 10 {
		t.Errorf("grpc probe %+v", gp)
	}
}

// TestTemplates: every workload kind yields one pod named after it, with
// the template's labels, annotations and spec.
func TestTemplates(t *testing.T) {
	tmpl := func(indent string) string {
		s := `template:
  metadata:
    labels: {app: w}
    annotations: {note: x}
  spec:
    restartPolicy: RP
    containers:
    - name: c
      readinessProbe: {tcpSocket: {port: 80}}
`
		return indent + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+indent) + "\n"
	}
	always := strings.ReplaceAll(tmpl("  "), "RP", "Always")
	never := strings.ReplaceAll(tmpl("  "), "RP", "Never")
	cases := []struct {
		kind, doc string
		restart   v1.RestartPolicy
	}{
		{"Deployment", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: w, namespace: ns}\nspec:\n  selector: {matchLabels: {app: w}}\n" + always, v1.RestartPolicyAlways},
		{"StatefulSet", "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: w, namespace: ns}\nspec:\n  selector: {matchLabels: {app: w}}\n  serviceName: w\n" + always, v1.RestartPolicyAlways},
		{"DaemonSet", "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: w, namespace: ns}\nspec:\n  selector: {matchLabels: {app: w}}\n" + always, v1.RestartPolicyAlways},
		{"ReplicaSet", "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: w, namespace: ns}\nspec:\n  selector: {matchLabels: {app: w}}\n" + always, v1.RestartPolicyAlways},
		{"ReplicationController", "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: w, namespace: ns}\nspec:\n" + always, v1.RestartPolicyAlways},
		{"Job", "apiVersion: batch/v1\nkind: Job\nmetadata: {name: w, namespace: ns}\nspec:\n" + never, v1.RestartPolicyNever},
		{"CronJob", "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: w, namespace: ns}\nspec:\n  schedule: '* * * * *'\n  jobTemplate:\n    spec:\n" +
			strings.ReplaceAll(tmpl("      "), "RP", "OnFailure"), v1.RestartPolicyOnFailure},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			e := mustOne(t, tc.doc)
			if e.WorkloadKind != tc.kind || e.WorkloadName != "w" || len(e.Warnings) != 0 {
				t.Errorf("entry %+v", e)
			}
			p := e.Pod
			if p.Name != "w" || p.Namespace != "ns" || p.Labels["app"] != "w" || p.Annotations["note"] != "x" || p.Kind != "Pod" || p.APIVersion != "v1" {
				t.Errorf("pod meta %+v %+v", p.TypeMeta, p.ObjectMeta)
			}
			if p.Spec.RestartPolicy != tc.restart || p.Spec.Containers[0].ReadinessProbe.PeriodSeconds != 10 {
				t.Errorf("pod spec %+v", p.Spec)
			}
		})
	}
	// Namespace defaults to "default"; a ReplicationController needs a template.
	e := mustOne(t, "apiVersion: batch/v1\nkind: Job\nmetadata: {name: w}\nspec:\n"+never)
	if e.Pod.Namespace != "default" {
		t.Errorf("namespace %q", e.Pod.Namespace)
	}
	_, errs := Decode([]byte("apiVersion: v1\nkind: ReplicationController\nmetadata: {name: rc}\nspec: {}\n"), "t.yaml", Options{})
	if got := errStrings(t, errs); len(got) != 1 || got[0] != "t.yaml: document 1: replicationcontroller default/rc: spec.template: Required value: a pod template is required" {
		t.Errorf("errors %v", got)
	}
}

// TestSelectorWarnings: a Deployment without selector (SOURCES.md #11) loads,
// with a warning; so does one whose selector does not match.
func TestSelectorWarnings(t *testing.T) {
	base := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n%s  template:\n    metadata: {labels: {app: d}}\n    spec: {containers: [{name: c}]}\n"
	for _, tc := range []struct{ selector, warning string }{
		{"", "spec.selector: Required value: the API server refuses a Deployment without a selector; probed loads its pod template anyway"},
		{"  selector: {matchLabels: {app: other}}\n", "spec.selector: Invalid value: the selector does not match the template's labels; the API server refuses it; probed loads the pod template anyway"},
		{"  selector: {}\n", "spec.selector: Invalid value: the selector does not match the template's labels; the API server refuses it; probed loads the pod template anyway"},
		{"  selector: {matchLabels: {app: d}}\n", ""},
	} {
		e := mustOne(t, fmt.Sprintf(base, tc.selector))
		if got := strings.Join(e.Warnings, "|"); got != tc.warning {
			t.Errorf("selector %q: warnings %q, want %q", tc.selector, got, tc.warning)
		}
	}
}

// TestNamedPortWarning: a port name the container does not declare loads
// (the API server accepts it) with a warning naming container and field
// (BR-20); names resolve per container.
func TestNamedPortWarning(t *testing.T) {
	e := mustOne(t, `apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  selector: {matchLabels: {app: d}}
  template:
    metadata: {labels: {app: d}}
    spec:
      containers:
      - name: a
        ports: [{name: http, containerPort: 80}]
        readinessProbe: {httpGet: {port: http}}
      - name: b
        ports: [{name: metrics, containerPort: 90}]
        livenessProbe: {tcpSocket: {port: http}}
`)
	want := `container "b": spec.template.spec.containers[1].livenessProbe.tcpSocket.port: port "http" is not among the container's ports; the kubelet reports every run of this probe as errored (port "http" not found)`
	if len(e.Warnings) != 1 || e.Warnings[0] != want {
		t.Errorf("warnings\n  %s\nwant\n  %s", strings.Join(e.Warnings, "\n  "), want)
	}
}

// TestPlaceholderInStringField: an unfilled placeholder in a string field
// (nodelocaldns's httpGet.host: __PILLAR__LOCAL__DNS__) decodes; it is a
// warning, since the probe will not resolve the host.
func TestPlaceholderInStringField(t *testing.T) {
	e := mustOne(t, `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-local-dns, namespace: kube-system}
spec:
  selector: {matchLabels: {k8s-app: node-local-dns}}
  template:
    metadata: {labels: {k8s-app: node-local-dns}}
    spec:
      containers:
      - name: node-cache
        args: ["-localip", "__PILLAR__LOCAL__DNS__"]
        livenessProbe:
          httpGet: {host: __PILLAR__LOCAL__DNS__, path: /health, port: 8080}
          initialDelaySeconds: 60
          timeoutSeconds: 5
`)
	want := `container "node-cache": spec.template.spec.containers[0].livenessProbe.httpGet.host: "__PILLAR__LOCAL__DNS__" looks like an unfilled template placeholder (__PILLAR__LOCAL__DNS__)`
	if len(e.Warnings) != 1 || e.Warnings[0] != want {
		t.Errorf("warnings %q", e.Warnings)
	}
	if g := e.Pod.Spec.Containers[0].LivenessProbe.HTTPGet; g.Host != "__PILLAR__LOCAL__DNS__" || g.Port.IntVal != 8080 {
		t.Errorf("httpGet %+v", g)
	}
}

func TestCustomProbeAnnotationKinds(t *testing.T) {
	src := `apiVersion: v1
kind: Pod
metadata:
  name: web
  annotations:
    probed.io/probes: '[{"container":"app","type":"readiness","plugin":{"name":"http-match"}}]'
spec:
  containers: [{name: app}]
`
	if _, errs := Decode([]byte(src), "a.yaml", Options{}); len(errs) != 0 {
		t.Errorf("errors %v", errs)
	}
	known := func(k string) bool { return k == "redis-ping" }
	_, errs := Decode([]byte(src), "a.yaml", Options{KnownPluginKind: known})
	want := `a.yaml: document 1: pod default/web: metadata.annotations[probed.io/probes][0].plugin.name: Not found: "http-match": no plugin serves probe kind "http-match" (pod default/web, container "app")`
	if got := errStrings(t, errs); len(got) != 1 || got[0] != want {
		t.Errorf("got %v\nwant %s", got, want)
	}
	// In a template the path points into the template's metadata.
	_, errs = Decode([]byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata:
      labels: {a: b}
      annotations: {probed.io/probes: '[{"container":"nope","type":"liveness","plugin":{"name":"x"}}]'}
    spec: {containers: [{name: app}]}
`), "d.yaml", Options{})
	want = `d.yaml: document 1: deployment default/web: spec.template.metadata.annotations[probed.io/probes][0].container: Invalid value: "nope": pod default/web has no container "nope"`
	if got := errStrings(t, errs); len(got) != 1 || got[0] != want {
		t.Errorf("got %v\nwant %s", got, want)
	}
}

// TestEmptyInputs: a file with no object (empty, blank, only comments,
// only markers, null documents) yields no entry and no error, and one
// Skipped for the whole file that says why (such a file was
// silent).
func TestEmptyInputs(t *testing.T) {
	for _, src := range []string{"", "\n\n", "# c\n", "---\n", "---\n---\n...\n", "\xef\xbb\xbf---\n", "null\n", "---\n~\n", "# only\n# comments\n---\n# here\n"} {
		r := DecodeAll([]byte(src), "e.yaml", Options{})
		if len(r.Entries)+len(r.Errors) != 0 || len(r.Skipped) != 1 {
			t.Errorf("%q: %+v", src, r)
			continue
		}
		if s := r.Skipped[0]; s.Doc != 0 || s.Kind != "" || !strings.Contains(s.Reason, "holds no object") {
			t.Errorf("%q: skipped %#v", src, s)
		}
	}
	r := DecodeAll([]byte("apiVersion: v1\nkind: List\nitems: []\n"), "l.yaml", Options{})
	if len(r.Skipped) != 1 || r.Skipped[0].Reason != "the file's objects hold no pod (an empty List)" {
		t.Errorf("empty List: %+v", r)
	}
	// A file with a pod and empty documents has nothing skipped.
	if r := DecodeAll([]byte("---\n"+podYAML+"---\n---\n"), "p.yaml", Options{}); len(r.Entries) != 1 || len(r.Skipped) != 0 {
		t.Errorf("pod with empty documents: %+v", r)
	}
}

// TestSkippedKindsSayWhy: a List holding a Secret and a Pod yields the pod
// and skips the Secret with the reason; a PodTemplate says nothing runs it.
func TestSkippedKindsSayWhy(t *testing.T) {
	src := `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Secret
  metadata: {name: creds}
  stringData: {password: hunter2}
- apiVersion: v1
  kind: Pod
  metadata: {name: web}
  spec:
    containers:
    - name: app
      readinessProbe: {tcpSocket: {port: 80}}
---
apiVersion: v1
kind: PodTemplate
metadata: {name: t}
template:
  spec: {containers: [{name: app}]}
`
	r := DecodeAll([]byte(src), "l.yaml", Options{})
	if len(r.Errors) != 0 || len(r.Entries) != 1 || r.Entries[0].Pod.Name != "web" {
		t.Fatalf("%+v", r)
	}
	got := fmt.Sprint(r.Skipped)
	want := "[document 1 items[0]: skipped Secret default/creds: kind Secret holds no pod template document 2: skipped PodTemplate default/t: kind PodTemplate holds a pod template that nothing runs; probed reads " + supportedKinds + "]"
	if got != want {
		t.Errorf("skipped\n got %s\nwant %s", got, want)
	}
	if strings.Contains(got, "hunter2") {
		t.Errorf("a Secret's data in the skip list: %s", got)
	}
}

// TestYAMLErrorLineAndPod: the error names the line the parser points at, in
// the file, and the object when its kind and metadata can be read (block or
// flow metadata, a workload's kind); not when they cannot.
func TestYAMLErrorLineAndPod(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		want      string
	}{
		{"block metadata, third document", "# c\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  namespace: prod\n  name: web # the pod\nspec:\n  containers:\n  - name: app\n    image: [unclosed\n",
			15, "m.yaml: document 2: pod prod/web: invalid YAML: line 15: did not find expected ',' or ']'"},
		{"deployment, flow metadata", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api, namespace: shop}\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n         bad: indent\n",
			9, "m.yaml: document 1: deployment shop/api: invalid YAML: line 9: mapping values are not allowed in this context"},
		{"no kind", "metadata:\n  name: web\nspec: [\n", 3, "m.yaml: document 1: invalid YAML: line 3: did not find expected node content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := DecodeAll([]byte(tc.src), "m.yaml", Options{})
			got := errStrings(t, r.Errors)
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("errors %q\nwant %q", got, tc.want)
			}
			var e *Error
			if errors.As(r.Errors[0], &e); e.Line != tc.line {
				t.Errorf("Error.Line %d, want %d", e.Line, tc.line)
			}
		})
	}
}

func TestSizeLimit(t *testing.T) {
	data := []byte(podYAML)
	_, errs := Decode(data, "big.yaml", Options{MaxFileBytes: 100})
	want := fmt.Sprintf("big.yaml: file is %d bytes, more than the limit of 100 bytes (Options.MaxFileBytes)", len(data))
	if got := errStrings(t, errs); len(got) != 1 || got[0] != want {
		t.Errorf("got %v", got)
	}
	if _, errs := Decode(data, "ok.yaml", Options{MaxFileBytes: int64(len(data))}); len(errs) != 0 {
		t.Errorf("at the limit: %v", errs)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errs = LoadFile(path, Options{MaxFileBytes: 100})
	want = fmt.Sprintf("%s: file is %d bytes, more than the limit of 100 bytes (Options.MaxFileBytes)", path, len(data))
	if got := errStrings(t, errs); len(got) != 1 || got[0] != want {
		t.Errorf("got %v", got)
	}
	entries, errs := LoadFile(path, Options{})
	if len(errs) != 0 || len(entries) != 1 || entries[0].Source != path {
		t.Errorf("LoadFile: %v %v", entries, errs)
	}
	// The default limit is 8 MiB.
	huge := make([]byte, DefaultMaxFileBytes+1)
	if _, errs := Decode(huge, "huge.yaml", Options{}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "limit of 8388608 bytes") {
		t.Errorf("default limit: %v", errs)
	}
	// Missing files and directories are errors naming the path.
	if _, errs := LoadFile(filepath.Join(dir, "nope.yaml"), Options{}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "nope.yaml") {
		t.Errorf("missing file: %v", errs)
	}
	if _, errs := LoadFile(dir, Options{}); len(errs) != 1 || !strings.HasSuffix(errs[0].Error(), "is a directory, not a regular file") {
		t.Errorf("directory: %v", errs)
	}
}

// measure runs f and returns its duration and the bytes it allocated.
func measure(f func()) (time.Duration, uint64) {
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	start := time.Now()
	f()
	d := time.Since(start)
	goruntime.ReadMemStats(&after)
	return d, after.TotalAlloc - before.TotalAlloc
}

// TestAliasBomb: billion laughs (10^9 nodes from 9 lines) and a bomb sized
// just below the YAML library's own ratio guard (which alone would expand
// each document to ~400k nodes, 1.6 MB of JSON, in ~0.2 s) are refused fast
// and cheaply, document by document.
func TestAliasBomb(t *testing.T) {
	laughs := `apiVersion: v1
kind: Pod
metadata: {name: lol}
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`
	var sub strings.Builder
	sub.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {}\na: &a [")
	sub.WriteString(strings.Repeat("x,", 4000))
	sub.WriteString("x]\nb: [")
	sub.WriteString(strings.Repeat("*a,", 97))
	sub.WriteString("*a]\n")
	many := strings.Repeat(sub.String()+"---\n", 10)
	cycle := "a: &a [*a]\n"

	// The bound is on the work, as allocated bytes per document (an
	// expanded bomb allocates gigabytes); wall-clock time depends on the
	// machine's load and is only logged.
	for _, tc := range []struct {
		name, src string
		docs      int
	}{{"billion laughs", laughs, 1}, {"10 near-threshold bombs", many, 10}, {"alias cycle", cycle, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			var r *Result
			d, alloc := measure(func() { r = DecodeAll([]byte(tc.src), "bomb.yaml", Options{}) })
			if len(r.Entries) != 0 || len(r.Errors) != tc.docs {
				t.Fatalf("entries %d, errors %d: %v", len(r.Entries), len(r.Errors), errStrings(t, r.Errors))
			}
			msg := r.Errors[0].Error()
			if !strings.HasPrefix(msg, "bomb.yaml: document 1: ") || !strings.Contains(msg, "alias") {
				t.Errorf("error %q", msg)
			}
			if alloc > uint64(tc.docs)*(4<<20) {
				t.Errorf("took %v and allocated %d MiB", d, alloc>>20)
			}
			t.Logf("%v, %d MiB", d, alloc>>20)
		})
	}
	// Modest aliasing, as in hand-written manifests, is fine.
	ok := `apiVersion: v1
kind: Pod
metadata: {name: anchors}
spec:
  containers:
  - name: a
    livenessProbe: &probe {httpGet: {path: /healthz, port: 8080}, periodSeconds: 5}
    readinessProbe: *probe
`
	e := mustOne(t, ok)
	if c := e.Pod.Spec.Containers[0]; c.ReadinessProbe.PeriodSeconds != 5 || c.ReadinessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("aliased probe %+v", c.ReadinessProbe)
	}
}

// TestDeepNesting: deeply nested input is an error, not a stack overflow.
func TestDeepNesting(t *testing.T) {
	for _, src := range []string{
		strings.Repeat("[", 100000) + strings.Repeat("]", 100000),
		"a: " + strings.Repeat("[", 100000),
		strings.Repeat("{\"a\":", 20000) + "1" + strings.Repeat("}", 20000),
	} {
		d, alloc := measure(func() {
			if _, errs := Decode([]byte(src), "deep.yaml", Options{}); len(errs) != 1 {
				t.Errorf("errors %v", errs)
			}
		})
		// Bounded work (allocations), not wall-clock time (the machine's load).
		if alloc > 64<<20 {
			t.Errorf("allocated %d MiB", alloc>>20)
		}
		t.Logf("%v, %d MiB", d, alloc>>20)
	}
}

// TestErrorLineIsTheField: an error with a field points at the field's line
// in the file: an unknown key, a bad value in a List item, a JSON document;
// a missing field points at its parent.
func TestErrorLineIsTheField(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
	}{
		{"unknown key, second document", "# c\n---\n" + podYAML + "---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec:\n  containers:\n  - name: app\n    readinesProbe: {}\n", 21},
		{"List item", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n  spec:\n    containers:\n    - name: app\n      livenessProbe:\n        tcpSocket: {port: 80}\n        successThreshold: 2\n", 12},
		{"missing field: its parent", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: []\n", 5},
		{"JSON", "{\"apiVersion\": \"v1\", \"kind\": \"Pod\",\n \"metadata\": {\"name\": \"p\"},\n \"spec\": {\"containers\": [\n  {\"name\": \"app\",\n   \"readinessProbe\": {\"tcpSocket\": {\"port\": 0}}}]}}\n", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := DecodeAll([]byte(tc.src), "f.yaml", Options{})
			if len(r.Errors) == 0 {
				t.Fatal("no error")
			}
			var e *Error
			if errors.As(r.Errors[0], &e); e.Line != tc.line {
				t.Errorf("line %d, want %d: %v", e.Line, tc.line, e)
			}
		})
	}
}
