package podprobes_test

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// offloadedPod is testPod with app's and proxy's readiness probes moved
// into the record, as the offload webhook leaves a pod: app keeps its
// liveness probe in the spec, worker its startup probe.
func offloadedPod(record string) *v1.Pod {
	p := testPod("")
	p.Spec.Containers[0].ReadinessProbe = nil
	p.Spec.InitContainers[1].ReadinessProbe = nil
	p.Annotations = map[string]string{customprobe.OffloadedAnnotation: record}
	return p
}

const twoMoved = `[{"container":"app","type":"readiness","probe":{"httpGet":{"path":"/ready","port":8081},"periodSeconds":5}},` +
	`{"container":"proxy","type":"readiness","probe":{"exec":{"command":["cat","/tmp/ready"]}}}]`

// TestOffloadedProbes: the record's probes join the view with origin
// offloaded, the path of their v1.Probe in the record, the container of
// the pod, the API's defaults, and nothing beyond v1.Probe (no extension,
// no milliseconds: the kubelet's semantics and Event texts); the spec's
// probes still leave to the kubelet.
func TestOffloadedProbes(t *testing.T) {
	pod := offloadedPod(twoMoved)
	v := podprobes.Of(pod, podprobes.Cluster(customprobe.Options{}, ""))
	want := []string{
		"offloaded app readiness http metadata.annotations[probed.io/offloaded][0].probe",
		"offloaded proxy readiness exec metadata.annotations[probed.io/offloaded][1].probe",
	}
	if got := lines(v); !reflect.DeepEqual(got, want) {
		t.Fatalf("probes\n got %q\nwant %q", got, want)
	}
	if len(v.Refused) != 0 {
		t.Fatalf("refused: %+v", v.Refused)
	}
	app := v.Probes[0]
	if app.Container != &pod.Spec.Containers[0] || app.Element != 0 || app.Extension != nil || app.Milliseconds != nil || app.Plugin != nil {
		t.Errorf("offloaded probe: %+v", app)
	}
	if app.Probe.HTTPGet.Scheme != v1.URISchemeHTTP || app.Probe.TimeoutSeconds != 1 || app.Probe.FailureThreshold != 3 || app.Timing().Period != 5*time.Second {
		t.Errorf("not defaulted as the API server does: %+v", app.Probe)
	}
	if v.Probes[1].Container != &pod.Spec.InitContainers[1] {
		t.Error("the sidecar's probe does not point at the sidecar")
	}
	if s := app.Spec(pod); s.Origin != runtime.OriginOffloaded || s.Extension != nil {
		t.Errorf("runtime spec: %+v", s)
	}
	if runtime.OriginOffloaded.String() != "offloaded" {
		t.Errorf("origin %q", runtime.OriginOffloaded)
	}
}

