package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/agent/kube/offload"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/internal/nodetest"
	"github.com/probed/probed/internal/probetarget"
)

// The offload webhook on the real node (docs/cluster.md "Offload a
// namespace"): the chart with offload.enabled, a Deployment of unchanged
// manifests in a labelled namespace, and the way back. It skips without
// PROBED_TEST_NODE.

const (
	offloadNS       = "probed-offload"
	offloadRelease  = "off"
	offloadFullname = "off-probed"
)

// offloadWeb is the workload, manifests as an operator writes them
// (no annotation, no gate): app with an HTTP readiness probe, a TCP
// liveness probe and an HTTP startup probe; side with an exec readiness
// probe (a file the target writes and removes on request) and an HTTP
// liveness probe. Recreate: the ports are the node's.
func offloadWeb(n *nodetest.Node, ns string, app, side nodetest.Target) *appsv1.Deployment {
	pod := n.TargetPod(ns, "", app)
	pod.Spec.NodeName = ""
	httpGet := func(name string, port int) v1.ProbeHandler {
		return v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/probe/" + name, Port: intstr.FromInt32(int32(port))}}
	}
	a := &pod.Spec.Containers[0]
	a.ReadinessProbe = &v1.Probe{ProbeHandler: httpGet("ready", app.HTTP), PeriodSeconds: 1, FailureThreshold: 1}
	a.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(app.TCP))}}, PeriodSeconds: 2}
	a.StartupProbe = &v1.Probe{ProbeHandler: httpGet("started", app.HTTP), PeriodSeconds: 1, FailureThreshold: 30}
	s := n.TargetPod(ns, "", side).Spec.Containers[0]
	s.Name = "side"
	s.ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", side.ReadyFile}}}, PeriodSeconds: 1, FailureThreshold: 1}
	s.LivenessProbe = &v1.Probe{ProbeHandler: httpGet("live", side.HTTP), PeriodSeconds: 1, FailureThreshold: 2}
	pod.Spec.Containers = append(pod.Spec.Containers, s)
	return webDeploymentOf(ns, nil, pod.Spec)
}

// probeCounts reads prober_probe_total of namespace ns (pod, when not "")
// from the kubelet's /metrics/probes (its API, the admin token) or
// probed's.
type probeCounts struct {
	t       *testing.T
	kubelet string
	token   string
	probed  string
	client  *http.Client
}

func newProbeCounts(t *testing.T, n *nodetest.Node, probedPort int) *probeCounts {
	// The kubelet's serving certificate is self-signed (no CA to check it by).
	return &probeCounts{t: t, kubelet: fmt.Sprintf("https://127.0.0.1:%d", n.KubeletPort), token: kubetest.Config(t).BearerToken,
		probed: fmt.Sprintf("http://127.0.0.1:%d", probedPort),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}}
}

func (p *probeCounts) read(base, token, ns, pod string) float64 {
	p.t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/metrics/probes", nil)
	if err != nil {
		p.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		p.t.Fatalf("GET %s/metrics/probes: %d %v", base, resp.StatusCode, err)
	}
	match := map[string]string{"namespace": ns}
	if pod != "" {
		match["pod"] = pod
	}
	return sumCounter(metricFamilies(p.t, body), "prober_probe_total", match)
}

func (p *probeCounts) kubeletOf(ns, pod string) float64 { return p.read(p.kubelet, p.token, ns, pod) }
func (p *probeCounts) probedOf(ns, pod string) float64  { return p.read(p.probed, "", ns, pod) }

