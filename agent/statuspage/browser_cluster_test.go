package statuspage_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/agent/kube/panicthreshold"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/manager/customprobe"
)

// runClusterAgent runs a real agent in cluster mode (agent.New and Run)
// for node against the test's API server as the agent's identity, until
// the test's cleanup, and returns its base URL.
func runClusterAgent(t *testing.T, cfg *rest.Config, c agent.ClusterOptions) string {
	t.Helper()
	c.Config, c.StatusQPS, c.StatusBurst = cfg, 50, 100
	a, err := agent.New(agent.Options{Cluster: &c, Listen: "127.0.0.1:0", SyncFrequency: time.Second, PoolSize: 8,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return runUntilCleanup(t, a)
}

// annotatedPod creates a running pod on node with the readiness gate and
// the probes annotation.
func annotatedPod(t *testing.T, c kubernetes.Interface, ns, name, node, annotation string) {
	t.Helper()
	pod := kubetest.NewPod(ns, name, node, "app")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: v1.PodConditionType(agent.DefaultReadinessGate)}}
	pod.Annotations = map[string]string{customprobe.Annotation: annotation}
	kubetest.CreatePod(t, c, pod)
	kubetest.SetPodRunning(t, c, ns, name, true)
}

// TestBrowser_ClusterModeShowsRefusedProbesRefused (cluster mode against a
// real API server, in a real browser): the page lists the probes the agent
// runs and, as refused, with every reason, those it refuses — an exec probe
// without the container runtime, a period under --min-probe-period, a pod
// over the node's --max-probe-rate budget — never as running ("not run
// yet"); every row says its probe is the annotation's, and no spec probe
// (the kubelet's) is listed.
func TestBrowser_ClusterModeShowsRefusedProbesRefused(t *testing.T) {
	ctx := browser(t)
	admin := kubetest.Client(t)
	cfg := kubetest.AgentConfig(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	tcp := newTCPServer(t)
	annotatedPod(t, admin, ns, "web", node, fmt.Sprintf(`[
		{"container":"app","type":"readiness","periodSeconds":1,"timeoutSeconds":5,"tcpSocket":{"port":%d}},
		{"container":"app","type":"liveness","exec":{"command":["true"]}},
		{"container":"app","type":"startup","periodSeconds":1,"periodMilliseconds":-500,"tcpSocket":{"port":%d}}]`, tcp.port, tcp.port))
	spec := kubetest.NewPod(ns, "kubelets", node, "app")
	spec.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
	kubetest.CreatePod(t, admin, spec)
	kubetest.SetPodRunning(t, admin, ns, "kubelets", true)
	base := runClusterAgent(t, cfg, agent.ClusterOptions{NodeName: node, MinProbePeriod: time.Second, MaxProbeRate: 1.5})

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/?refresh=1")); err != nil {
		t.Fatal(err)
	}
	web := ns + "/web"
	waitFor(t, 20*time.Second, "web's readiness probe runs", func() bool {
		return attribute(ctx, t, selectorFor(web, "app/readiness"), "data-result") == "success"
	})
	for _, row := range []struct{ probe, reason string }{
		{"app/liveness", "metadata.annotations[probed.io/probes][1].exec: Forbidden: exec probes need the container runtime"},
		{"app/startup", "metadata.annotations[probed.io/probes][2].periodMilliseconds: Invalid value: -500: the period is 500ms; this node's shortest is 1s (--min-probe-period)"},
	} {
		sel := selectorFor(web, row.probe)
		if got := attribute(ctx, t, sel, "data-result"); got != "refused" {
			t.Errorf("%s: data-result %q, want refused", row.probe, got)
		}
		if got := text(ctx, t, sel+" td.failure"); !strings.Contains(got, row.reason) {
			t.Errorf("%s: reason %q, want %q", row.probe, got, row.reason)
		}
		if got := text(ctx, t, sel+" td.last"); got != "refused" {
			t.Errorf("%s: last result %q, want refused", row.probe, got)
		}
	}
	for _, probe := range []string{"app/readiness", "app/liveness", "app/startup"} {
		if got := attribute(ctx, t, selectorFor(web, probe), "data-origin"); got != "annotation" {
			t.Errorf("%s: origin %q, want annotation", probe, got)
		}
	}
	if got := attribute(ctx, t, `tbody[data-pod="`+web+`"]`, "data-failing"); got != "true" {
		t.Errorf("web with refused probes: data-failing=%q", got)
	}
	if got := attribute(ctx, t, `tr[data-origin="spec"]`, "data-probe"); got != "" {
		t.Errorf("cluster mode lists a spec probe (%s): the kubelet runs those", got)
	}
	if got := attribute(ctx, t, `tbody[data-pod="`+ns+`/kubelets"] tr`, "class"); got != "probe none" {
		t.Errorf("the pod with only a spec probe: row class %q, want no probes", got)
	}

	// web's readiness takes 1 of the node's 1.5 runs/s: a second pod's
	// readiness probe at 1/s does not fit, and is shown refused for it.
	annotatedPod(t, admin, ns, "over", node, fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":1,"tcpSocket":{"port":%d}}]`, tcp.port))
	over := selectorFor(ns+"/over", "app/readiness")
	waitFor(t, 20*time.Second, "over's readiness probe refused for the budget", func() bool { return attribute(ctx, t, over, "data-result") == "refused" })
	if got := text(ctx, t, over+" td.failure"); !strings.Contains(got, "ProbeBudgetExceeded") || !strings.Contains(got, "--max-probe-rate") {
		t.Errorf("over's reason %q", got)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/pod/"+web+"?refresh=0")); err != nil {
		t.Fatal(err)
	}
	page := pageText(ctx, t)
	for _, want := range []string{"refused: metadata.annotations[probed.io/probes][1].exec: Forbidden", "(annotation)", "--min-probe-period"} {
		if !strings.Contains(page, want) {
			t.Errorf("web's page misses %q", want)
		}
	}
}

// text is the text of the first element a CSS selector matches now, spaces
// folded; "" when none does.
func text(ctx context.Context, t *testing.T, css string) string {
	t.Helper()
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	texts, err := chromedp.Run(qctx, chromedp.Evaluate[[]string](fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map(e => e.textContent)`, css)))
	if err != nil {
		t.Fatalf("%s: %v", css, err)
	}
	if len(texts) == 0 {
		return ""
	}
	return strings.Join(strings.Fields(texts[0]), " ")
}

// TestBrowser_ClusterModeShowsHeldPods (cluster mode against a real API
// server, in a real browser): a pod of a Service whose readiness probe
// fails, kept ready by its panic threshold, is listed in the header's
// "held by the guards" with the guard and the counts; once its probe
// passes the header says none.
func TestBrowser_ClusterModeShowsHeldPods(t *testing.T) {
	ctx := browser(t)
	admin := kubetest.Client(t)
	cfg := kubetest.AgentConfig(t)
	ns, node := kubetest.Namespace(t), kubetest.NodeName(t)
	// A port nothing listens on, until the probe is to pass.
	tcp := newTCPServer(t)
	port := tcp.port
	tcp.down()
	annotatedPod(t, admin, ns, "web-0", node, fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":1,"tcpSocket":{"port":%d}}]`, port))
	pod, err := admin.CoreV1().Pods(ns).Get(kubetest.Context(t), "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations[panicthreshold.Annotation] = "100%"
	if _, err := admin.CoreV1().Pods(ns).Update(kubetest.Context(t), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := true
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.2.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-0", UID: pod.UID}},
			{Addresses: []string{"10.2.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-1", UID: "other-node-pod"}}}}
	if _, err := admin.DiscoveryV1().EndpointSlices(ns).Create(kubetest.Context(t), slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	base := runClusterAgent(t, cfg, agent.ClusterOptions{NodeName: node})
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/?refresh=1")); err != nil {
		t.Fatal(err)
	}
	held := `#held li[data-guard="panic-threshold"][data-pod="` + ns + `/web-0"]`
	waitFor(t, 20*time.Second, "web-0 listed as held", func() bool { return text(ctx, t, held) != "" })
	if got := text(ctx, t, held); !strings.Contains(got, "Service "+ns+"/web has 1 of 2 endpoints ready without it, probed.io/panic-threshold=100% keeps 2") {
		t.Errorf("held row %q", got)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	waitFor(t, 20*time.Second, "the header says none", func() bool { return text(ctx, t, "#held dd") == "none" })
}
