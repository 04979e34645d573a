package customprobe

import (
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/probed/probed/runtime"
)

// testPod has containers "app" (named port http) and "worker" (with its own
// readiness probe), a native sidecar "proxy" and a regular init container
// "setup".
func testPod(annotation string) *v1.Pod {
	p := &v1.Pod{}
	p.Name, p.Namespace = "web", "shop"
	if annotation != "" {
		p.Annotations = map[string]string{Annotation: annotation}
	}
	p.Spec.InitContainers = []v1.Container{
		{Name: "setup"},
		{Name: "proxy", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)},
	}
	p.Spec.Containers = []v1.Container{
		{Name: "app", Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}}},
		{Name: "worker", ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}},
	}
	return p
}

func errStrings(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

func TestParseExample(t *testing.T) {
	pod := testPod(`[{"container":"app","type":"readiness","periodSeconds":1,"plugin":{"name":"http-match","port":8080,"params":{"path":"/ready","body":"ok"}}}]`)
	got, errs := Parse(pod, nil)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	want := []Probe{{
		Container: "app",
		Type:      runtime.Readiness,
		Probe:     v1.Probe{TimeoutSeconds: 1, PeriodSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
		Plugin: runtime.PluginAction{Name: "http-match", Port: intstr.FromInt32(8080),
			Params: map[string]string{"path": "/ready", "body": "ok"}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseAbsentOrEmpty(t *testing.T) {
	if got, errs := Parse(nil, nil); got != nil || errs != nil {
		t.Errorf("nil pod: %v %v", got, errs)
	}
	if got, errs := Parse(testPod(""), nil); got != nil || errs != nil {
		t.Errorf("no annotation: %v %v", got, errs)
	}
	for _, v := range []string{" ", "[]", "null", " [ ] "} {
		p := testPod("x")
		p.Annotations[Annotation] = v
		if got, errs := Parse(p, nil); len(got) != 0 || len(errs) != 0 {
			t.Errorf("%q: %v %v", v, got, errs)
		}
	}
}

// TestParseDefaultsAndFields covers every default and every field.
func TestParseDefaultsAndFields(t *testing.T) {
	cases := []struct {
		name, json string
		want       Probe
	}{
		{"all defaults", `{"container":"app","type":"liveness","plugin":{"name":"k"}}`,
			Probe{Container: "app", Type: runtime.Liveness, Plugin: runtime.PluginAction{Name: "k"},
				Probe: v1.Probe{TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}}},
		{"all fields", `{"container":"app","type":"Startup","initialDelaySeconds":5,"timeoutSeconds":2,"periodSeconds":3,
			"successThreshold":1,"failureThreshold":30,"terminationGracePeriodSeconds":7,
			"plugin":{"name":"k","port":"http","params":{}}}`,
			Probe{Container: "app", Type: runtime.Startup,
				Plugin: runtime.PluginAction{Name: "k", Port: intstr.FromString("http"), Params: map[string]string{}},
				Probe: v1.Probe{InitialDelaySeconds: 5, TimeoutSeconds: 2, PeriodSeconds: 3, SuccessThreshold: 1, FailureThreshold: 30,
					TerminationGracePeriodSeconds: ptr.To[int64](7)}}},
		{"readiness successThreshold 3", `{"container":"app","type":"READINESS","successThreshold":3,"plugin":{"name":"k","port":0,"params":null}}`,
			Probe{Container: "app", Type: runtime.Readiness, Plugin: runtime.PluginAction{Name: "k", Port: intstr.FromInt32(0)},
				Probe: v1.Probe{TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 3, FailureThreshold: 3}}},
		{"native sidecar", `{"container":"proxy","type":"startup","plugin":{"name":"k","port":15021}}`,
			Probe{Container: "proxy", Type: runtime.Startup, Plugin: runtime.PluginAction{Name: "k", Port: intstr.FromInt32(15021)},
				Probe: v1.Probe{TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}}},
		{"unknown port name is left to run time (BR-20)", `{"container":"app","type":"liveness","plugin":{"name":"k","port":"metrcis"}}`,
			Probe{Container: "app", Type: runtime.Liveness, Plugin: runtime.PluginAction{Name: "k", Port: intstr.FromString("metrcis")},
				Probe: v1.Probe{TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}}},
		{"worker liveness (it has readiness only)", `{"container":"worker","type":"liveness","plugin":{"name":"k"}}`,
			Probe{Container: "worker", Type: runtime.Liveness, Plugin: runtime.PluginAction{Name: "k"},
				Probe: v1.Probe{TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := Parse(testPod("["+tc.json+"]"), nil)
			if len(errs) != 0 {
				t.Fatal(errs)
			}
			if len(got) != 1 || !reflect.DeepEqual(got[0], tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestParseErrors has one case per rule; want lists the exact errors.
func TestParseErrors(t *testing.T) {
	const p0 = "metadata.annotations[probed.io/probes][0]"
	const p1 = "metadata.annotations[probed.io/probes][1]"
	known := func(k string) bool { return k == "k" || k == "http-match" }
	cases := []struct {
		name, value string
		knownKind   func(string) bool
		want        []string
		kept        int // probes returned despite the errors
	}{
		{"not a list", `{"container":"app"}`, nil,
			[]string{`metadata.annotations[probed.io/probes]: Invalid value: "{\"container\":\"app\"}": must be a JSON list of probe objects: cannot unmarshal object into Go value of type []json.RawMessage`}, 0},
		{"bad JSON", `[{"container":}]`, nil,
			[]string{`metadata.annotations[probed.io/probes]: Invalid value: "[{\"container\":}]": must be a JSON list of probe objects: invalid character '}' looking for beginning of value`}, 0},
		{"element not an object", `["app"]`, nil,
			[]string{p0 + `: Invalid value: "\"app\"": must be a JSON object`}, 0},
		{"unknown field", `[{"container":"app","type":"liveness","initialDelaySecond":5,"plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.initialDelaySecond: Invalid value: "initialDelaySecond": unknown field (did you mean "initialDelaySeconds"?)`}, 0},
		{"case matters", `[{"Container":"app","type":"liveness","plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.Container: Invalid value: "Container": unknown field (did you mean "container"?)`,
				p0 + `.container: Required value: the name of a container of the pod`}, 0},
		{"unknown plugin field", `[{"container":"app","type":"liveness","plugin":{"name":"k","parms":{}}}]`, nil,
			[]string{p0 + `.plugin.parms: Invalid value: "parms": unknown field (did you mean "params"?)`}, 0},
		{"duplicate field", `[{"container":"app","container":"app","type":"liveness","plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.container: Duplicate value: "container"`}, 0},
		{"missing container, type and plugin", `[{}]`, nil,
			[]string{p0 + ".container: Required value: the name of a container of the pod",
				p0 + ".type: Required value: one of liveness, readiness, startup",
				p0 + ": Required value: must specify a handler type (httpGet, tcpSocket, grpc, exec or plugin)"}, 0},
		{"unknown container", `[{"container":"db","type":"liveness","plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.container: Invalid value: "db": pod shop/web has no container "db"`}, 0},
		{"empty container", `[{"container":"","type":"liveness","plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.container: Required value: the name of a container of the pod`}, 0},
		{"regular init container", `[{"container":"setup","type":"readiness","plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.container: Invalid value: "setup": container "setup" of pod shop/web is an init container without restartPolicy=Always; it may not have probes`}, 0},
		{"unknown type", `[{"container":"app","type":"readyness","plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.type: Unsupported value: "readyness": supported values: "liveness", "readiness", "startup"`}, 0},
		{"type not a string", `[{"container":"app","type":1,"plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.type: Invalid value: "1": must be a string`}, 0},
		{"missing plugin name", `[{"container":"app","type":"liveness","plugin":{}}]`, nil,
			[]string{p0 + `.plugin.name: Required value: the probe kind a plugin serves`}, 0},
		{"empty plugin name", `[{"container":"app","type":"liveness","plugin":{"name":""}}]`, nil,
			[]string{p0 + `.plugin.name: Required value: the probe kind a plugin serves`}, 0},
		{"plugin not an object", `[{"container":"app","type":"liveness","plugin":"k"}]`, nil,
			[]string{p0 + `.plugin: Invalid value: "\"k\"": must be a JSON object`}, 0},
		{"built-in kind", `[{"container":"app","type":"liveness","plugin":{"name":"http"}}]`, nil,
			[]string{p0 + `.plugin.name: Invalid value: "http": is a built-in probe kind; declare it as the container's own probe (exec, httpGet, tcpSocket, grpc) instead`}, 0},
		{"unknown kind", `[{"container":"app","type":"liveness","plugin":{"name":"redis-ping"}}]`, known,
			[]string{p0 + `.plugin.name: Not found: "redis-ping": no plugin serves probe kind "redis-ping" (pod shop/web, container "app")`}, 0},
		{"any kind without knownKind", `[{"container":"app","type":"liveness","plugin":{"name":"redis-ping"}}]`, nil, nil, 1},
		{"port 0 means none", `[{"container":"app","type":"liveness","plugin":{"name":"k","port":0}}]`, nil, nil, 1},
		{"port too large", `[{"container":"app","type":"liveness","plugin":{"name":"k","port":65536}}]`, nil,
			[]string{p0 + `.plugin.port: Invalid value: 65536: must be between 1 and 65535, inclusive`}, 0},
		{"port negative", `[{"container":"app","type":"liveness","plugin":{"name":"k","port":-1}}]`, nil,
			[]string{p0 + `.plugin.port: Invalid value: -1: must be between 1 and 65535, inclusive`}, 0},
		{"port numeric string", `[{"container":"app","type":"liveness","plugin":{"name":"k","port":"8080"}}]`, nil,
			[]string{p0 + `.plugin.port: Invalid value: "8080": must contain at least one letter (a-z)`}, 0},
		{"port bad name", `[{"container":"app","type":"liveness","plugin":{"name":"k","port":"HTTP"}}]`, nil,
			[]string{p0 + `.plugin.port: Invalid value: "HTTP": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)`,
				p0 + `.plugin.port: Invalid value: "HTTP": must contain at least one letter (a-z)`}, 0},
		{"port float", `[{"container":"app","type":"liveness","plugin":{"name":"k","port":80.5}}]`, nil,
			[]string{p0 + `.plugin.port: Invalid value: "80.5": must be a port number or a port name`}, 0},
		{"params values must be strings", `[{"container":"app","type":"liveness","plugin":{"name":"k","params":{"n":1,"ok":"x","b":true,"z":null}}}]`, nil,
			[]string{p0 + `.plugin.params[b]: Invalid value: "true": must be a string`,
				p0 + `.plugin.params[n]: Invalid value: "1": must be a string`,
				p0 + `.plugin.params[z]: Invalid value: "null": must be a string`}, 0},
		{"params not an object", `[{"container":"app","type":"liveness","plugin":{"name":"k","params":["a"]}}]`, nil,
			[]string{p0 + `.plugin.params: Invalid value: "[\"a\"]": must be a JSON object`}, 0},
		{"type already in the spec", `[{"container":"worker","type":"readiness","plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.type: Forbidden: container "worker" of pod shop/web already has a readinessProbe in its spec; a container has at most one probe of each type`}, 0},
		{"type twice in the annotation", `[{"container":"app","type":"startup","plugin":{"name":"k"}},{"container":"app","type":"Startup","plugin":{"name":"j"}}]`, nil,
			[]string{p1 + `.type: Duplicate value: "Startup": container "app" of pod shop/web already has a custom startup probe at index 0`}, 1},
		{"liveness successThreshold", `[{"container":"app","type":"liveness","successThreshold":2,"plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.successThreshold: Invalid value: 2: must be 1`}, 0},
		{"startup successThreshold", `[{"container":"app","type":"startup","successThreshold":5,"plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.successThreshold: Invalid value: 5: must be 1`}, 0},
		{"negative timing", `[{"container":"app","type":"readiness","initialDelaySeconds":-1,"timeoutSeconds":-2,"periodSeconds":-3,"successThreshold":-4,"failureThreshold":-5,"plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.initialDelaySeconds: Invalid value: -1: must be greater than or equal to 0`,
				p0 + `.timeoutSeconds: Invalid value: -2: must be greater than or equal to 0`,
				p0 + `.periodSeconds: Invalid value: -3: must be greater than or equal to 0`,
				p0 + `.successThreshold: Invalid value: -4: must be greater than or equal to 0`,
				p0 + `.failureThreshold: Invalid value: -5: must be greater than or equal to 0`}, 0},
		{"terminationGracePeriodSeconds 0", `[{"container":"app","type":"liveness","terminationGracePeriodSeconds":0,"plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0`}, 0},
		{"terminationGracePeriodSeconds on readiness", `[{"container":"app","type":"readiness","terminationGracePeriodSeconds":30,"plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.terminationGracePeriodSeconds: Invalid value: 30: must not be set for readinessProbes`}, 0},
		{"int field not an integer", `[{"container":"app","type":"liveness","periodSeconds":"10","timeoutSeconds":1.5,"failureThreshold":4294967296,"plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.periodSeconds: Invalid value: "\"10\"": must be an integer (32-bit)`,
				p0 + `.timeoutSeconds: Invalid value: "1.5": must be an integer (32-bit)`,
				p0 + `.failureThreshold: Invalid value: "4294967296": must be an integer (32-bit)`}, 0},
		// Built-in handlers with v1.Probe's own field names.
		{"httpGet", `[{"container":"app","type":"readiness","httpGet":{"path":"/ready","port":8080}}]`, nil, nil, 1},
		{"tcpSocket named port", `[{"container":"app","type":"liveness","tcpSocket":{"port":"http"}}]`, nil, nil, 1},
		{"grpc", `[{"container":"app","type":"liveness","grpc":{"port":9090}}]`, nil, nil, 1},
		{"exec", `[{"container":"app","type":"liveness","exec":{"command":["true"]}}]`, nil, nil, 1},
		{"two handlers", `[{"container":"app","type":"liveness","tcpSocket":{"port":80},"plugin":{"name":"k"}}]`, nil,
			[]string{p0 + `.plugin: Forbidden: may not specify more than 1 handler type`}, 0},
		{"httpGet misspelled field", `[{"container":"app","type":"liveness","httpGet":{"paht":"/","port":80}}]`, nil,
			[]string{p0 + `.httpGet: Invalid value: "{\"paht\":\"/\",\"port\":80}": unknown field "paht"`}, 0},
		{"httpGet fields are case-sensitive", `[{"container":"app","type":"liveness","httpGet":{"Path":"/","port":80}}]`, nil,
			[]string{p0 + `.httpGet: Invalid value: "{\"Path\":\"/\",\"port\":80}": unknown field "Path"`}, 0},
		{"httpGet bad port", `[{"container":"app","type":"liveness","httpGet":{"port":0}}]`, nil,
			[]string{p0 + `.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive`}, 0},
		{"httpGet bad scheme", `[{"container":"app","type":"liveness","httpGet":{"port":80,"scheme":"FTP"}}]`, nil,
			[]string{p0 + `.httpGet.scheme: Unsupported value: "FTP": supported values: "HTTP", "HTTPS"`}, 0},
		{"exec without command", `[{"container":"app","type":"liveness","exec":{}}]`, nil,
			[]string{p0 + `.exec.command: Required value`}, 0},
		{"grpc bad port", `[{"container":"app","type":"liveness","grpc":{"port":70000}}]`, nil,
			[]string{p0 + `.grpc.port: Invalid value: 70000: must be between 1 and 65535, inclusive`}, 0},
		{"handler not an object", `[{"container":"app","type":"liveness","tcpSocket":80}]`, nil,
			[]string{p0 + `.tcpSocket: Invalid value: "80": must be a JSON object`}, 0},
		{"one bad element keeps the others", `[{"container":"app","type":"liveness","plugin":{"name":"k"}},{"container":"nope","type":"liveness","plugin":{"name":"k"}}]`, nil,
			[]string{p1 + `.container: Invalid value: "nope": pod shop/web has no container "nope"`}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := Parse(testPod(tc.value), tc.knownKind)
			if s := errStrings(errs); !reflect.DeepEqual(s, tc.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(s, "\n  "), strings.Join(tc.want, "\n  "))
			}
			if len(got) != tc.kept {
				t.Errorf("kept %d probes, want %d: %+v", len(got), tc.kept, got)
			}
		})
	}
}

