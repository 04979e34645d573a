package podprobes_test

import (
	"fmt"
	"reflect"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// testPod has containers "app" (a liveness and a readiness probe) and
// "worker" (a startup probe), a native sidecar "proxy" (a readiness probe)
// and a regular init container "setup".
func testPod(annotation string) *v1.Pod {
	tcp := func(port int32) *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(port)}},
			TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
	}
	p := &v1.Pod{}
	p.Name, p.Namespace, p.UID = "web", "shop", "uid-web"
	if annotation != "" {
		p.Annotations = map[string]string{customprobe.Annotation: annotation}
	}
	p.Spec.InitContainers = []v1.Container{
		{Name: "setup"},
		{Name: "proxy", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways), ReadinessProbe: tcp(15000)},
	}
	p.Spec.Containers = []v1.Container{
		{Name: "app", LivenessProbe: tcp(8080), ReadinessProbe: tcp(8081)},
		{Name: "worker", StartupProbe: tcp(9090)},
	}
	return p
}

// probeLine is a probe as the tests compare it.
func probeLine(p *podprobes.Probe) string {
	return fmt.Sprintf("%s %s %s %s %s", p.Origin, p.Container.Name, p.Type.Lower(), p.Kind, p.Field)
}

func lines(v *podprobes.View) []string {
	var out []string
	for i := range v.Probes {
		out = append(out, probeLine(&v.Probes[i]))
	}
	return out
}

// TestOfSpecAndAnnotation: the view holds the spec's probes in the
// kubelet's AddPod order (containers, then sidecars; startup, readiness,
// liveness), then the annotation's in its order, each with its origin and
// the path of its declaration; the spec probes and containers are the
// pod's own, the annotation's defaulted.
func TestOfSpecAndAnnotation(t *testing.T) {
	pod := testPod(`[{"container":"worker","type":"readiness","periodMilliseconds":-500,"httpGet":{"port":8080}},` +
		`{"container":"proxy","type":"liveness","plugin":{"name":"redis","port":6379}}]`)
	v := podprobes.Of(pod, podprobes.Policy{})
	want := []string{
		"spec app readiness tcp spec.containers[0].readinessProbe",
		"spec app liveness tcp spec.containers[0].livenessProbe",
		"spec worker startup tcp spec.containers[1].startupProbe",
		"spec proxy readiness tcp spec.initContainers[1].readinessProbe",
		"annotation worker readiness http metadata.annotations[probed.io/probes][0]",
		"annotation proxy liveness redis metadata.annotations[probed.io/probes][1]",
	}
	if got := lines(v); !reflect.DeepEqual(got, want) {
		t.Fatalf("probes\n got %q\nwant %q", got, want)
	}
	if len(v.Refused) != 0 {
		t.Fatalf("refused: %+v", v.Refused)
	}
	if v.Probes[0].Probe != pod.Spec.Containers[0].ReadinessProbe || v.Probes[0].Container != &pod.Spec.Containers[0] || v.Probes[0].Element != -1 {
		t.Error("a spec probe is not the pod's own probe and container")
	}
	ann := v.Probes[4]
	if ann.Container != &pod.Spec.Containers[1] || ann.Element != 0 || ann.Extension == nil || ann.Milliseconds == nil {
		t.Errorf("annotation probe: %+v", ann)
	}
	if ann.Probe.HTTPGet.Path != "/" || ann.Probe.TimeoutSeconds != 1 || ann.Timing().Period != 9500*time.Millisecond {
		t.Errorf("annotation probe not defaulted: %+v, period %v", ann.Probe, ann.Timing().Period)
	}
	if p := v.Probes[5]; p.Plugin == nil || p.Plugin.Name != "redis" || p.Plugin.Port.IntVal != 6379 {
		t.Errorf("plugin probe: %+v", p.Plugin)
	}
	spec := ann.Spec(pod)
	if spec.Origin != runtime.OriginAnnotation || spec.Pod != pod || spec.Container != ann.Container || spec.Kind != runtime.KindHTTP ||
		spec.Extension != ann.Extension || spec.Milliseconds != ann.Milliseconds {
		t.Errorf("runtime spec: %+v", spec)
	}
	if p := v.Find("proxy", runtime.Liveness); p == nil || p.Origin != runtime.OriginAnnotation {
		t.Errorf("Find(proxy, liveness) = %+v", p)
	}
	if p := v.Find("setup", runtime.Liveness); p != nil {
		t.Errorf("Find(setup, liveness) = %+v, want none", p)
	}
}

