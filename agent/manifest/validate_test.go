package manifest

import (
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// basePod is a valid, defaulted pod: one container "app" with a named port
// "http" (8080) and an httpGet liveness probe on it, and a restartable init
// container "proxy" with a tcpSocket readiness probe.
func basePod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1ObjectMeta("web", "default"),
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyAlways,
			InitContainers: []v1.Container{{
				Name:          "proxy",
				RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways),
				ReadinessProbe: timed(&v1.Probe{ProbeHandler: v1.ProbeHandler{
					TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(15021)},
				}}),
			}},
			Containers: []v1.Container{{
				Name:  "app",
				Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				LivenessProbe: timed(&v1.Probe{ProbeHandler: v1.ProbeHandler{
					HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http"), Scheme: v1.URISchemeHTTP},
				}}),
			}},
		},
	}
}

func timed(p *v1.Probe) *v1.Probe {
	p.TimeoutSeconds, p.PeriodSeconds, p.SuccessThreshold, p.FailureThreshold = 1, 10, 1, 3
	return p
}

func live(p *v1.Pod) *v1.Probe  { return p.Spec.Containers[0].LivenessProbe }
func proxy(p *v1.Pod) *v1.Probe { return p.Spec.InitContainers[0].ReadinessProbe }

func TestValidatePodBaseIsValid(t *testing.T) {
	if errs := ValidatePod(basePod()); len(errs) != 0 {
		t.Fatalf("base pod: %v", errs)
	}
	if errs := ValidatePod(nil); len(errs) != 1 {
		t.Fatalf("nil pod: %v", errs)
	}
}

