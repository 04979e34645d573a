package offload_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/probed/probed/agent/kube/offload"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

const gate = v1.PodConditionType("probed.io/ready")

// agents is the config of node agents with the CLI's defaults
// (--max-probes-per-pod 32, --min-probe-period 1s, no --allow-probe-host),
// the container runtime when runtime is set, and liveness restarts in
// every namespace but "norestart" when restarts is set.
func agents(runtime, restarts bool) offload.Config {
	opts := customprobe.Options{Egress: egress.NewRule(nil), Limits: customprobe.Limits{
		MaxProbes: 32, MaxProbesFlag: "--max-probes-per-pod", MinPeriod: time.Second, MinPeriodFlag: "--min-probe-period"}}
	execRefused := ""
	if !runtime {
		execRefused = "no container runtime"
	}
	cfg := offload.Config{Policy: podprobes.Cluster(opts, execRefused), ReadinessGate: gate}
	cfg.Restarts = func(ns string) string {
		if !restarts || ns == "norestart" {
			return "no restarts in " + ns
		}
		return ""
	}
	return cfg
}

func httpProbe(path string, port int32) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port), Scheme: v1.URISchemeHTTP}},
		TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
}

func tcpProbe(port int32) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(port)}},
		TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
}

func execProbe(cmd ...string) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}},
		TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
}

// webPod is the workload: an HTTP readiness probe, a TCP liveness
// probe and a startup probe on app, an exec readiness probe on a sidecar.
func webPod() *v1.Pod {
	p := &v1.Pod{}
	p.Name, p.Namespace = "web", "shop"
	p.Annotations = map[string]string{"example.com/keep": "yes"}
	startup := httpProbe("/started", 8080)
	startup.FailureThreshold = 30
	p.Spec.Containers = []v1.Container{
		{Name: "app", ReadinessProbe: httpProbe("/ready", 8080), LivenessProbe: tcpProbe(8080), StartupProbe: startup},
		{Name: "cache", ReadinessProbe: execProbe("redis-cli", "ping")},
	}
	return p
}

func moved(t *testing.T, res offload.Result, want ...string) {
	t.Helper()
	if !reflect.DeepEqual(res.Moved, want) {
		t.Fatalf("moved %q, want %q", res.Moved, want)
	}
}

// record decodes the pod's record.
func record(t *testing.T, p *v1.Pod) []customprobe.Offloaded {
	t.Helper()
	var out []customprobe.Offloaded
	if err := json.Unmarshal([]byte(p.Annotations[offload.RecordAnnotation]), &out); err != nil {
		t.Fatalf("record %q: %v", p.Annotations[offload.RecordAnnotation], err)
	}
	return out
}

// With the container runtime and liveness restarts, every probe moves:
// none is left in the spec, the record holds each unchanged, the gate is
// added once, the pod's other annotations stay; the agents' view of the
// moved pod is exactly the moved probes, of origin offloaded.
func TestMoveEverything(t *testing.T) {
	pod := webPod()
	orig := pod.DeepCopy()
	cfg := agents(true, true)
	out, res := offload.Move(pod, cfg)
	if !apiequality.Semantic.DeepEqual(pod, orig) {
		t.Fatal("Move changed its input")
	}
	moved(t, res, "app/startup", "app/readiness", "app/liveness", "cache/readiness")
	for _, c := range out.Spec.Containers {
		if c.ReadinessProbe != nil || c.LivenessProbe != nil || c.StartupProbe != nil {
			t.Fatalf("container %s keeps a probe in its spec", c.Name)
		}
	}
	if !reflect.DeepEqual(out.Spec.ReadinessGates, []v1.PodReadinessGate{{ConditionType: gate}}) {
		t.Fatalf("readiness gates %+v", out.Spec.ReadinessGates)
	}
	if out.Annotations["example.com/keep"] != "yes" {
		t.Fatal("another annotation was lost")
	}
	rec := record(t, out)
	for i, want := range []struct {
		c, t  string
		probe *v1.Probe
	}{{"app", "startup", orig.Spec.Containers[0].StartupProbe}, {"app", "readiness", orig.Spec.Containers[0].ReadinessProbe},
		{"app", "liveness", orig.Spec.Containers[0].LivenessProbe}, {"cache", "readiness", orig.Spec.Containers[1].ReadinessProbe}} {
		var got v1.Probe
		if err := json.Unmarshal(rec[i].Probe, &got); err != nil || rec[i].Container != want.c || rec[i].Type != want.t || !apiequality.Semantic.DeepEqual(&got, want.probe) {
			t.Errorf("record[%d] = %s/%s %s, want %s/%s %+v", i, rec[i].Container, rec[i].Type, rec[i].Probe, want.c, want.t, want.probe)
		}
	}
	if n, ok := offload.ReadNote(out); !ok || n.ReadinessGate != string(gate) || len(n.Left) != 0 {
		t.Fatalf("note %+v %v", n, ok)
	}
	view := podprobes.Of(out, cfg.Policy)
	if len(view.Probes) != 4 || len(view.Refused) != 0 {
		t.Fatalf("the agents' view: %d probes, refused %+v", len(view.Probes), view.Refused)
	}
	for _, p := range view.Probes {
		if p.Origin != runtime.OriginOffloaded {
			t.Errorf("%s/%s of origin %s", p.Container.Name, p.Type.Lower(), p.Origin)
		}
	}
}