// TestOfRefusalsAreStructured: every refused element says its origin,
// element, container, type (when it decoded), field and reason, read from
// the element, not from error texts; an error of the whole annotation has
// no element, container or type.
func TestOfRefusalsAreStructured(t *testing.T) {
	v := podprobes.Of(testPod(`[{"container":"app","type":"startup","periodSeconds":-1,"tcpSocket":{"port":1}},`+
		`{"container":"nope","type":"liveness","tcpSocket":{"port":1}},`+
		`{"container":"worker","type":"sometimes","tcpSocket":{"port":1}}]`), podprobes.Policy{})
	type refusal struct {
		element   int
		container string
		typ       string
		field     string
		reason    string
	}
	var got []refusal
	for _, r := range v.Refused {
		typ := "?"
		if r.TypeKnown {
			typ = r.Type.Lower()
		}
		if r.Origin != runtime.OriginAnnotation || r.Err == nil || r.Err.Field != r.Field {
			t.Errorf("refusal %+v", r)
		}
		got = append(got, refusal{r.Element, r.Container, typ, r.Field, r.Reason})
	}
	want := []refusal{
		{0, "app", "startup", "metadata.annotations[probed.io/probes][0].periodSeconds", "Invalid value: -1: must be greater than or equal to 0"},
		{1, "nope", "liveness", "metadata.annotations[probed.io/probes][1].container", `Invalid value: "nope": pod shop/web has no container "nope"`},
		{2, "worker", "?", "metadata.annotations[probed.io/probes][2].type", `Unsupported value: "sometimes": supported values: "liveness", "readiness", "startup"`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("refusals\n got %+v\nwant %+v", got, want)
	}
	if n := len(v.Probes); n != 4 {
		t.Errorf("%d probes, want the 4 spec probes", n)
	}

	whole := podprobes.Of(testPod(`{"container":"app"}`), podprobes.Policy{})
	if len(whole.Refused) != 1 {
		t.Fatalf("refused %+v", whole.Refused)
	}
	if r := whole.Refused[0]; r.Element != -1 || r.Container != "" || r.TypeKnown || r.Field != "metadata.annotations[probed.io/probes]" {
		t.Errorf("whole-annotation refusal %+v", r)
	}
	over := podprobes.Of(testPod(`[{},{}]`), podprobes.Policy{Annotation: customprobe.Options{Limits: customprobe.Limits{MaxProbes: 1, MaxProbesFlag: "--max-probes-per-pod"}}})
	if len(over.Refused) != 1 || over.Refused[0].Element != -1 || !strings.Contains(over.Refused[0].Reason, "--max-probes-per-pod") {
		t.Errorf("over the per-pod limit: %+v", over.Refused)
	}
}

// TestRefuseExec (cluster mode without the container runtime): an exec
// annotation probe is refused, naming its exec field and why; the pod's
// other probes run. It is a Transform of the mode's policy.
func TestRefuseExec(t *testing.T) {
	const why = "exec probes need the container runtime; not available in cluster mode"
	v := podprobes.Of(testPod(`[{"container":"worker","type":"liveness","exec":{"command":["true"]}},{"container":"worker","type":"readiness","tcpSocket":{"port":80}}]`),
		podprobes.Policy{Transforms: []podprobes.Transform{podprobes.LeaveSpecToKubelet, podprobes.RefuseExec(why)}})
	want := []string{`metadata.annotations[probed.io/probes][0].exec: Forbidden: ` + why}
	var got []string
	for _, e := range v.Errors() {
		got = append(got, e.Error())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors %q, want %q", got, want)
	}
	if r := v.Refused[0]; r.Element != 0 || r.Container != "worker" || !r.TypeKnown || r.Type != runtime.Liveness {
		t.Errorf("refusal %+v", r)
	}
	if got := lines(v); !reflect.DeepEqual(got, []string{"annotation worker readiness tcp metadata.annotations[probed.io/probes][1]"}) {
		t.Errorf("probes %q: want the valid annotation probe only", got)
	}
}

// TestLeaveSpecToKubelet (cluster mode): the spec's probes leave the view
// without a refusal: the kubelet runs them. An annotation probe of a type
// the container has in its spec stays refused (the kubelet's runs).
func TestLeaveSpecToKubelet(t *testing.T) {
	v := podprobes.Of(testPod(`[{"container":"app","type":"liveness","tcpSocket":{"port":1}},{"container":"app","type":"startup","tcpSocket":{"port":1}}]`),
		podprobes.Policy{Transforms: []podprobes.Transform{podprobes.LeaveSpecToKubelet}})
	if got := lines(v); !reflect.DeepEqual(got, []string{"annotation app startup tcp metadata.annotations[probed.io/probes][1]"}) {
		t.Errorf("probes %q", got)
	}
	if len(v.Refused) != 1 || v.Refused[0].Element != 0 || !strings.Contains(v.Refused[0].Reason, "already has a livenessProbe in its spec") {
		t.Errorf("refused %+v", v.Refused)
	}
}

// TestTransformIsTheSeam: a transform sees the pod and the view after
// they are read and may move probes into probed's care under an origin of
// its own (as the offload webhook's record will), refuse what of them it
// cannot add, and drop or refuse the view's probes; a refusal it makes
// takes its place by origin and element, bounded as every refusal.
func TestTransformIsTheSeam(t *testing.T) {
	const moved = runtime.Origin(200) // stands in for a third origin
	move := func(pod *v1.Pod, v *podprobes.View) {
		c := &pod.Spec.Containers[1]
		v.Add(podprobes.Probe{Origin: moved, Field: field.NewPath("metadata", "annotations").Key("example.com/moved").Index(0), Element: 0,
			Container: c, Type: runtime.Readiness, Kind: runtime.KindTCP, Probe: c.StartupProbe})
	}
	broken := func(_ *v1.Pod, v *podprobes.View) {
		v.AddRefusal(podprobes.Refusal{Origin: moved, Element: 1, Container: "app", Type: runtime.Liveness, TypeKnown: true},
			field.Invalid(field.NewPath("metadata", "annotations").Key("example.com/moved").Index(1), "x", strings.Repeat("why ", 1000)))
	}
	refuseWorker := func(_ *v1.Pod, v *podprobes.View) {
		v.Refuse(func(p *podprobes.Probe) *field.Error {
			if p.Container.Name == "worker" && p.Origin == runtime.OriginSpec {
				return field.Forbidden(p.Field, "not today")
			}
			return nil
		})
	}
	v := podprobes.Of(testPod(`[{"container":"app","type":"startup","bogus":1}]`),
		podprobes.Policy{Transforms: []podprobes.Transform{move, broken, refuseWorker}})
	want := []string{
		"spec app readiness tcp spec.containers[0].readinessProbe",
		"spec app liveness tcp spec.containers[0].livenessProbe",
		"spec proxy readiness tcp spec.initContainers[1].readinessProbe",
		" worker readiness tcp metadata.annotations[example.com/moved][0]", // an origin the runtime has no name for
	}
	if got := lines(v); !reflect.DeepEqual(got, want) {
		t.Errorf("probes\n got %q\nwant %q", got, want)
	}
	var origins []runtime.Origin
	for _, r := range v.Refused {
		origins = append(origins, r.Origin)
	}
	// The broken element has two errors: an unknown field, no handler.
	if !reflect.DeepEqual(origins, []runtime.Origin{runtime.OriginSpec, runtime.OriginAnnotation, runtime.OriginAnnotation, moved}) {
		t.Errorf("refusals by origin: %v (%+v)", origins, v.Refused)
	}
	if r := v.Refused[3]; r.Element != 1 || r.Field != "metadata.annotations[example.com/moved][1]" || len(r.Reason) > 2*bound.MessageBytes {
		t.Errorf("the transform's refusal %+v", r)
	}
}

// TestOfReadsTheAnnotationOnce: working a view out reads the annotation
// once (customprobe.Reads, what the agent's tests count), and a pod
// without the annotation not at all.
func TestOfReadsTheAnnotationOnce(t *testing.T) {
	before := customprobe.Reads()
	podprobes.Of(testPod(`[]`), podprobes.Policy{Transforms: []podprobes.Transform{podprobes.LeaveSpecToKubelet, podprobes.RefuseExec("no")}})
	podprobes.Of(testPod(""), podprobes.Policy{})
	if n := customprobe.Reads() - before; n != 1 {
		t.Errorf("the annotation was read %d times, want 1", n)
	}
}

// TestViewOfNil: a nil pod has an empty view; a nil view finds nothing and
// has the shortest drain bound.
func TestViewOfNil(t *testing.T) {
	if v := podprobes.Of(nil, podprobes.Policy{}); len(v.Probes) != 0 || len(v.Refused) != 0 {
		t.Errorf("view of nil: %+v", v)
	}
	var v *podprobes.View
	if v.Find("app", runtime.Liveness) != nil || v.LongestTimeout() != time.Second || v.Errors() != nil {
		t.Error("a nil view is not empty")
	}
}

// TestLongestTimeout: the longest timeout of the view's probes, the
// annotation's millisecond offsets included, at least one second.
func TestLongestTimeout(t *testing.T) {
	v := podprobes.Of(testPod(`[{"container":"worker","type":"readiness","timeoutSeconds":4,"timeoutMilliseconds":500,"periodSeconds":10,"tcpSocket":{"port":1}}]`), podprobes.Policy{})
	if got := v.LongestTimeout(); got != 4500*time.Millisecond {
		t.Errorf("LongestTimeout %v, want 4.5s", got)
	}
}

// hostileAnnotation is an annotation of close to 256 KiB whose ~7,900
// elements each have three errors.
func hostileAnnotation() string {
	const element = `{"container":"nope","type":"x"},`
	return "[" + strings.TrimSuffix(strings.Repeat(element, (customprobe.MaxAnnotationBytes-2)/len(element)), ",") + "]"
}

// TestHostileAnnotation: what a tenant writes bounds the view. An
// annotation of 256 KiB of broken elements keeps MaxRefusals refusals and
// counts the rest; a container name or a type of 200 KiB is cut in the
// refusal; JSON nested past any decoder's depth is one refusal; a pod of
// 100 containers with three annotation probes each has its 300 probes.
func TestHostileAnnotation(t *testing.T) {
	broken := hostileAnnotation()
	if len(broken) > customprobe.MaxAnnotationBytes || len(broken) < customprobe.MaxAnnotationBytes-64 {
		t.Fatalf("the annotation is %d bytes", len(broken))
	}
	v := podprobes.Of(testPod(broken), podprobes.Policy{})
	if len(v.Refused) != podprobes.MaxRefusals || v.RefusedMore == 0 {
		t.Errorf("%d refusals kept, %d more: want %d kept", len(v.Refused), v.RefusedMore, podprobes.MaxRefusals)
	}
	errs := v.Errors()
	if last := errs[len(errs)-1].Error(); !strings.Contains(last, fmt.Sprintf("%d more errors not shown", v.RefusedMore)) {
		t.Errorf("last error %q does not count the rest", last)
	}

	long := strings.Repeat("x", 200<<10)
	v = podprobes.Of(testPod(`[{"container":"`+long+`","type":"`+long+`","tcpSocket":{"port":1}}]`), podprobes.Policy{})
	if len(v.Refused) == 0 {
		t.Fatal("no refusal")
	}
	for _, r := range v.Refused {
		for _, s := range []string{r.Container, r.Field, r.Reason, r.Err.Error()} {
			if len(s) > 3*bound.MessageBytes {
				t.Errorf("a refusal keeps %d bytes of what the tenant wrote", len(s))
			}
		}
	}

	deep := `[{"container":"app","type":"readiness","plugin":{"name":"k","params":{"a":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}}}]`
	v = podprobes.Of(testPod(deep), podprobes.Policy{})
	if len(v.Refused) != 1 || v.Refused[0].Element != -1 {
		t.Errorf("deep JSON: %d refusals (%+v), want the whole annotation refused", len(v.Refused), v.Refused)
	}

	pod := &v1.Pod{}
	pod.Name, pod.Namespace = "wide", "shop"
	var ann []string
	for i := range 100 {
		name := fmt.Sprintf("c%03d", i)
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: name})
		for _, typ := range []string{"liveness", "readiness", "startup"} {
			ann = append(ann, fmt.Sprintf(`{"container":%q,"type":%q,"tcpSocket":{"port":1}}`, name, typ))
		}
	}
	pod.Annotations = map[string]string{customprobe.Annotation: "[" + strings.Join(ann, ",") + "]"}
	if v := podprobes.Of(pod, podprobes.Policy{}); len(v.Probes) != 300 || len(v.Refused) != 0 {
		t.Errorf("100 containers: %d probes, %d refused; want 300, 0", len(v.Probes), len(v.Refused))
	}
}

// TestHostileViewsStayBounded: the views of many pods whose annotations
// are all errors hold a bounded amount of memory each, not what the
// errors would take (here about 600 errors of a few hundred bytes a view).
func TestHostileViewsStayBounded(t *testing.T) {
	const element = `{"container":"nope","type":"x"},`
	broken := "[" + strings.TrimSuffix(strings.Repeat(element, 200), ",") + "]"
	pod := testPod(broken)
	const pods = 50
	views := make([]*podprobes.View, pods)
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	for i := range views {
		views[i] = podprobes.Of(pod, podprobes.Policy{})
	}
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	perView := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / pods
	// MaxRefusals refusals of a few hundred bytes each.
	const bound = 64 << 10
	if perView > bound {
		t.Errorf("a view keeps %d bytes, want at most %d", perView, bound)
	}
	if v := views[0]; len(v.Refused) != podprobes.MaxRefusals || v.RefusedMore != 3*200-podprobes.MaxRefusals {
		t.Errorf("%d refusals kept, %d counted", len(v.Refused), v.RefusedMore)
	}
	t.Logf("a view of %d broken elements keeps about %d bytes", 200, perView)
	goruntime.KeepAlive(views)
}