// TestValidatePod has one case per rule of spec 1.3 (and BR-26); want lists
// the exact field.Error strings.
func TestValidatePod(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(p *v1.Pod)
		want   []string
	}{
		{"no handler", func(p *v1.Pod) { live(p).HTTPGet = nil },
			[]string{"spec.containers[0].livenessProbe: Required value: must specify a handler type"}},
		{"two handlers", func(p *v1.Pod) { live(p).TCPSocket = &v1.TCPSocketAction{Port: intstr.FromInt32(1)} },
			[]string{"spec.containers[0].livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type"}},
		{"four handlers", func(p *v1.Pod) {
			live(p).Exec = &v1.ExecAction{Command: []string{"true"}}
			live(p).TCPSocket = &v1.TCPSocketAction{Port: intstr.FromInt32(1)}
			live(p).GRPC = &v1.GRPCAction{Port: 1}
		}, []string{
			"spec.containers[0].livenessProbe.httpGet: Forbidden: may not specify more than 1 handler type",
			"spec.containers[0].livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type",
			"spec.containers[0].livenessProbe.grpc: Forbidden: may not specify more than 1 handler type",
		}},
		{"negative initialDelaySeconds", func(p *v1.Pod) { live(p).InitialDelaySeconds = -1 },
			[]string{"spec.containers[0].livenessProbe.initialDelaySeconds: Invalid value: -1: must be greater than or equal to 0"}},
		{"negative timeoutSeconds", func(p *v1.Pod) { live(p).TimeoutSeconds = -1 },
			[]string{"spec.containers[0].livenessProbe.timeoutSeconds: Invalid value: -1: must be greater than or equal to 0"}},
		{"negative periodSeconds", func(p *v1.Pod) { live(p).PeriodSeconds = -5 },
			[]string{"spec.containers[0].livenessProbe.periodSeconds: Invalid value: -5: must be greater than or equal to 0"}},
		{"negative failureThreshold", func(p *v1.Pod) { live(p).FailureThreshold = -3 },
			[]string{"spec.containers[0].livenessProbe.failureThreshold: Invalid value: -3: must be greater than or equal to 0"}},
		{"negative successThreshold on readiness", func(p *v1.Pod) { proxy(p).SuccessThreshold = -1 },
			[]string{"spec.initContainers[0].readinessProbe.successThreshold: Invalid value: -1: must be greater than or equal to 0"}},
		{"liveness successThreshold 2", func(p *v1.Pod) { live(p).SuccessThreshold = 2 },
			[]string{"spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1"}},
		{"startup successThreshold 3", func(p *v1.Pod) {
			p.Spec.Containers[0].StartupProbe = timed(&v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}})
			p.Spec.Containers[0].StartupProbe.SuccessThreshold = 3
		}, []string{"spec.containers[0].startupProbe.successThreshold: Invalid value: 3: must be 1"}},
		{"readiness successThreshold 2 is fine", func(p *v1.Pod) { proxy(p).SuccessThreshold = 2 }, nil},
		{"terminationGracePeriodSeconds 0", func(p *v1.Pod) { live(p).TerminationGracePeriodSeconds = ptr.To[int64](0) },
			[]string{"spec.containers[0].livenessProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0"}},
		{"terminationGracePeriodSeconds 5 on liveness is fine", func(p *v1.Pod) { live(p).TerminationGracePeriodSeconds = ptr.To[int64](5) }, nil},
		{"terminationGracePeriodSeconds on readiness", func(p *v1.Pod) { proxy(p).TerminationGracePeriodSeconds = ptr.To[int64](5) },
			[]string{"spec.initContainers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes"}},
		{"probe on a regular init container", func(p *v1.Pod) { p.Spec.InitContainers[0].RestartPolicy = nil },
			[]string{"spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always"}},
		{"all probes on a regular init container", func(p *v1.Pod) {
			c := &p.Spec.InitContainers[0]
			c.RestartPolicy = nil
			c.LivenessProbe = c.ReadinessProbe.DeepCopy()
			c.StartupProbe = c.ReadinessProbe.DeepCopy()
		}, []string{
			"spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
			"spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
			"spec.initContainers[0].startupProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
		}},
		{"http scheme", func(p *v1.Pod) { live(p).HTTPGet.Scheme = "ftp" },
			[]string{`spec.containers[0].livenessProbe.httpGet.scheme: Unsupported value: "ftp": supported values: "HTTP", "HTTPS"`}},
		{"http scheme lower case", func(p *v1.Pod) { live(p).HTTPGet.Scheme = "https" },
			[]string{`spec.containers[0].livenessProbe.httpGet.scheme: Unsupported value: "https": supported values: "HTTP", "HTTPS"`}},
		{"http path empty", func(p *v1.Pod) { live(p).HTTPGet.Path = "" },
			[]string{"spec.containers[0].livenessProbe.httpGet.path: Required value"}},
		{"http header name", func(p *v1.Pod) {
			live(p).HTTPGet.HTTPHeaders = []v1.HTTPHeader{{Name: "X-Ok", Value: "1"}, {Name: "Bad Header", Value: "x"}}
		}, []string{`spec.containers[0].livenessProbe.httpGet.httpHeaders[1].name: Invalid value: "Bad Header": a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')`}},
		{"http port 0", func(p *v1.Pod) { live(p).HTTPGet.Port = intstr.FromInt32(0) },
			[]string{"spec.containers[0].livenessProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive"}},
		{"http port 65536", func(p *v1.Pod) { live(p).HTTPGet.Port = intstr.FromInt32(65536) },
			[]string{"spec.containers[0].livenessProbe.httpGet.port: Invalid value: 65536: must be between 1 and 65535, inclusive"}},
		{"http port numeric string", func(p *v1.Pod) { live(p).HTTPGet.Port = intstr.FromString("8080") },
			[]string{`spec.containers[0].livenessProbe.httpGet.port: Invalid value: "8080": must contain at least one letter (a-z)`}},
		{"http port name too long", func(p *v1.Pod) { live(p).HTTPGet.Port = intstr.FromString("a-very-long-port-name") },
			[]string{`spec.containers[0].livenessProbe.httpGet.port: Invalid value: "a-very-long-port-name": must be no more than 15 characters`}},
		{"http port unknown name is not an error", func(p *v1.Pod) { live(p).HTTPGet.Port = intstr.FromString("metrcis") }, nil},
		{"http2 with https", func(p *v1.Pod) {
			live(p).HTTPGet.Protocol = ptr.To(v1.HTTPProtocolHTTP2)
			live(p).HTTPGet.Scheme = v1.URISchemeHTTPS
		}, []string{`spec.containers[0].livenessProbe.httpGet.protocol: Invalid value: "HTTP2": may not be used with scheme HTTPS`}},
		{"http2 with host", func(p *v1.Pod) {
			live(p).HTTPGet.Protocol = ptr.To(v1.HTTPProtocolHTTP2)
			live(p).HTTPGet.Host = "127.0.0.1"
		}, []string{`spec.containers[0].livenessProbe.httpGet.protocol: Invalid value: "HTTP2": may not be used with host`}},
		{"http2 plain is fine", func(p *v1.Pod) { live(p).HTTPGet.Protocol = ptr.To(v1.HTTPProtocolHTTP2) }, nil},
		{"http1 with https is fine", func(p *v1.Pod) {
			live(p).HTTPGet.Protocol = ptr.To(v1.HTTPProtocolHTTP1)
			live(p).HTTPGet.Scheme = v1.URISchemeHTTPS
		}, nil},
		{"http protocol unknown", func(p *v1.Pod) { live(p).HTTPGet.Protocol = ptr.To(v1.HTTPProtocol("HTTP3")) },
			[]string{`spec.containers[0].livenessProbe.httpGet.protocol: Unsupported value: "HTTP3": supported values: "HTTP1", "HTTP2"`}},
		{"tcp port 0", func(p *v1.Pod) { proxy(p).TCPSocket.Port = intstr.FromInt32(0) },
			[]string{"spec.initContainers[0].readinessProbe.tcpSocket.port: Invalid value: 0: must be between 1 and 65535, inclusive"}},
		{"tcp port bad name", func(p *v1.Pod) { proxy(p).TCPSocket.Port = intstr.FromString("Admin") },
			[]string{`spec.initContainers[0].readinessProbe.tcpSocket.port: Invalid value: "Admin": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)`}},
		{"grpc port 0", func(p *v1.Pod) {
			live(p).HTTPGet = nil
			live(p).GRPC = &v1.GRPCAction{Port: 0}
		}, []string{"spec.containers[0].livenessProbe.grpc.port: Invalid value: 0: must be between 1 and 65535, inclusive"}},
		{"grpc port 70000", func(p *v1.Pod) {
			live(p).HTTPGet = nil
			live(p).GRPC = &v1.GRPCAction{Port: 70000}
		}, []string{"spec.containers[0].livenessProbe.grpc.port: Invalid value: 70000: must be between 1 and 65535, inclusive"}},
		{"exec without command", func(p *v1.Pod) {
			live(p).HTTPGet = nil
			live(p).Exec = &v1.ExecAction{}
		}, []string{"spec.containers[0].livenessProbe.exec.command: Required value"}},
		{"container name missing", func(p *v1.Pod) { p.Spec.Containers[0].Name = "" },
			[]string{"spec.containers[0].name: Required value"}},
		{"container name duplicate with init container", func(p *v1.Pod) { p.Spec.Containers[0].Name = "proxy" },
			[]string{`spec.containers[0].name: Duplicate value: "proxy"`}},
		{"container name invalid", func(p *v1.Pod) { p.Spec.Containers[0].Name = "App_1" },
			[]string{`spec.containers[0].name: Invalid value: "App_1": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`}},
		{"container port 0", func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 0 },
			[]string{"spec.containers[0].ports[0].containerPort: Required value"}},
		{"container port name duplicate", func(p *v1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, v1.ContainerPort{Name: "http", ContainerPort: 8081})
		}, []string{`spec.containers[0].ports[1].name: Duplicate value: "http"`}},
		{"no containers", func(p *v1.Pod) { p.Spec.Containers = nil },
			[]string{"spec.containers: Required value: a pod needs at least one container"}},
		{"pod name missing", func(p *v1.Pod) { p.Name = "" },
			[]string{"metadata.name: Required value: name is required"}},
		{"namespace invalid", func(p *v1.Pod) { p.Namespace = "Prod" },
			[]string{`metadata.namespace: Invalid value: "Prod": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`}},
		{"restartPolicy unknown", func(p *v1.Pod) { p.Spec.RestartPolicy = "Sometimes" },
			[]string{`spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"`}},
		{"ephemeral containers are ignored", func(p *v1.Pod) {
			p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
				Name: "debug", LivenessProbe: &v1.Probe{}}}}
		}, nil},
		{"lifecycle hooks are not probes", func(p *v1.Pod) {
			p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(0)}}}
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod()
			tc.mutate(p)
			var got []string
			for _, e := range ValidatePod(p) {
				got = append(got, e.Error())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

func TestSetDefaults(t *testing.T) {
	cases := []struct {
		name  string
		probe v1.Probe
		want  v1.Probe
	}{
		{"timing zero values", v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"x"}}}},
			v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"x"}}},
				TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}},
		{"explicit values kept", v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"x"}}},
			InitialDelaySeconds: 7, TimeoutSeconds: 2, PeriodSeconds: 3, SuccessThreshold: 4, FailureThreshold: 5},
			v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"x"}}},
				InitialDelaySeconds: 7, TimeoutSeconds: 2, PeriodSeconds: 3, SuccessThreshold: 4, FailureThreshold: 5}},
		{"negative values kept for validation", v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"x"}}},
			TimeoutSeconds: -1, PeriodSeconds: -1, SuccessThreshold: -1, FailureThreshold: -1},
			v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"x"}}},
				TimeoutSeconds: -1, PeriodSeconds: -1, SuccessThreshold: -1, FailureThreshold: -1}},
		{"httpGet path and scheme", v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(80)}}},
			timedValue(v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(80), Path: "/", Scheme: v1.URISchemeHTTP}}})},
		{"httpGet path and scheme kept", v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(80), Path: "/x?y=1", Scheme: v1.URISchemeHTTPS}}},
			timedValue(v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(80), Path: "/x?y=1", Scheme: v1.URISchemeHTTPS}}})},
		{"grpc service nil", v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9}}},
			timedValue(v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9, Service: ptr.To("")}}})},
		{"grpc service kept", v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9, Service: ptr.To("svc")}}},
			timedValue(v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9, Service: ptr.To("svc")}}})},
		{"tcpSocket untouched", v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromString("x")}}},
			timedValue(v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromString("x")}}})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, where := range []string{"liveness", "readiness", "startup", "init-liveness"} {
				p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a"}}, InitContainers: []v1.Container{{Name: "i"}}}}
				probe := tc.probe.DeepCopy()
				var got **v1.Probe
				switch where {
				case "liveness":
					got = &p.Spec.Containers[0].LivenessProbe
				case "readiness":
					got = &p.Spec.Containers[0].ReadinessProbe
				case "startup":
					got = &p.Spec.Containers[0].StartupProbe
				case "init-liveness":
					got = &p.Spec.InitContainers[0].LivenessProbe
				}
				*got = probe
				SetDefaults(p)
				if !reflect.DeepEqual(**got, tc.want) {
					t.Errorf("%s: got %+v, want %+v", where, **got, tc.want)
				}
			}
		})
	}
}