// What the agents cannot do stays with the kubelet, said in the note:
// without the container runtime the exec probe; without liveness restarts
// liveness and startup. The readiness probes move and the gate comes with
// them.
func TestMoveWhatTheAgentsRun(t *testing.T) {
	out, res := offload.Move(webPod(), agents(false, false))
	moved(t, res, "app/readiness")
	c := out.Spec.Containers
	if c[0].ReadinessProbe != nil || c[0].LivenessProbe == nil || c[0].StartupProbe == nil || c[1].ReadinessProbe == nil {
		t.Fatalf("spec after the move: %+v", c)
	}
	n, _ := offload.ReadNote(out)
	if n.ReadinessGate != string(gate) || len(n.Left) != 2 {
		t.Fatalf("note %+v", n)
	}
	if got := n.Left[0]; !reflect.DeepEqual(got.Probes, []string{"app/startup", "app/liveness"}) || got.Reason != "no restarts in shop" {
		t.Errorf("left[0] %+v", got)
	}
	if got := n.Left[1]; !reflect.DeepEqual(got.Probes, []string{"cache/readiness"}) ||
		got.Reason != "spec.containers[1].readinessProbe.exec: Forbidden: no container runtime" {
		t.Errorf("left[1] %+v", got)
	}
}

// A startup probe moves only with its container's other probes: the
// kubelet holds its own probes until its own startup probe succeeds, and
// would not wait for probed's.
func TestStartupStaysWithItsContainersProbes(t *testing.T) {
	pod := webPod()
	pod.Spec.Containers[0].LivenessProbe = execProbe("check")
	out, res := offload.Move(pod, agents(false, true))
	moved(t, res, "app/readiness")
	if out.Spec.Containers[0].StartupProbe == nil || out.Spec.Containers[0].LivenessProbe == nil {
		t.Fatal("the startup probe moved while the liveness probe stayed")
	}
	n, _ := offload.ReadNote(out)
	var reasons []string
	for _, l := range n.Left {
		reasons = append(reasons, strings.Join(l.Probes, ",")+": "+l.Reason)
	}
	want := []string{
		"app/startup: its container's liveness probe stays with the kubelet, which holds its probes until its own startup probe succeeds",
		"app/liveness: spec.containers[0].livenessProbe.exec: Forbidden: no container runtime",
		"cache/readiness: spec.containers[1].readinessProbe.exec: Forbidden: no container runtime",
	}
	if !reflect.DeepEqual(reasons, want) {
		t.Fatalf("left:\n%s", strings.Join(reasons, "\n"))
	}
}

// A probe with a host the agents' egress rule refuses, a period under
// their shortest and a probe type the probed.io/probes annotation
// declares for the same container all stay with the kubelet; a host the
// operator allows moves.
func TestMoveRefusedByTheAgentsRules(t *testing.T) {
	pod := webPod()
	pod.Spec.Containers[0].ReadinessProbe.HTTPGet.Host = "10.9.8.7"
	pod.Spec.Containers[0].LivenessProbe.PeriodSeconds = 1
	pod.Annotations[customprobe.Annotation] = `[{"container":"cache","type":"readiness","tcpSocket":{"port":6379}}]`
	cfg := agents(true, true)
	cfg.Policy = podprobes.Cluster(customprobe.Options{Egress: egress.NewRule(nil), Limits: customprobe.Limits{MinPeriod: 2 * time.Second}}, "")
	out, res := offload.Move(pod, cfg)
	moved(t, res)
	n, _ := offload.ReadNote(out)
	got := map[string]string{}
	for _, l := range n.Left {
		for _, p := range l.Probes {
			got[p] = l.Reason
		}
	}
	for probe, want := range map[string]string{
		"app/readiness":   "spec.containers[0].readinessProbe.httpGet.host: Forbidden",
		"app/liveness":    "spec.containers[0].livenessProbe.periodSeconds: Invalid value",
		"app/startup":     "its container's readiness probe stays with the kubelet",
		"cache/readiness": "metadata.annotations[probed.io/probes][0]",
	} {
		if !strings.Contains(got[probe], want) {
			t.Errorf("%s left because %q, want it to say %q", probe, got[probe], want)
		}
	}
	if len(out.Spec.ReadinessGates) != 0 || n.ReadinessGate != "" || offload.Offloaded(out) {
		t.Fatalf("nothing moved, yet gates %+v, note %+v, record %v", out.Spec.ReadinessGates, n, offload.Offloaded(out))
	}

	allowed := agents(true, true)
	allowed.Policy = podprobes.Cluster(customprobe.Options{Egress: egress.NewRule([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})}, "")
	pod = webPod()
	pod.Spec.Containers[0].ReadinessProbe.HTTPGet.Host = "10.9.8.7"
	if _, res := offload.Move(pod, allowed); !reflect.DeepEqual(res.Moved, []string{"app/startup", "app/readiness", "app/liveness", "cache/readiness"}) {
		t.Fatalf("with the host allowed: moved %q", res.Moved)
	}
}

