package webhook_test

// The offload webhook against a real kube-apiserver and etcd
// (PROBED_TEST_KUBECONFIG, test/kube/env.sh; the tests skip without it):
// the API server calls the webhook on loopback through a configuration
// with a url, trusting the CA the webhook provisioned and published
// itself, and applies its patches to the pods it stores.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/agent/kube/offload"
	"github.com/probed/probed/agent/kube/servingcert"
	"github.com/probed/probed/agent/kube/webhook"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime/egress"
)

// running is a webhook started by start.
type running struct {
	addr string
	stop func()
}

// start runs the webhook for the agents' defaults with the container
// runtime and liveness restarts in namespaces labelled
// probed.io/liveness-actions=enabled, on a loopback port, its own
// certificate for 127.0.0.1 kept in own/probed-webhook-tls and published
// into the configuration name.
func start(t *testing.T, c kubernetes.Interface, own, name string) *running {
	keeper, err := servingcert.New(servingcert.Options{Client: c, Namespace: own, Secret: "probed-webhook-tls",
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, WebhookConfiguration: name})
	if err != nil {
		t.Fatal(err)
	}
	addr := make(chan net.Addr, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		err := webhook.Run(ctx, webhook.Options{
			Client: c,
			Offload: offload.Config{
				Policy:        podprobes.Cluster(agent.ClusterAnnotationOptions(egress.NewRule(nil), agent.DefaultMaxProbesPerPod, agent.DefaultMinProbePeriod), ""),
				ReadinessGate: v1.PodConditionType(agent.DefaultReadinessGate),
			},
			LivenessRestarts: true,
			OwnNamespace:     own,
			Listen:           "127.0.0.1:0",
			Certificates:     keeper,
			Ready:            func(a net.Addr) { addr <- a },
			Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Errorf("webhook.Run: %v", err)
			close(addr)
		}
	})
	r := &running{stop: func() { cancel(); wg.Wait() }}
	t.Cleanup(r.stop)
	a, ok := <-addr
	if !ok {
		t.FailNow()
	}
	r.addr = a.String()
	return r
}

// ready waits until the webhook answers /readyz (its certificate served,
// the namespaces read) and the configuration holds its CA.
func (r *running) ready(t *testing.T, c kubernetes.Interface, name string) {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	kubetest.Eventually(t, "the webhook ready and its CA published", func() bool {
		resp, err := client.Get("https://" + r.addr + webhook.PathReadyz)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cfg, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(kubetest.Context(t), name, metav1.GetOptions{})
		return resp.StatusCode == 200 && err == nil && len(cfg.Webhooks[0].ClientConfig.CABundle) > 0
	})
}

// configure creates the configuration as the chart has it (CREATE and
// UPDATE of pods, failurePolicy Ignore, sideEffects None, reinvocation
// IfNeeded, namespaces labelled probed.io/offload=enabled), with a url to
// addr and, the server being shared, only the test's namespaces.
func configure(t *testing.T, name, addr string, namespaces ...string) {
	kubetest.CreateMutatingWebhookConfiguration(t, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "offload.probed.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + webhook.PathMutate)},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{
				MatchLabels:      map[string]string{offload.NamespaceLabel: "enabled"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces}},
			},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](5),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			AdmissionReviewVersions: []string{"v1"},
		}},
	})
}

// webPod is a pod of unchanged manifests: app with an HTTP readiness
// probe, a TCP liveness probe and a startup probe; cache with an exec
// readiness probe.
func webPod(ns, name string) *v1.Pod {
	pod := kubetest.NewPod(ns, name, "node-offload", "app", "cache")
	http := func(path string) *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: intstr.FromInt32(8080)}}}
	}
	app := &pod.Spec.Containers[0]
	app.ReadinessProbe, app.StartupProbe = http("/ready"), http("/started")
	app.StartupProbe.FailureThreshold = 30
	app.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}
	pod.Spec.Containers[1].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"redis-cli", "ping"}}}}
	return pod
}

// offloaded checks that the stored pod has no spec probe, the gate, and a
// record the agents read as its four probes.
func offloaded(t *testing.T, pod *v1.Pod) {
	t.Helper()
	if n := kubetest.SpecProbes(pod); n != 0 {
		t.Fatalf("pod %s keeps %d spec probes", pod.Name, n)
	}
	if len(pod.Spec.ReadinessGates) != 1 || string(pod.Spec.ReadinessGates[0].ConditionType) != agent.DefaultReadinessGate {
		t.Fatalf("pod %s gates %+v", pod.Name, pod.Spec.ReadinessGates)
	}
	view := podprobes.Of(pod, podprobes.Cluster(customprobe.Options{}, ""))
	if len(view.Probes) != 4 || len(view.Refused) != 0 {
		t.Fatalf("pod %s: the agents' view has %d probes, refused %+v", pod.Name, len(view.Probes), view.Refused)
	}
}

