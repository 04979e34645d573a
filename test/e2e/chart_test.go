package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/probed/probed/agent/release"
	"github.com/probed/probed/deploy/image"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/internal/nodetest"
	"github.com/probed/probed/internal/probetarget"
)

// The chart and the plain manifests as an operator installs them, on the
// real single-node cluster of test/node/env.sh (controller-manager,
// scheduler, ServiceAccount admission): the image built by `make image`
// (PROBED_TEST_IMAGE, else built here the same way) imported into the
// node's containerd, `helm install`, the DaemonSet rolled out by its
// controller and its pod bound by the scheduler, the agent running from the
// image with its bound token, the shipped admission policy in force, a gated
// Deployment Ready only after probed's verdict, exec and a liveness restart
// through the runtime, `helm upgrade` rolling the agent under a Ready gated
// pod that never flips, the uninstall of docs/cluster.md ("probed release",
// the workload changed, `helm uninstall`, "probed release --hand-back"), and
// the same with `kubectl apply -f deploy/kubernetes/`. They skip without
// PROBED_TEST_NODE.

const (
	chartDir      = "../../deploy/helm/probed"
	plainDir      = "../../deploy/kubernetes"
	chartNS       = "probed-chart"
	chartRelease  = "e2e"
	chartFullname = "e2e-probed" // the chart's fullname of release e2e: its DaemonSet, ServiceAccount, ClusterRoles
	plainNS       = "probed-system"
)

// kube runs the node's kubectl and helm as the admin, helm's state in a
// temporary directory (never the user's).
type kube struct {
	t    *testing.T
	n    *nodetest.Node
	home string
}

func newKube(t *testing.T, n *nodetest.Node) *kube {
	if n.Kubectl == "" || n.Helm == "" {
		t.Fatalf("node.env names no kubectl or helm: a node started by an older test/node/env.sh")
	}
	return &kube{t: t, n: n, home: t.TempDir()}
}

// run runs bin with args (at most timeout) and returns its combined output
// and error.
func (k *kube) run(timeout time.Duration, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.n.Kubeconfig, "HELM_CACHE_HOME="+k.home+"/cache",
		"HELM_CONFIG_HOME="+k.home+"/config", "HELM_DATA_HOME="+k.home+"/data")
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// must runs a command that must succeed; it returns its output and how long it took.
func (k *kube) must(bin string, args ...string) (string, time.Duration) {
	k.t.Helper()
	t0 := time.Now()
	out, err := k.run(6*time.Minute, bin, args...)
	if err != nil {
		k.t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return out, time.Since(t0)
}

func (k *kube) kubectl(args ...string) string {
	k.t.Helper()
	out, _ := k.must(k.n.Kubectl, args...)
	return out
}

func (k *kube) helm(args ...string) time.Duration {
	k.t.Helper()
	_, d := k.must(k.n.Helm, args...)
	return d
}

// probedImage returns the image archive to install: $PROBED_TEST_IMAGE
// (`make image` wrote it), else one built here as `make image` builds it
// (the static binary, deploy/image).
func probedImage(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROBED_TEST_IMAGE"); p != "" {
		return p
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "probed")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/probed")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the static probed: %v\n%s", err, out)
	}
	img, err := image.Build(image.Options{Binary: bin, OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "probed-image.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := image.WriteArchive(f, img, "ghcr.io/probed/probed:0.1.0"); err != nil {
		t.Fatal(err)
	}
	return archive
}

// checkReadyOnlyWithGate: in every version of pod uid, Ready turned True
// only where probed's gate was True (the kubelet computes Ready from it).
func checkReadyOnlyWithGate(t *testing.T, h *podHistory, uid types.UID, name string) {
	t.Helper()
	wasReady := false
	for _, p := range h.of(uid, 0) {
		ready, desc := podReady(p)
		if ready && !wasReady {
			if g := gateCondition(p, gate); g == nil || g.Status != v1.ConditionTrue {
				t.Errorf("pod %s turned Ready at resourceVersion %s while the gate is not True: %s", name, p.ResourceVersion, desc)
			}
		}
		wasReady = ready
	}
}