// Idempotent: a second Move of the moved pod (a reinvocation, a re-created
// pod carrying the record) gives the same pod; Undo gives the pod back as
// it came; the gate a tenant listed is neither added twice nor taken by
// Undo.
func TestMoveIsIdempotentAndUndone(t *testing.T) {
	for _, cfg := range []offload.Config{agents(true, true), agents(false, false)} {
		pod := webPod()
		once, _ := offload.Move(pod, cfg)
		twice, res := offload.Move(once, cfg)
		if !apiequality.Semantic.DeepEqual(once, twice) {
			t.Fatalf("Move(Move(pod)) differs:\n%+v\n%+v", once, twice)
		}
		if len(res.Moved) == 0 {
			t.Fatal("the second Move moved nothing")
		}
		if back := offload.Undo(twice); !apiequality.Semantic.DeepEqual(back, pod) {
			t.Fatalf("Undo(Move(pod)) is not the pod:\n%+v\n%+v", back, pod)
		}
	}
	gated := webPod()
	gated.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	out, _ := offload.Move(gated, agents(true, true))
	if len(out.Spec.ReadinessGates) != 1 {
		t.Fatalf("gates %+v", out.Spec.ReadinessGates)
	}
	if n, _ := offload.ReadNote(out); n.ReadinessGate != "" {
		t.Fatalf("the note claims the tenant's gate: %+v", n)
	}
	if back := offload.Undo(out); !apiequality.Semantic.DeepEqual(back, gated) {
		t.Fatalf("Undo took the tenant's gate: %+v", back.Spec.ReadinessGates)
	}
}

// A pod that arrives with a record and a note it wrote itself: the
// record's valid elements for containers without that probe go to the
// spec, then move under the rules like the spec's own (the tenant could
// have written them there); an element for a probe the spec has loses to
// the spec; a broken element, one for a regular init container and one
// for a container the pod lacks restore nothing; a forged note's gate
// claim removes only that gate. Nothing escapes the agents' rules: the
// exec element stays with the kubelet without the runtime.
func TestMoveForgedRecord(t *testing.T) {
	pod := webPod()
	pod.Spec.InitContainers = []v1.Container{{Name: "setup"}}
	pod.Spec.Containers[1].ReadinessProbe = nil
	pod.Annotations[offload.RecordAnnotation] = `[` +
		`{"container":"cache","type":"readiness","probe":{"exec":{"command":["sh","-c","curl evil"]}}},` +
		`{"container":"cache","type":"liveness","probe":{"tcpSocket":{"port":6379}}},` +
		`{"container":"app","type":"readiness","probe":{"tcpSocket":{"port":1}}},` +
		`{"container":"setup","type":"readiness","probe":{"tcpSocket":{"port":1}}},` +
		`{"container":"ghost","type":"readiness","probe":{"tcpSocket":{"port":1}}},` +
		`{"container":"app","type":"liveness","probe":{"tcpSocket":{"port":1},"hostile":true}},` +
		`7]`
	pod.Annotations[offload.NoteAnnotation] = `{"readinessGate":"example.com/other","leftToKubelet":[{"probes":["x/y"],"reason":"forged"}]}`
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/other"}}
	out, res := offload.Move(pod, agents(false, true))
	moved(t, res, "app/startup", "app/readiness", "app/liveness", "cache/liveness")
	cache := out.Spec.Containers[1]
	if cache.ReadinessProbe == nil || cache.ReadinessProbe.Exec == nil || cache.LivenessProbe != nil {
		t.Fatalf("cache after the move: %+v", cache)
	}
	if out.Spec.Containers[0].ReadinessProbe != nil {
		t.Fatal("app's readiness probe stayed")
	}
	rec := record(t, out)
	if string(rec[1].Probe) != `{"httpGet":{"path":"/ready","port":8080,"scheme":"HTTP"},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3}` {
		t.Fatalf("the spec lost to the forged record: %s", rec[1].Probe)
	}
	if !reflect.DeepEqual(out.Spec.ReadinessGates, []v1.PodReadinessGate{{ConditionType: gate}}) {
		t.Fatalf("gates %+v", out.Spec.ReadinessGates)
	}
	n, _ := offload.ReadNote(out)
	if len(n.Left) != 1 || n.Left[0].Probes[0] != "cache/readiness" {
		t.Fatalf("note %+v", n)
	}
}