func untouched(t *testing.T, pod *v1.Pod) {
	t.Helper()
	if n := kubetest.SpecProbes(pod); n != 4 || len(pod.Spec.ReadinessGates) != 0 || offload.Offloaded(pod) {
		t.Fatalf("pod %s/%s was changed: %d spec probes, gates %+v, record %v", pod.Namespace, pod.Name, n, pod.Spec.ReadinessGates, offload.Offloaded(pod))
	}
}

// The cases on a real API server: pods of a labelled namespace
// are stored with no spec probe, the gate and the record; a server-side
// dry run answers the same pod and stores nothing; a pod re-created from a
// stored one comes out the same; server-side and client-side apply of the
// pod's manifest again change nothing and are accepted; pods of an
// unlabelled namespace and of probed's own namespace (labelled) are
// untouched; with the webhook stopped, pods are created as they were sent.
func TestOffloadWebhookOnTheAPIServer(t *testing.T) {
	c := kubetest.Client(t)
	own, shop, plain := kubetest.Namespace(t), kubetest.Namespace(t), kubetest.Namespace(t)
	enabled := map[string]string{offload.NamespaceLabel: "enabled", "probed.io/liveness-actions": "enabled"}
	kubetest.LabelNamespace(t, shop, enabled)
	kubetest.LabelNamespace(t, own, enabled)
	name := "probed-offload-" + shop
	r := start(t, c, own, name)
	configure(t, name, r.addr, shop, plain, own)
	r.ready(t, c, name)
	ctx := kubetest.Context(t)

	web := kubetest.CreatePod(t, c, webPod(shop, "web"))
	offloaded(t, web)
	note, ok := offload.ReadNote(web)
	if !ok || note.ReadinessGate != agent.DefaultReadinessGate || len(note.Left) != 0 {
		t.Fatalf("note %+v", note)
	}

	dry, err := c.CoreV1().Pods(shop).Create(ctx, webPod(shop, "dry"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	offloaded(t, dry)
	if _, err := c.CoreV1().Pods(shop).Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the dry run stored a pod: %v", err)
	}

	again := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: shop, Name: "web-again", Annotations: web.Annotations, Labels: web.Labels}, Spec: *web.Spec.DeepCopy()}
	recreated := kubetest.CreatePod(t, c, again)
	offloaded(t, recreated)
	if recreated.Annotations[offload.RecordAnnotation] != web.Annotations[offload.RecordAnnotation] {
		t.Fatal("the re-created pod's record differs")
	}

	manifest := webPod(shop, "applied")
	manifest.APIVersion, manifest.Kind = "v1", "Pod"
	body, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		applied, err := c.CoreV1().Pods(shop).Patch(ctx, "applied", types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "kubectl", Force: ptr.To(true)})
		if err != nil {
			t.Fatalf("server-side apply #%d of the same manifest: %v", i+1, err)
		}
		offloaded(t, applied)
	}
	// What client-side apply sends for a live pod that lacks the
	// manifest's probes: a strategic merge patch that sets them.
	patch := fmt.Sprintf(`{"metadata":{"labels":{"applied":"again"}},"spec":{"containers":[{"name":"app","readinessProbe":%s}]}}`, mustJSON(t, web.Annotations, "app", "readiness"))
	patched, err := c.CoreV1().Pods(shop).Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("a patch that puts a moved probe back: %v", err)
	}
	offloaded(t, patched)
	if patched.Labels["applied"] != "again" {
		t.Fatal("the patch's own change was lost")
	}

	untouched(t, kubetest.CreatePod(t, c, webPod(plain, "web")))
	untouched(t, kubetest.CreatePod(t, c, webPod(own, "web")))

	r.stop()
	untouched(t, kubetest.CreatePod(t, c, webPod(shop, "web-after")))
}

// mustJSON is the recorded v1.Probe of container and type, as JSON.
func mustJSON(t *testing.T, annotations map[string]string, container, typ string) string {
	var rec []customprobe.Offloaded
	if err := json.Unmarshal([]byte(annotations[offload.RecordAnnotation]), &rec); err != nil {
		t.Fatal(err)
	}
	for _, e := range rec {
		if e.Container == container && e.Type == typ {
			return string(e.Probe)
		}
	}
	t.Fatalf("no %s/%s in the record", container, typ)
	return ""
}
