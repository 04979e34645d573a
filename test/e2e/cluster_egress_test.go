package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/internal/standin"
	"github.com/probed/probed/runtime/egress"
)

// ssrfAnnotation is the SSRF's reproduction: an
// annotation readiness probe that asks the node's network for the cloud
// metadata of a stand-in on 127.0.0.2 with the metadata header.
func ssrfAnnotation(port int) string {
	return fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":2,"httpGet":{"host":"127.0.0.2","port":%d,"path":"/computeMetadata/v1/","httpHeaders":[{"name":"Metadata-Flavor","value":"Google"}]}}]`, port)
}

// baselineNamespace returns a fresh namespace that enforces Pod Security
// "baseline", which refuses host in spec probes since v1.34 (KEP-4940).
func baselineNamespace(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	ns := kubetest.Namespace(t)
	obj, err := c.CoreV1().Namespaces().Get(kubetest.Context(t), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.Labels["pod-security.kubernetes.io/enforce"] = "baseline"
	if _, err := c.CoreV1().Namespaces().Update(kubetest.Context(t), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("label namespace %s baseline: %v", ns, err)
	}
	return ns
}

// annotatedPod creates a running pod with the readiness gate and the
// annotation on node.
func annotatedPod(t *testing.T, c kubernetes.Interface, ns, name, node, annotation string) {
	t.Helper()
	pod := kubetest.NewPod(ns, name, node, "app")
	pod.Annotations = map[string]string{"probed.io/probes": annotation}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "probed.io/ready"}}
	kubetest.CreatePod(t, c, pod)
	kubetest.SetPodRunning(t, c, ns, name, true)
}

// TestClusterProbesConnectOnlyToTheirPod is the SSRF's reproduction against
// the real API server and the real agent binary: in a namespace that
// enforces Pod Security "baseline", a spec probe with host is refused by
// the API server (the premise) while the annotation is accepted;
// the agent refuses that annotation with an Event naming httpGet.host,
// and the stand-in on 127.0.0.2 sees no connection at all — neither from
// it nor from the pod's own target redirecting there; a target answering
// with an SSH banner fails the probe without the banner in the Event.
// With --allow-probe-host 127.0.0.2/32 the same annotation runs and
// reaches the stand-in with its header.
func TestClusterProbesConnectOnlyToTheirPod(t *testing.T) {
	admin := kubetest.Client(t)
	ns, node := baselineNamespace(t, admin), kubetest.NodeName(t)
	metadata := standin.HTTP(t, "127.0.0.2:0", `{"token":"node-credentials"}`)

	// The premise: Pod Security baseline refuses host in a spec probe.
	spec := kubetest.NewPod(ns, "spec-host", node, "app")
	spec.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{
		Host: "127.0.0.2", Port: intstr.FromInt32(int32(metadata.Port())), Path: "/computeMetadata/v1/"}}}
	_, err := admin.CoreV1().Pods(ns).Create(kubetest.Context(t), spec, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "baseline") || !strings.Contains(err.Error(), "host") {
		t.Fatalf("a spec probe with host in a baseline namespace: %v, want refused by Pod Security", err)
	}

	a := startClusterAgent(t, node, nil)

	annotatedPod(t, admin, ns, "ssrf", node, ssrfAnnotation(metadata.Port())) // accepted: annotations are not probes to Pod Security
	ssrfRunning := time.Now()
	waitEvent(t, a, admin, ns, "ssrf", "InvalidProbeAnnotation",
		"metadata.annotations[probed.io/probes][0].httpGet.host: Forbidden: probes may connect only to their pod's IP", egress.Flag)

	// The pod's own target redirects to the stand-in: the kubelet's rule
	// (H5) does not follow a redirect to another host, and the dial would
	// be refused anyway.
	redirect := serveHTTP(t, "127.0.0.1:0", http.RedirectHandler(fmt.Sprintf("http://127.0.0.2:%d/computeMetadata/v1/", metadata.Port()), http.StatusFound))
	annotatedPod(t, admin, ns, "redirect", node, fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":1,"httpGet":{"path":"/","port":%d}}]`, redirect))

	// A target that answers with an SSH banner, as the node's sshd would.
	banner := standin.Banner(t, "127.0.0.1:0", "SSH-2.0-OpenSSH_9.2p1\r\n")
	annotatedPod(t, admin, ns, "banner", node, fmt.Sprintf(`[{"container":"app","type":"readiness","periodSeconds":1,"httpGet":{"path":"/","port":%d}}]`, banner.Port()))

	waitEvent(t, a, admin, ns, "redirect", "ProbeWarning", "Readiness probe warning: Probe terminated redirects")
	waitEvent(t, a, admin, ns, "banner", "Unhealthy", "Readiness probe failed (3/3): container marked not ready:", egress.WithheldText)
	for _, pod := range []string{"ssrf", "redirect", "banner"} {
		for _, e := range podEvents(t, admin, ns, pod) {
			if strings.Contains(e.Note, "SSH-2.0") || strings.Contains(e.Note, "node-credentials") {
				t.Errorf("Event %s on %s carries the target's bytes: %q", e.Reason, pod, e.Note)
			}
		}
	}
	// The refused probe, had it been accepted, would have run twice by
	// now: the agent has probed for two of its periods (4 s) since the pod
	// ran, as the redirect pod's probe shows, and it runs a probe first
	// within its period (BR-24).
	waitProbedUntil(t, a, ns, "redirect", ssrfRunning.Add(4*time.Second))
	metadata.NoConnection(t)

	// The operator allows the range: the same annotation runs on a node
	// whose agent has --allow-probe-host 127.0.0.2/32, and its request
	// reaches the stand-in with the tenant's header.
	allowedNode := kubetest.NodeName(t)
	allowed := startClusterAgent(t, allowedNode, nil, "--allow-probe-host", "127.0.0.2/32")
	annotatedPod(t, admin, ns, "allowed", allowedNode, ssrfAnnotation(metadata.Port()))
	waitCondition(t, allowed, admin, ns, "allowed", "probed.io/ready", v1.ConditionTrue, "ProbeSucceeded", 30*time.Second)
	reqs := metadata.Requests()
	if len(reqs) == 0 || !strings.HasPrefix(reqs[0], "GET /computeMetadata/v1/ ") || !strings.Contains(reqs[0], "Metadata-Flavor: Google") {
		t.Fatalf("the stand-in read %q, want the annotation's request", reqs)
	}
	for _, e := range podEvents(t, admin, ns, "allowed") {
		if e.Reason == "InvalidProbeAnnotation" {
			t.Errorf("the allowed annotation was refused: %q", e.Note)
		}
	}
}