// 100 containers with three probes each: 300 probes are more than the
// agents run for one pod (--max-probes-per-pod 32), so every one stays
// with the kubelet (a pod is never probed in part), and the note says
// why in one line; without the limit all 300 move.
func TestMoveHundredContainers(t *testing.T) {
	pod := &v1.Pod{}
	pod.Name, pod.Namespace = "many", "shop"
	for i := range 100 {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: fmt.Sprintf("c%02d", i),
			ReadinessProbe: httpProbe("/", 8080), LivenessProbe: tcpProbe(8080), StartupProbe: tcpProbe(8081)})
	}
	out, res := offload.Move(pod, agents(true, true))
	moved(t, res)
	n, _ := offload.ReadNote(out)
	if len(n.Left) != 1 || len(n.Left[0].Probes) != 300 || !strings.Contains(n.Left[0].Reason, "--max-probes-per-pod") {
		t.Fatalf("note: %d reasons, first %+v", len(n.Left), n.Left[0].Reason)
	}
	if offload.Offloaded(out) || len(out.Spec.ReadinessGates) != 0 {
		t.Fatal("something moved")
	}
	unlimited := agents(true, true)
	unlimited.Policy = podprobes.Cluster(customprobe.Options{}, "")
	if _, res := offload.Move(pod, unlimited); len(res.Moved) != 300 {
		t.Fatalf("without the limit %d moved", len(res.Moved))
	}
}

// Huge input: a pod whose annotations are near the API server's 256 KiB
// leaves every probe in the spec (the record would not fit) and says so
// when the note fits; a pod whose probes alone would overflow it likewise.
func TestMoveTooLargeForTheAnnotations(t *testing.T) {
	pod := webPod()
	pod.Annotations["example.com/big"] = strings.Repeat("x", 256*1024-400)
	out, res := offload.Move(pod, agents(true, true))
	moved(t, res)
	n, ok := offload.ReadNote(out)
	if !ok || !strings.Contains(n.Left[0].Reason, "larger than 262144 bytes") || len(n.Left[0].Probes) != 4 {
		t.Fatalf("note %+v %v", n, ok)
	}
	if offload.Offloaded(out) || out.Spec.Containers[0].ReadinessProbe == nil || len(out.Spec.ReadinessGates) != 0 {
		t.Fatal("a half-move")
	}
	pod.Annotations["example.com/big"] = strings.Repeat("x", 256*1024-40)
	out, _ = offload.Move(pod, agents(true, true))
	if _, ok := out.Annotations[offload.NoteAnnotation]; ok || offload.Offloaded(out) {
		t.Fatal("annotations written past the limit")
	}

	huge := webPod()
	huge.Spec.Containers[1].ReadinessProbe.Exec.Command = []string{strings.Repeat("a", 300*1024)}
	out, res = offload.Move(huge, agents(true, true))
	moved(t, res)
	if out.Spec.Containers[1].ReadinessProbe == nil || offload.Offloaded(out) {
		t.Fatal("a half-move of a huge probe")
	}
}

// A sidecar's (restartable init container's) probes move like a
// container's; a regular init container has none to move; a pod without
// probes comes back as it was.
func TestMoveSidecarsAndNoProbes(t *testing.T) {
	pod := &v1.Pod{}
	pod.Name, pod.Namespace = "side", "shop"
	pod.Spec.InitContainers = []v1.Container{{Name: "setup"},
		{Name: "proxy", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways), ReadinessProbe: tcpProbe(15000)}}
	pod.Spec.Containers = []v1.Container{{Name: "app"}}
	out, res := offload.Move(pod, agents(true, true))
	moved(t, res, "proxy/readiness")
	if out.Spec.InitContainers[1].ReadinessProbe != nil || len(out.Spec.ReadinessGates) != 1 {
		t.Fatalf("sidecar after the move: %+v", out.Spec)
	}
	bare := &v1.Pod{}
	bare.Spec.Containers = []v1.Container{{Name: "app"}}
	if out, res := offload.Move(bare, agents(true, true)); !apiequality.Semantic.DeepEqual(out, bare) || len(res.Moved) != 0 || len(res.Note.Left) != 0 {
		t.Fatalf("a pod without probes changed: %+v %+v", out, res)
	}
}