func timedValue(p v1.Probe) v1.Probe { return *timed(&p) }

func TestSetDefaultsPodLevel(t *testing.T) {
	p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a"}}}}
	SetDefaults(p)
	if p.Spec.RestartPolicy != v1.RestartPolicyAlways {
		t.Errorf("restartPolicy = %q, want Always", p.Spec.RestartPolicy)
	}
	p.Spec.RestartPolicy = v1.RestartPolicyNever
	SetDefaults(p)
	if p.Spec.RestartPolicy != v1.RestartPolicyNever {
		t.Errorf("restartPolicy overwritten: %q", p.Spec.RestartPolicy)
	}
	// Nothing else at container level: no probe appears, ports untouched.
	c := p.Spec.Containers[0]
	if c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil || c.ImagePullPolicy != "" || c.TerminationMessagePath != "" {
		t.Errorf("container changed: %+v", c)
	}
	// Ephemeral containers are left alone.
	p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "d", LivenessProbe: &v1.Probe{}}}}
	SetDefaults(p)
	if got := p.Spec.EphemeralContainers[0].LivenessProbe.PeriodSeconds; got != 0 {
		t.Errorf("ephemeral container probe defaulted: period %d", got)
	}
	SetDefaults(nil) // no panic
}

func TestWarnings(t *testing.T) {
	p := basePod()
	if w := Warnings(p); len(w) != 0 {
		t.Fatalf("base pod warnings: %v", w)
	}
	live(p).HTTPGet.Port = intstr.FromString("metrcis")
	live(p).HTTPGet.Host = "__PILLAR__LOCAL__DNS__"
	proxy(p).TCPSocket.Port = intstr.FromString("admin")
	p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: "setup", LivenessProbe: &v1.Probe{
		ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromString("nope")}}}})
	want := []string{
		`container "proxy": spec.initContainers[0].readinessProbe.tcpSocket.port: port "admin" is not among the container's ports; the kubelet reports every run of this probe as errored (port "admin" not found)`,
		`container "app": spec.containers[0].livenessProbe.httpGet.port: port "metrcis" is not among the container's ports; the kubelet reports every run of this probe as errored (port "metrcis" not found)`,
		`container "app": spec.containers[0].livenessProbe.httpGet.host: "__PILLAR__LOCAL__DNS__" looks like an unfilled template placeholder (__PILLAR__LOCAL__DNS__)`,
	}
	if got := Warnings(p); !reflect.DeepEqual(got, want) {
		t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestAnnotationsOverTheAPIServerLimit: annotations of more than 256 KiB in
// total (keys and values, apimachinery's TotalAnnotationSizeLimitB) are
// refused naming the file, the pod and the field, for a Pod and for a
// workload's template; exactly at the limit they load. An annotation key
// the API server refuses is refused too.
func TestAnnotationsOverTheAPIServerLimit(t *testing.T) {
	const limit = 256 << 10
	doc := func(kind string, valueLen int) string {
		value := strings.Repeat("x", valueLen)
		if kind == "Pod" {
			return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: big\n  annotations: {note: " + value + "}\nspec: {containers: [{name: app}]}\n"
		}
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: big}\nspec:\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata:\n      labels: {a: b}\n      annotations: {note: " + value + "}\n    spec: {containers: [{name: app}]}\n"
	}
	for kind, want := range map[string]string{
		"Pod":        "big.yaml: document 1: pod default/big: metadata.annotations: Too long: may not be more than 262144 bytes",
		"Deployment": "big.yaml: document 1: deployment default/big: spec.template.metadata.annotations: Too long: may not be more than 262144 bytes",
	} {
		r := DecodeAll([]byte(doc(kind, limit-len("note")+1)), "big.yaml", Options{})
		if got := errStrings(t, r.Errors); len(r.Entries) != 0 || len(got) != 1 || got[0] != want {
			t.Errorf("%s over the limit: entries %d, errors %q\nwant %q", kind, len(r.Entries), got, want)
		}
		if r := DecodeAll([]byte(doc(kind, limit-len("note"))), "big.yaml", Options{}); len(r.Entries) != 1 || len(r.Errors) != 0 {
			t.Errorf("%s at the limit: entries %d, errors %v", kind, len(r.Entries), r.Errors)
		}
	}
	r := DecodeAll([]byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: k\n  annotations: {'bad key': v}\nspec: {containers: [{name: app}]}\n"), "k.yaml", Options{})
	if got := errStrings(t, r.Errors); len(got) != 1 || !strings.HasPrefix(got[0], `k.yaml: document 1: pod default/k: metadata.annotations: Invalid value: "bad key"`) {
		t.Errorf("bad key: %q", got)
	}
}