// waitProbedUntil waits until the first probe of pod ns/name has a result
// from at or after when, in the agent's history (GET
// /pods/{ns}/{name}/probes): the agent has been probing until then.
func waitProbedUntil(t *testing.T, a *clusterAgent, ns, name string, when time.Time) {
	t.Helper()
	eventually(t, a.proc, 30*time.Second, fmt.Sprintf("a run of the probe of %s/%s after %s", ns, name, when.Format(time.StampMilli)), func() (bool, string) {
		body, err := apiGet(a.Base, "/pods/"+ns+"/"+name+"/probes")
		if err != nil {
			return false, err.Error()
		}
		var h history.PodHistory
		if err := json.Unmarshal(body, &h); err != nil || len(h.Probes) == 0 || len(h.Probes[0].Results) == 0 {
			return false, string(body)
		}
		last := h.Probes[0].Results[len(h.Probes[0].Results)-1].Time
		return !last.Before(when), "last run at " + last.Format(time.StampMilli)
	})
}

// TestAllowProbeHostFlag: --allow-probe-host takes CIDRs and needs cluster
// mode; each refusal names the flag.
func TestAllowProbeHostFlag(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--kubeconfig", "/nonexistent", "--node-name", "n", "--allow-probe-host", "10.0.0.0/8,127.0.0.2"},
			`--allow-probe-host "127.0.0.2": not a CIDR (for one address: 127.0.0.2/32)`},
		{[]string{"run", "--manifests", t.TempDir(), "--allow-probe-host", "10.0.0.0/8"},
			"--allow-probe-host needs cluster mode (--kubeconfig or --in-cluster)"},
	}
	for _, c := range cases {
		_, stderr, code := runProbed(t, nil, c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("probed %s: exit %d, stderr %q; want a failure saying %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}