// TestParseBuiltinHandlerDefaults: built-in handlers of the annotation get
// the API server's defaults (spec 1.2) and keep their handler, so the
// manager runs them with the built-in handlers.
func TestParseBuiltinHandlerDefaults(t *testing.T) {
	got, errs := Parse(testPod(`[{"container":"app","type":"readiness","httpGet":{"port":8080}},{"container":"app","type":"liveness","grpc":{"port":9090}}]`), nil)
	if len(errs) != 0 || len(got) != 2 {
		t.Fatalf("got %+v, %v", got, errs)
	}
	g := got[0].Probe.HTTPGet
	if g == nil || g.Path != "/" || g.Scheme != v1.URISchemeHTTP || got[0].Kind() != runtime.KindHTTP {
		t.Errorf("httpGet not defaulted: %+v kind %s", g, got[0].Kind())
	}
	if s := got[1].Probe.GRPC; s == nil || s.Service == nil || *s.Service != "" || got[1].Kind() != runtime.KindGRPC {
		t.Errorf("grpc not defaulted: %+v kind %s", s, got[1].Kind())
	}
	if got[0].Probe.PeriodSeconds != 10 || got[0].Probe.TimeoutSeconds != 1 {
		t.Errorf("timing not defaulted: %+v", got[0].Probe)
	}
}

func TestParseTooLong(t *testing.T) {
	v := "[" + strings.Repeat(" ", MaxAnnotationBytes) + "]"
	got, errs := Parse(testPod(v), nil)
	if len(got) != 0 || len(errs) != 1 || errs[0].Type != field.ErrorTypeTooLong {
		t.Errorf("got %v %v", got, errs)
	}
}