// webhookReady waits until the webhook's Deployment has its pod Ready and
// its configuration holds a CA: from then on the API server calls it.
func webhookReady(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	eventually(t, nil, 3*time.Minute, "the offload webhook ready, its CA published", func() (bool, string) {
		d, err := c.AppsV1().Deployments(offloadNS).Get(kubetest.Context(t), offloadFullname+"-webhook", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cfg, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(kubetest.Context(t), offloadFullname+"-offload", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas == *d.Spec.Replicas && d.Status.ObservedGeneration == d.Generation && len(cfg.Webhooks[0].ClientConfig.CABundle) > 0,
			fmt.Sprintf("ready %d/%d, caBundle %d bytes", d.Status.ReadyReplicas, *d.Spec.Replicas, len(cfg.Webhooks[0].ClientConfig.CABundle))
	})
}

// TestOffloadOnTheNode: the chart with offload.enabled on the real node.
// A Deployment of unchanged manifests in a labelled namespace: its pod is
// admitted with no spec probe and the gate; the kubelet's prober_probe_total
// for it stays flat while probed's runs; the kubelet's Ready follows
// probed's HTTP and exec readiness probes; a failing liveness probe
// restarts the container through the runtime and the kubelet counts the
// restart; an unlabelled namespace's pod is untouched; with the webhook
// stopped a pod is created as sent and the kubelet probes it; with the
// label removed and the Deployment rolled, the kubelet probes again and no
// gate remains, and `probed offload status` says so along the way.
func TestOffloadOnTheNode(t *testing.T) {
	n := nodetest.Load(t)
	c := kubetest.Client(t)
	k := newKube(t, n)
	names := n.ImportImage(t, probedImage(t))
	i := strings.LastIndex(names[0], ":")
	repo, tag := names[0][:i], names[0][i+1:]
	ns, plain := kubetest.Namespace(t), kubetest.Namespace(t)
	kubetest.LabelNamespace(t, ns, map[string]string{offload.NamespaceLabel: "enabled", "probed.io/liveness-actions": "enabled"})
	t.Cleanup(func() {
		deleteDeployment(t, c, ns, "web")
		k.run(3*time.Minute, n.Helm, "uninstall", offloadRelease, "-n", offloadNS, "--wait")
		k.run(3*time.Minute, n.Kubectl, "delete", "namespace", offloadNS, "--ignore-not-found", "--wait")
	})
	ports := nodetest.FreePorts(t, 7)
	agentPort, webhookPort := ports[0], ports[1]
	took := k.helm("install", offloadRelease, chartDir, "-n", offloadNS, "--create-namespace", "--wait", "--timeout", "5m",
		"--set", "image.repository="+repo, "--set", "image.tag="+tag,
		"--set", "apiServer.host="+n.APIHost, "--set", "apiServer.port="+strconv.Itoa(n.APIPort),
		"--set", "cri.enabled=true", "--set", "cri.socket="+n.CRISocket, "--set", "livenessAction=restart",
		"--set", "listen.port="+strconv.Itoa(agentPort),
		"--set", "offload.enabled=true", "--set", "offload.replicas=1", "--set", "offload.hostNetwork=true", "--set", "offload.port="+strconv.Itoa(webhookPort))
	agentPod(t, c, n, offloadNS, offloadFullname, "")
	webhookReady(t, c)
	t.Logf("helm install --wait with offload.enabled: %v", took.Round(100*time.Millisecond))
	counts := newProbeCounts(t, n, agentPort)

	// The Deployment, as written: admitted with no spec probe and the gate.
	app := nodetest.Target{HTTP: ports[2], TCP: ports[3]}
	side := nodetest.Target{HTTP: ports[4], ReadyFile: "/tmp/ready"}
	h := watchPods(t, c, ns, metav1.ListOptions{LabelSelector: "app=web"})
	if _, err := c.AppsV1().Deployments(ns).Create(kubetest.Context(t), offloadWeb(n, ns, app, side), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := deploymentPod(t, c, ns, "", 2*time.Minute, "Ready", func(p *v1.Pod) (bool, string) { return podReady(p) })
	if kubetest.SpecProbes(web) != 0 || len(web.Spec.ReadinessGates) != 1 || web.Spec.ReadinessGates[0].ConditionType != gate || !offload.Offloaded(web) {
		t.Fatalf("pod %s admitted with %d spec probes, gates %+v, record %q", web.Name, kubetest.SpecProbes(web), web.Spec.ReadinessGates, web.Annotations[offload.RecordAnnotation])
	}
	if note, ok := offload.ReadNote(web); !ok || len(note.Left) != 0 {
		t.Errorf("note %+v: every probe should move (the runtime and restarts are on)", note)
	}
	checkReadyOnlyWithGate(t, h, web.UID, web.Name)

	// The kubelet runs none of its probes; probed runs all five.
	kubelet0, probed0 := counts.kubeletOf(ns, web.Name), counts.probedOf(ns, web.Name)
	time.Sleep(10 * time.Second)
	kubelet1, probed1 := counts.kubeletOf(ns, web.Name), counts.probedOf(ns, web.Name)
	if kubelet1 != 0 || kubelet0 != 0 {
		t.Errorf("the kubelet's prober_probe_total for %s: %v then %v, want none", web.Name, kubelet0, kubelet1)
	}
	if d := probed1 - probed0; d < 25 {
		t.Errorf("probed's prober_probe_total for %s grew by %v in 10 s, want about 35 (four probes a second, one every 2 s)", web.Name, d)
	}
	if out, _, _ := runProbed(t, nil, "status", "-s", "127.0.0.1:"+strconv.Itoa(agentPort), "-o", "wide"); !strings.Contains(out, "offloaded:app/readiness=success") ||
		!strings.Contains(out, "offloaded:side/readiness(execsync)=success") {
		t.Errorf("probed status -o wide does not say offloaded:\n%s", out)
	}

	// The kubelet's Ready follows probed: the HTTP readiness, then the exec one.
	for _, step := range []struct {
		what string
		fail func() error
		pass func() error
	}{
		{"HTTP readiness", func() error { return probetarget.SetStatus(app.Base(n), "ready", 503) }, func() error { return probetarget.SetStatus(app.Base(n), "ready", 200) }},
		{"exec readiness", func() error { return probetarget.SetReadyFile(side.Base(n), false) }, func() error { return probetarget.SetReadyFile(side.Base(n), true) }},
	} {
		if err := step.fail(); err != nil {
			t.Fatal(err)
		}
		got := waitPod(t, nil, c, ns, web.Name, time.Minute, "not Ready: "+step.what+" fails", readyIs(false))
		if g := gateCondition(got, gate); g == nil || g.Status != v1.ConditionFalse {
			t.Errorf("%s failed: gate %+v", step.what, g)
		}
		if err := step.pass(); err != nil {
			t.Fatal(err)
		}
		waitPod(t, nil, c, ns, web.Name, time.Minute, "Ready again: "+step.what+" passes", readyIs(true))
	}
	checkReadyOnlyWithGate(t, h, web.UID, web.Name)

	// A failing liveness probe: probed stops the container through the
	// runtime, the kubelet starts it again and counts the restart.
	if err := probetarget.SetStatus(side.Base(n), "live", 500); err != nil {
		t.Fatal(err)
	}
	web = deploymentPod(t, c, ns, "", 90*time.Second, "side restarted", func(p *v1.Pod) (bool, string) {
		cs := containerStatus(p, "side")
		return cs != nil && cs.RestartCount >= 1, fmt.Sprintf("%+v", cs)
	})
	if cs := containerStatus(web, "side"); cs.LastTerminationState.Terminated == nil {
		t.Errorf("side's last state %+v: want the instance probed stopped", cs.LastTerminationState)
	}
	// The new instance answers 200 again (no state directory): Ready.
	waitPod(t, nil, c, ns, web.Name, time.Minute, "Ready after the restart", readyIs(true))

	// An unlabelled namespace's pod is untouched, and the kubelet probes it.
	plainPod := n.TargetPod(plain, "plain", nodetest.Target{HTTP: ports[5]})
	plainPod.Spec.Containers[0].ReadinessProbe = &v1.Probe{PeriodSeconds: 1, ProbeHandler: v1.ProbeHandler{
		HTTPGet: &v1.HTTPGetAction{Path: "/probe/ready", Port: intstr.FromInt32(int32(ports[5]))}}}
	if got := kubetest.CreatePod(t, c, plainPod); kubetest.SpecProbes(got) != 1 || len(got.Spec.ReadinessGates) != 0 || offload.Offloaded(got) {
		t.Errorf("a pod of an unlabelled namespace was changed: %+v", got.Spec)
	}

	// The webhook stopped: a pod is created as sent, and the kubelet probes it.
	k.kubectl("-n", offloadNS, "scale", "deployment/"+offloadFullname+"-webhook", "--replicas=0")
	eventually(t, nil, 2*time.Minute, "the webhook's pod gone", func() (bool, string) {
		pods, err := c.CoreV1().Pods(offloadNS).List(kubetest.Context(t), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
		return err == nil && len(pods.Items) == 0, fmt.Sprintf("%v", err)
	})
	down := n.TargetPod(ns, "while-down", nodetest.Target{HTTP: ports[6]})
	down.Spec.Containers[0].ReadinessProbe = &v1.Probe{PeriodSeconds: 1, ProbeHandler: v1.ProbeHandler{
		HTTPGet: &v1.HTTPGetAction{Path: "/probe/ready", Port: intstr.FromInt32(int32(ports[6]))}}}
	created := time.Now()
	if got := kubetest.CreatePod(t, c, down); kubetest.SpecProbes(got) != 1 || len(got.Spec.ReadinessGates) != 0 || offload.Offloaded(got) {
		t.Errorf("with the webhook down the pod was changed: %+v", got.Spec)
	}
	t.Logf("a pod created with the webhook down: %v", time.Since(created).Round(time.Millisecond))
	waitPod(t, nil, c, ns, "while-down", time.Minute, "Ready by the kubelet's probe", readyIs(true))
	eventually(t, nil, 30*time.Second, "the kubelet probing the pod created while the webhook was down", func() (bool, string) {
		n := counts.kubeletOf(ns, "while-down")
		return n > 0, fmt.Sprint(n)
	})
	k.kubectl("-n", offloadNS, "scale", "deployment/"+offloadFullname+"-webhook", "--replicas=1")
	webhookReady(t, c)

	// Give back: the label off, `probed offload status` says what rolling
	// restores, the Deployment rolled: the kubelet probes, no gate.
	out, _, code := runProbed(t, nil, "offload", "status", "--kubeconfig", n.Kubeconfig, "-n", ns)
	if code != 1 || !strings.Contains(out, "Deployment "+ns+"/web") || !strings.Contains(out, "probed.io/offload- first") {
		t.Errorf("probed offload status with the label on: exit %d:\n%s", code, out)
	}
	k.kubectl("label", "namespace", ns, offload.NamespaceLabel+"-")
	out, _, _ = runProbed(t, nil, "offload", "status", "--kubeconfig", n.Kubeconfig, "-n", ns)
	if !strings.Contains(out, "kubectl rollout restart deployment/web -n "+ns) || strings.Contains(out, "first") {
		t.Errorf("probed offload status with the label off:\n%s", out)
	}
	if out, _, code := runProbed(t, nil, "release", "--kubeconfig", n.Kubeconfig); code != 1 || !strings.Contains(out, "Deployment "+ns+"/web") {
		t.Errorf("probed release with an offloaded pod: exit %d, want 1 naming the Deployment:\n%s", code, out)
	}
	k.kubectl("-n", ns, "rollout", "restart", "deployment/web")
	back := deploymentPod(t, c, ns, web.UID, 2*time.Minute, "the rolled pod Ready", func(p *v1.Pod) (bool, string) { return podReady(p) })
	if kubetest.SpecProbes(back) != 5 || len(back.Spec.ReadinessGates) != 0 || offload.Offloaded(back) {
		t.Fatalf("the rolled pod: %d spec probes, gates %+v, record %v", kubetest.SpecProbes(back), back.Spec.ReadinessGates, offload.Offloaded(back))
	}
	eventually(t, nil, 30*time.Second, "the kubelet probing the rolled pod", func() (bool, string) {
		n := counts.kubeletOf(ns, back.Name)
		return n >= 5, fmt.Sprint(n)
	})
	if n := counts.probedOf(ns, back.Name); n != 0 {
		t.Errorf("probed ran %v probes of the rolled pod", n)
	}
	eventually(t, nil, time.Minute, "probed offload status: nothing offloaded", func() (bool, string) {
		out, _, code := runProbed(t, nil, "offload", "status", "--kubeconfig", n.Kubeconfig, "-n", ns)
		return code == 0, out
	})
}