// checkNoFlip: no version of pod uid recorded from index from is not
// Ready or has the gate not True.
func checkNoFlip(t *testing.T, h *podHistory, uid types.UID, from int, name, during string) {
	t.Helper()
	for _, p := range h.of(uid, from) {
		if ready, desc := podReady(p); !ready {
			t.Errorf("pod %s flipped during %s: resourceVersion %s: %s", name, during, p.ResourceVersion, desc)
		}
	}
}

// agentPod waits until the DaemonSet ns/name is rolled out (its controller
// made one pod for the node, at the current generation, and the pod is
// Ready) and returns that pod, other than not (a UID: the pod of the
// rollout before).
func agentPod(t *testing.T, c kubernetes.Interface, n *nodetest.Node, ns, name string, not types.UID) *v1.Pod {
	t.Helper()
	var pod *v1.Pod
	eventually(t, nil, 4*time.Minute, "DaemonSet "+ns+"/"+name+" rolled out", func() (bool, string) {
		ds, err := c.AppsV1().DaemonSets(ns).Get(kubetest.Context(t), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := ds.Status
		desc := fmt.Sprintf("generation %d observed %d, desired %d, updated %d, ready %d", ds.Generation, st.ObservedGeneration,
			st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberReady)
		if st.ObservedGeneration != ds.Generation || st.DesiredNumberScheduled != 1 || st.UpdatedNumberScheduled != 1 || st.NumberReady != 1 {
			return false, desc
		}
		pods, err := c.CoreV1().Pods(ns).List(kubetest.Context(t), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			owner := metav1.GetControllerOf(p)
			if p.DeletionTimestamp == nil && p.UID != not && owner != nil && owner.Kind == "DaemonSet" && owner.Name == name {
				if ready, _ := podReady(p); ready {
					pod = p
					return true, desc
				}
			}
		}
		return false, desc + "; no Ready pod of it"
	})
	// The DaemonSet controller leaves the binding to the scheduler (a node
	// affinity, no spec.nodeName): the pod is on the node because
	// kube-scheduler bound it.
	if pod.Spec.NodeName != n.Name || pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil {
		t.Errorf("agent pod %s: node %q, affinity %+v: want the DaemonSet's node affinity and the scheduler's binding to %s", pod.Name, pod.Spec.NodeName, pod.Spec.Affinity, n.Name)
	}
	return pod
}

// agentToken is the token the kubelet projected into the agent's pod (its
// kube-api-access volume, on the node's disk); it checks that the API server
// authenticates it as the agent's ServiceAccount, bound to that pod on the
// node, and returns a client config with it.
func agentToken(t *testing.T, n *nodetest.Node, pod *v1.Pod, sa string) *rest.Config {
	t.Helper()
	vol := ""
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil && strings.HasPrefix(v.Name, "kube-api-access-") {
			vol = v.Name
		}
	}
	if vol == "" {
		t.Fatalf("agent pod %s has no projected token volume (ServiceAccount admission): %+v", pod.Name, pod.Spec.Volumes)
	}
	token, err := os.ReadFile(filepath.Join(n.Dir, "kubelet", "pods", string(pod.UID), "volumes", "kubernetes.io~projected", vol, "token"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(kubetest.Config(t))
	cfg.BearerToken = string(token)
	review, err := kubetest.ClientFor(t, cfg).AuthenticationV1().SelfSubjectReviews().Create(kubetest.Context(t), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review with the agent's token: %v", err)
	}
	u := review.Status.UserInfo
	if u.Username != "system:serviceaccount:"+pod.Namespace+":"+sa || !equal(u.Extra[kubetest.NodeNameExtra], n.Name) ||
		!equal(u.Extra["authentication.kubernetes.io/pod-name"], pod.Name) {
		t.Errorf("the agent's token is %s with extra %v: want the ServiceAccount %s/%s bound to pod %s on node %s", u.Username, u.Extra, pod.Namespace, sa, pod.Name, n.Name)
	}
	return cfg
}

func equal(got authenticationv1.ExtraValue, want string) bool { return len(got) == 1 && got[0] == want }

// checkPolicyDeniesReady: the agent's own token may not write Ready on a pod
// of its own node (RBAC allows the patch; the shipped policy refuses it).
func checkPolicyDeniesReady(t *testing.T, agent *rest.Config, pod *v1.Pod) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"uid":%q},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`, pod.UID)
	_, err := kubetest.ClientFor(t, agent).CoreV1().Pods(pod.Namespace).Patch(kubetest.Context(t), pod.Name, types.StrategicMergePatchType,
		[]byte(patch), metav1.PatchOptions{}, "status")
	if !kubetest.DeniedByPolicy(err) {
		t.Errorf("the agent's token wrote Ready on pod %s/%s of its node: %v, want a denial by the admission policy", pod.Namespace, pod.Name, err)
	}
}

// deploymentPod is the only live pod of the Deployment web in ns, other than not.
func deploymentPod(t *testing.T, c kubernetes.Interface, ns string, not types.UID, timeout time.Duration, what string, cond func(*v1.Pod) (bool, string)) *v1.Pod {
	t.Helper()
	var got *v1.Pod
	eventually(t, nil, timeout, "a pod of Deployment "+ns+"/web: "+what, func() (bool, string) {
		pods, err := c.CoreV1().Pods(ns).List(kubetest.Context(t), metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		var live []*v1.Pod
		for i := range pods.Items {
			if p := &pods.Items[i]; p.DeletionTimestamp == nil && p.UID != not {
				live = append(live, p)
			}
		}
		if len(live) != 1 {
			return false, fmt.Sprintf("%d pods", len(live))
		}
		got = live[0]
		return cond(got)
	})
	return got
}

// runningNotReady: the pod is on node n (the scheduler bound it), its
// container runs, probed's gate says ProbeFailed (its exec probe ran in the
// container and failed) and the kubelet's Ready is not True.
func runningNotReady(n *nodetest.Node) func(*v1.Pod) (bool, string) {
	return func(p *v1.Pod) (bool, string) {
		g := gateCondition(p, gate)
		cs := containerStatus(p, "app")
		ready, desc := podReady(p)
		return p.Spec.NodeName == n.Name && cs != nil && cs.State.Running != nil && g != nil && g.Status == v1.ConditionFalse &&
			g.Reason == "ProbeFailed" && !ready, desc
	}
}

// webDeployment is the gated workload: the probe target, scheduled (no
// spec.nodeName), its readiness an annotation exec probe that reads a file of
// an emptyDir (it outlives a container restart) and its liveness an
// annotation HTTP probe of /probe/live. Recreate: the port is the node's.
func webDeployment(n *nodetest.Node, ns string, port int) *appsv1.Deployment {
	tg := nodetest.Target{HTTP: port, ReadyFile: "/ready/ready"}
	pod := n.TargetPod(ns, "", tg)
	pod.Spec.NodeName = ""
	pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "ready", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "ready", MountPath: "/ready"})
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	return webDeploymentOf(ns, map[string]string{"probed.io/probes": `[` +
		`{"container":"app","type":"readiness","periodSeconds":1,"exec":{"command":["cat","/ready/ready"]}},` +
		httpProbe("app", "liveness", "live", port, 2) + `]`}, pod.Spec)
}

// webDeploymentOf is the Deployment ns/web of one replica of spec, its pods
// labelled app=web and annotated so; Recreate, since the pods' ports are
// the node's.
func webDeploymentOf(ns string, annotations map[string]string, spec v1.PodSpec) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	one := int32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations}, Spec: spec},
		},
	}
}

// TestChartOnTheNode: docs/cluster.md "Install", "Upgrade" and "Uninstall"
// with the chart, followed on the real node.
func TestChartOnTheNode(t *testing.T) {
	n := nodetest.Load(t)
	c := kubetest.Client(t)
	k := newKube(t, n)
	_, optBefore := os.Stat("/opt/probed")
	archive := probedImage(t)
	names := n.ImportImage(t, archive)
	i := strings.LastIndex(names[0], ":")
	repo, tag := names[0][:i], names[0][i+1:]
	ns := kubetest.Namespace(t)
	kubetest.LabelNamespace(t, ns, map[string]string{"probed.io/liveness-actions": "enabled"})
	t.Cleanup(func() {
		// What the test did not undo (it failed half way): the workload (its ReplicaSet would
		// make its pod again behind nodetest's cleanup), the release, then its namespace.
		deleteDeployment(t, c, ns, "web")
		k.run(3*time.Minute, n.Helm, "uninstall", chartRelease, "-n", chartNS, "--wait")
		k.run(3*time.Minute, n.Kubectl, "delete", "namespace", chartNS, "--ignore-not-found", "--wait")
	})

	// Install.
	installed := time.Now()
	took := k.helm("install", chartRelease, chartDir, "-n", chartNS, "--create-namespace", "--wait", "--timeout", "5m",
		"--set", "image.repository="+repo, "--set", "image.tag="+tag,
		"--set", "apiServer.host="+n.APIHost, "--set", "apiServer.port="+strconv.Itoa(n.APIPort),
		"--set", "cri.enabled=true", "--set", "cri.socket="+n.CRISocket, "--set", "livenessAction=restart")
	agent := agentPod(t, c, n, chartNS, chartFullname, "")
	t.Logf("helm install --wait: %v, the agent Ready %v after helm began", took.Round(100*time.Millisecond), time.Since(installed).Round(100*time.Millisecond))
	token := agentToken(t, n, agent, chartFullname)
	if logs := k.kubectl("-n", chartNS, "logs", agent.Name); !strings.Contains(logs, "level=") {
		t.Errorf("kubectl logs of the agent (the API server through the kubelet): %q", tail(logs, 5))
	}

	// A gated Deployment, scheduled, and a bare gated pod for the uninstall.
	h := watchPods(t, c, ns, metav1.ListOptions{LabelSelector: "app in (web, leftover)"})
	port := nodetest.FreePorts(t, 2)
	if _, err := c.AppsV1().Deployments(ns).Create(kubetest.Context(t), webDeployment(n, ns, port[0]), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	left := n.TargetPod(ns, "leftover", nodetest.Target{HTTP: port[1]})
	left.Labels = map[string]string{"app": "leftover"}
	left.Annotations = map[string]string{"probed.io/probes": "[" + httpProbe("app", "readiness", "ready", port[1], 1) + "]"}
	left.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: gate}}
	kubetest.CreatePod(t, c, left)
	web := deploymentPod(t, c, ns, "", 2*time.Minute, "running, not Ready (its exec readiness fails: no file)", runningNotReady(n))
	checkPolicyDeniesReady(t, token, web)
	// kubectl exec: the API server, the kubelet, the runtime's streaming server.
	k.kubectl("-n", ns, "exec", web.Name, "-c", "app", "--", "touch", "/ready/ready")
	web = deploymentPod(t, c, ns, "", time.Minute, "Ready after probed's exec probe passed", func(p *v1.Pod) (bool, string) { return podReady(p) })
	waitPod(t, nil, c, ns, "leftover", time.Minute, "Ready", readyIs(true))
	checkReadyOnlyWithGate(t, h, web.UID, web.Name)

	// Liveness restart through the runtime (namespace labelled, livenessAction restart).
	if err := probetarget.SetStatus(fmt.Sprintf("http://%s:%d", n.IP, port[0]), "live", 500); err != nil {
		t.Fatal(err)
	}
	web = deploymentPod(t, c, ns, "", time.Minute, "restarted by probed's liveness probe, Ready again", func(p *v1.Pod) (bool, string) {
		cs := containerStatus(p, "app")
		ready, desc := podReady(p)
		return cs != nil && cs.RestartCount >= 1 && ready, desc
	})
	eventually(t, nil, 30*time.Second, "probed's Killing event on "+web.Name, func() (bool, string) {
		var seen []string
		for _, e := range podEvents(t, c, ns, web.Name) {
			if e.Reason == "Killing" && e.ReportingController == "probed.io/agent" && strings.Contains(e.Note, "failed liveness probe") {
				return true, ""
			}
			seen = append(seen, e.ReportingController+" "+e.Reason+": "+e.Note)
		}
		return false, strings.Join(seen, "; ")
	})

	// Upgrade: the agent rolls; no gated pod flips.
	from := h.len()
	upgraded := time.Now()
	took = k.helm("upgrade", chartRelease, chartDir, "-n", chartNS, "--reuse-values", "--wait", "--timeout", "5m",
		"--set-string", "podAnnotations.example\\.com/rolled=1")
	next := agentPod(t, c, n, chartNS, chartFullname, agent.UID)
	t.Logf("helm upgrade --wait: %v, the new agent Ready %v after helm began (agent pod %s replaced by %s)", took.Round(100*time.Millisecond),
		time.Since(upgraded).Round(100*time.Millisecond), agent.Name, next.Name)
	time.Sleep(5 * time.Second) // the new agent's first verdicts
	checkNoFlip(t, h, web.UID, from, web.Name, "helm upgrade")
	leftover, err := c.CoreV1().Pods(ns).Get(kubetest.Context(t), "leftover", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkNoFlip(t, h, leftover.UID, from, "leftover", "helm upgrade")

	// Uninstall, in the order of docs/cluster.md: probed release says what still lists the gate.
	out, _, code := runProbed(t, nil, "release", "--kubeconfig", n.Kubeconfig)
	if code != 1 || !strings.Contains(out, "Deployment "+ns+"/web") {
		t.Fatalf("probed release with a gated template: exit %d, want 1 naming Deployment %s/web:\n%s", code, ns, out)
	}
	// The workload changes while probed runs: the gate out, the readiness probe into the spec.
	d, err := c.AppsV1().Deployments(ns).Get(kubetest.Context(t), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.ReadinessGates = nil
	d.Spec.Template.Annotations = map[string]string{"probed.io/probes": "[" + httpProbe("app", "liveness", "live", port[0], 2) + "]"}
	d.Spec.Template.Spec.Containers[0].ReadinessProbe = &v1.Probe{PeriodSeconds: 1,
		ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/ready/ready"}}}}
	if _, err := c.AppsV1().Deployments(ns).Update(kubetest.Context(t), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	moved := deploymentPod(t, c, ns, web.UID, 2*time.Minute, "the new pod, not gated, running", func(p *v1.Pod) (bool, string) {
		cs := containerStatus(p, "app")
		return len(p.Spec.ReadinessGates) == 0 && cs != nil && cs.State.Running != nil, p.Name
	})
	k.kubectl("-n", ns, "exec", moved.Name, "-c", "app", "--", "touch", "/ready/ready")
	waitPod(t, nil, c, ns, moved.Name, time.Minute, "Ready by the kubelet's readiness probe", readyIs(true))
	out, _, code = runProbed(t, nil, "release", "--kubeconfig", n.Kubeconfig)
	if code != 0 || !strings.Contains(out, ns+"/leftover") {
		t.Fatalf("probed release with no gated template: exit %d, want 0 listing the leftover pod:\n%s", code, out)
	}
	took = k.helm("uninstall", chartRelease, "-n", chartNS, "--wait", "--timeout", "3m")
	t.Logf("helm uninstall --wait: %v", took.Round(100*time.Millisecond))
	eventually(t, nil, 2*time.Minute, "the agent's pod garbage-collected with its DaemonSet", func() (bool, string) {
		pods, err := c.CoreV1().Pods(chartNS).List(kubetest.Context(t), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items))
	})
	for _, name := range []string{chartFullname, chartFullname + "-liveness-restart"} {
		if _, err := c.RbacV1().ClusterRoles().Get(kubetest.Context(t), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRole %s after helm uninstall: %v", name, err)
		}
	}
	if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(kubetest.Context(t), chartFullname+"-agent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("admission policy after helm uninstall: %v", err)
	}
	out, _, code = runProbed(t, nil, "release", "--hand-back", "--kubeconfig", n.Kubeconfig, "-o", "json")
	var report release.Report
	if err := json.Unmarshal([]byte(out), &report); code != 0 || err != nil {
		t.Fatalf("probed release --hand-back: exit %d, %v:\n%s", code, err, out)
	}
	if len(report.Pods) != 1 || report.Pods[0].Name != "leftover" || report.Pods[0].Ready || !report.Pods[0].Written {
		t.Errorf("hand-back %+v: want the leftover pod written False (its readiness was probed's alone)", report.Pods)
	}
	got := waitPod(t, nil, c, ns, "leftover", time.Minute, "not Ready: nobody checks it now", readyIs(false))
	if g := gateCondition(got, gate); g == nil || g.Reason != release.Reason {
		t.Errorf("leftover pod's gate after hand-back: %+v", g)
	}
	if ready, desc := podReady(mustGet(t, c, ns, moved.Name)); !ready {
		t.Errorf("the moved pod after uninstall: %s", desc)
	}
	// Nothing of the chart on the host.
	if _, err := os.Stat("/opt/probed"); os.IsNotExist(optBefore) && !os.IsNotExist(err) {
		t.Errorf("/opt/probed exists after the chart's install and uninstall: %v", err)
	}
}

// deleteDeployment deletes ns/name in the foreground (its ReplicaSets and
// pods first: none is made again behind the deletion) and waits until it
// is gone; a Deployment already gone is fine.
func deleteDeployment(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	fg := metav1.DeletePropagationForeground
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := c.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Errorf("delete Deployment %s/%s: %v", ns, name, err)
		return
	}
	for ctx.Err() == nil {
		if _, err := c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("Deployment %s/%s still there 2 minutes after its deletion", ns, name)
}

func mustGet(t *testing.T, c kubernetes.Interface, ns, name string) *v1.Pod {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(kubetest.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlainManifestsOnTheNode: the same with `kubectl apply -f
// deploy/kubernetes/`: it succeeds the first time and grants exactly the
// default rights (no eviction or restart binding); the options an operator
// turns on (the API server's address, the container runtime's patch with
// this node's socket, the resident exec mode) roll the agent without a gated
// pod flipping, and a second `kubectl apply -f deploy/kubernetes/` keeps
// them; `kubectl delete -f` and `probed release --hand-back` take it off.
func TestPlainManifestsOnTheNode(t *testing.T) {
	n := nodetest.Load(t)
	c := kubetest.Client(t)
	k := newKube(t, n)
	names := n.ImportImage(t, probedImage(t))
	if names[0] != "ghcr.io/probed/probed:0.1.0" {
		n.TagImage(t, names[0], "ghcr.io/probed/probed:0.1.0")
	}
	ns := kubetest.Namespace(t)
	t.Cleanup(func() {
		deleteDeployment(t, c, ns, "web")
		k.run(3*time.Minute, n.Kubectl, "delete", "-f", plainDir, "--ignore-not-found", "--wait")
	})

	applied := time.Now()
	_, took := k.must(n.Kubectl, "apply", "-f", plainDir)
	t.Logf("kubectl apply -f deploy/kubernetes/: %v", took.Round(100*time.Millisecond))
	for _, name := range []string{"probed-eviction", "probed-liveness-restart"} {
		if _, err := c.RbacV1().ClusterRoleBindings().Get(kubetest.Context(t), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRoleBinding %s after a plain apply: %v, want none (opt-in only)", name, err)
		}
	}
	// This node has no kube-proxy: name the API server. And the runtime, with this node's socket.
	k.kubectl("-n", plainNS, "set", "env", "daemonset/probed", "KUBERNETES_SERVICE_HOST="+n.APIHost, "KUBERNETES_SERVICE_PORT="+strconv.Itoa(n.APIPort))
	patch, err := os.ReadFile(filepath.Join(plainDir, "options", "daemonset-cri.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	patchFile := filepath.Join(t.TempDir(), "daemonset-cri.yaml")
	writeFile(t, patchFile, strings.Replace(string(patch), "path: /run/containerd/containerd.sock", "path: "+n.CRISocket, 1))
	k.kubectl("-n", plainNS, "patch", "daemonset", "probed", "--patch-file", patchFile)
	agent := agentPod(t, c, n, plainNS, "probed", "")
	t.Logf("the agent Ready %v after kubectl apply began (its API server named, the runtime patched)", time.Since(applied).Round(100*time.Millisecond))
	token := agentToken(t, n, agent, "probed")

	h := watchPods(t, c, ns, metav1.ListOptions{LabelSelector: "app=web"})
	port := nodetest.FreePorts(t, 1)[0]
	d := webDeployment(n, ns, port)
	if _, err := c.AppsV1().Deployments(ns).Create(kubetest.Context(t), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := deploymentPod(t, c, ns, "", 2*time.Minute, "running, not Ready", runningNotReady(n))
	checkPolicyDeniesReady(t, token, web)
	k.kubectl("-n", ns, "exec", web.Name, "-c", "app", "--", "touch", "/ready/ready")
	web = deploymentPod(t, c, ns, "", time.Minute, "Ready after probed's exec probe", func(p *v1.Pod) (bool, string) { return podReady(p) })
	checkReadyOnlyWithGate(t, h, web.UID, web.Name)

	// An option switched on the live DaemonSet rolls the agent; a re-apply keeps every option.
	from := h.len()
	k.kubectl("-n", plainNS, "set", "env", "daemonset/probed", "PROBED_EXEC_MODE=resident")
	next := agentPod(t, c, n, plainNS, "probed", agent.UID)
	k.kubectl("apply", "-f", plainDir)
	ds, err := c.AppsV1().DaemonSets(plainNS).Get(kubetest.Context(t), "probed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["PROBED_EXEC_MODE"] != "resident" || env["PROBED_CONTAINER_RUNTIME_ENDPOINT"] != "unix:///run/cri/cri.sock" || env["KUBERNETES_SERVICE_HOST"] != n.APIHost {
		t.Errorf("after a second kubectl apply -f deploy/kubernetes/ the options are gone: env %v", env)
	}
	if ds.Generation != ds.Status.ObservedGeneration || agentPod(t, c, n, plainNS, "probed", "").UID != next.UID {
		t.Errorf("the re-apply changed the DaemonSet's template (a second rollout)")
	}
	time.Sleep(5 * time.Second)
	checkNoFlip(t, h, web.UID, from, web.Name, "the agent's rollout")

	// Off: the Deployment first, then the manifests, then the hand-back.
	deleteDeployment(t, c, ns, "web")
	if out, _, code := runProbed(t, nil, "release", "--kubeconfig", n.Kubeconfig); code != 0 {
		t.Fatalf("probed release: exit %d:\n%s", code, out)
	}
	_, took = k.must(n.Kubectl, "delete", "-f", plainDir, "--wait")
	t.Logf("kubectl delete -f deploy/kubernetes/: %v", took.Round(100*time.Millisecond))
	if out, _, code := runProbed(t, nil, "release", "--hand-back", "--kubeconfig", n.Kubeconfig); code != 0 {
		t.Fatalf("probed release --hand-back: exit %d:\n%s", code, out)
	}
}