// TestOffloadedRefusedLikeAnnotationProbes: without the container runtime
// an offloaded exec probe is refused (RefuseExec runs after Offloaded);
// a host outside the egress rule, a period under the node's shortest, a
// probe of a type the spec has (the kubelet runs it), a second element of
// one container and type, an unknown field of v1.Probe, an invalid probe,
// a container the pod lacks and an element that is not an object are
// refused each with its element, container, type and field, and the
// others run.
func TestOffloadedRefusedLikeAnnotationProbes(t *testing.T) {
	record := `[` +
		`{"container":"app","type":"readiness","probe":{"httpGet":{"port":8081,"host":"10.1.2.3"}}},` + // 0: egress
		`{"container":"proxy","type":"readiness","probe":{"exec":{"command":["true"]}}},` + // 1: exec without runtime
		`{"container":"worker","type":"readiness","probe":{"tcpSocket":{"port":1},"periodSeconds":1}},` + // 2: under --min-probe-period
		`{"container":"worker","type":"startup","probe":{"tcpSocket":{"port":1}}},` + // 3: the spec has it
		`{"container":"app","type":"startup","probe":{"tcpSocket":{"port":1}}},` + // 4: valid
		`{"container":"app","type":"startup","probe":{"tcpSocket":{"port":2}}},` + // 5: duplicate of 4
		`{"container":"app","type":"liveness","probe":{"tcpSocket":{"port":1},"keepAlive":true}},` + // 6: unknown field (and spec has it)
		`{"container":"nope","type":"readiness","probe":{"tcpSocket":{"port":1}}},` + // 7: no such container
		`{"container":"worker","type":"liveness","probe":{"tcpSocket":{"port":1},"timeoutSeconds":-1}},` + // 8: invalid
		`"x",` + // 9: not an object
		`{"container":"setup","type":"readiness","extra":1,"probe":{"tcpSocket":{"port":1}}}]` // 10: init container, unknown key
	opts := customprobe.Options{Egress: egress.NewRule(nil), Limits: customprobe.Limits{MinPeriod: 2 * time.Second, MinPeriodFlag: "--min-probe-period"}}
	v := podprobes.Of(offloadedPod(record), podprobes.Cluster(opts, "no container runtime"))
	if got, want := lines(v), []string{"offloaded app startup tcp metadata.annotations[probed.io/offloaded][4].probe"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("probes\n got %q\nwant %q", got, want)
	}
	var got []string
	for _, r := range v.Refused {
		if r.Origin != runtime.OriginOffloaded {
			t.Errorf("refusal of origin %s", r.Origin)
		}
		typ := "?"
		if r.TypeKnown {
			typ = r.Type.Lower()
		}
		got = append(got, fmt.Sprintf("%d %s/%s %s", r.Element, r.Container, typ, r.Field))
	}
	want := []string{
		"0 app/readiness metadata.annotations[probed.io/offloaded][0].probe.httpGet.host",
		"1 proxy/readiness metadata.annotations[probed.io/offloaded][1].probe.exec",
		"2 worker/readiness metadata.annotations[probed.io/offloaded][2].probe.periodSeconds",
		"3 worker/startup metadata.annotations[probed.io/offloaded][3].type",
		"5 app/startup metadata.annotations[probed.io/offloaded][5].type",
		"6 app/liveness metadata.annotations[probed.io/offloaded][6].probe",
		"6 app/liveness metadata.annotations[probed.io/offloaded][6].type",
		"7 nope/readiness metadata.annotations[probed.io/offloaded][7].container",
		"8 worker/liveness metadata.annotations[probed.io/offloaded][8].probe.timeoutSeconds",
		"9 /? metadata.annotations[probed.io/offloaded][9]",
		"10 setup/readiness metadata.annotations[probed.io/offloaded][10].extra",
		"10 setup/readiness metadata.annotations[probed.io/offloaded][10].container",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("refusals\n got %q\nwant %q", got, want)
	}
	for _, r := range v.Refused {
		if r.Element == 1 && !strings.Contains(r.Reason, "no container runtime") {
			t.Errorf("exec refusal: %s", r.Reason)
		}
		if r.Element == 6 && r.Field == "metadata.annotations[probed.io/offloaded][6].probe" && !strings.Contains(r.Reason, "keepAlive") {
			t.Errorf("unknown field refusal does not name it: %s", r.Reason)
		}
	}
}

// TestOffloadedAnnotationWins: a record element whose container and type
// the probed.io/probes annotation declares too is refused, naming the
// annotation's element: one probe per container and type.
func TestOffloadedAnnotationWins(t *testing.T) {
	pod := offloadedPod(twoMoved)
	pod.Annotations[customprobe.Annotation] = `[{"container":"app","type":"readiness","tcpSocket":{"port":8081}}]`
	v := podprobes.Of(pod, podprobes.Cluster(customprobe.Options{}, ""))
	want := []string{
		"annotation app readiness tcp metadata.annotations[probed.io/probes][0]",
		"offloaded proxy readiness exec metadata.annotations[probed.io/offloaded][1].probe",
	}
	if got := lines(v); !reflect.DeepEqual(got, want) {
		t.Fatalf("probes\n got %q\nwant %q", got, want)
	}
	if len(v.Refused) != 1 || v.Refused[0].Element != 0 || !strings.Contains(v.Refused[0].Reason, "metadata.annotations[probed.io/probes][0]") {
		t.Fatalf("refused: %+v", v.Refused)
	}
}

// TestOffloadedCountsWithTheAnnotation: the record's probes and the
// annotation's together are bounded by --max-probes-per-pod; over it the
// whole record is refused (the pod is never probed in part), the
// annotation's still run: a record written by hand buys nothing the
// annotation could not.
func TestOffloadedCountsWithTheAnnotation(t *testing.T) {
	pod := offloadedPod(twoMoved)
	pod.Annotations[customprobe.Annotation] = `[{"container":"worker","type":"readiness","tcpSocket":{"port":1}}]`
	limits := customprobe.Limits{MaxProbes: 2, MaxProbesFlag: "--max-probes-per-pod"}
	v := podprobes.Of(pod, podprobes.Cluster(customprobe.Options{Limits: limits}, ""))
	if got, want := lines(v), []string{"annotation worker readiness tcp metadata.annotations[probed.io/probes][0]"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("probes\n got %q\nwant %q", got, want)
	}
	if len(v.Refused) != 1 || v.Refused[0].Element != -1 || v.Refused[0].Field != "metadata.annotations[probed.io/offloaded]" ||
		!strings.Contains(v.Refused[0].Reason, "--max-probes-per-pod") {
		t.Fatalf("refused: %+v", v.Refused)
	}
	limits.MaxProbes = 3
	if v := podprobes.Of(pod, podprobes.Cluster(customprobe.Options{Limits: limits}, "")); len(v.Probes) != 3 || len(v.Refused) != 0 {
		t.Fatalf("at the limit: %q, %+v", lines(v), v.Refused)
	}
}

// TestOffloadedHostile: a record of 256 KiB and more, one that is not a
// list, one of 10,000 broken elements and one of 5,000 valid elements for
// 100 containers: the view stays bounded (MaxRefusals), a long record is
// refused whole, and the node's limits hold.
func TestOffloadedHostile(t *testing.T) {
	big := offloadedPod(`[` + strings.Repeat(" ", customprobe.MaxAnnotationBytes) + `]`)
	if v := podprobes.Of(big, podprobes.Cluster(customprobe.Options{}, "")); len(v.Probes) != 0 || len(v.Refused) != 1 || v.Refused[0].Reason != "Too long: may not be more than 262144 bytes" {
		t.Fatalf("a record over 256 KiB: %q %+v", lines(v), v.Refused)
	}
	if v := podprobes.Of(offloadedPod(`{"container":"app"}`), podprobes.Cluster(customprobe.Options{}, "")); len(v.Probes) != 0 || len(v.Refused) != 1 {
		t.Fatalf("not a list: %+v", v.Refused)
	}
	broken := offloadedPod(`[` + strings.TrimSuffix(strings.Repeat(`{"container":"app","type":"readiness","probe":7},`, 5000), ",") + `]`)
	v := podprobes.Of(broken, podprobes.Cluster(customprobe.Options{}, ""))
	if len(v.Probes) != 0 || len(v.Refused) != podprobes.MaxRefusals || v.RefusedMore == 0 {
		t.Fatalf("5,000 broken elements: %d probes, %d refusals, %d more", len(v.Probes), len(v.Refused), v.RefusedMore)
	}
	many := testPod("")
	many.Spec.InitContainers, many.Spec.Containers = nil, nil
	var b strings.Builder
	b.WriteString("[")
	for i := range 100 {
		many.Spec.Containers = append(many.Spec.Containers, v1.Container{Name: fmt.Sprintf("c%d", i)})
		for _, typ := range []string{"readiness", "liveness", "startup"} {
			if b.Len() > 1 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"container":"c%d","type":%q,"probe":{"tcpSocket":{"port":80}}}`, i, typ)
		}
	}
	b.WriteString("]")
	many.Annotations = map[string]string{customprobe.OffloadedAnnotation: b.String()}
	if v := podprobes.Of(many, podprobes.Cluster(customprobe.Options{}, "")); len(v.Probes) != 300 {
		t.Fatalf("100 containers without limits: %d probes", len(v.Probes))
	}
	limited := customprobe.Options{Limits: customprobe.Limits{MaxProbes: 32}, Egress: egress.NewRule([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})}
	if v := podprobes.Of(many, podprobes.Cluster(limited, "")); len(v.Probes) != 0 || len(v.Refused) != 1 {
		t.Fatalf("100 containers over --max-probes-per-pod: %d probes, %+v", len(v.Probes), v.Refused)
	}
}
