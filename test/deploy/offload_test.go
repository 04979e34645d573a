package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/probed/probed/agent/kube/offload"
	"github.com/probed/probed/agent/kube/servingcert"
	"github.com/probed/probed/agent/kube/webhook"
	"github.com/probed/probed/deploy"
	"github.com/probed/probed/internal/kubetest"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
)

// offloadValues turn the webhook on beside non-default agent settings it
// must follow.
const offloadValues = `
offload:
  enabled: true
  replicas: 3
  timeoutSeconds: 3
readinessGate: example.com/probed
livenessAction: restart
livenessActionNamespaces: example.com/restarts=yes
cri:
  enabled: true
allowProbeHost: ["10.0.0.0/8"]
limits:
  maxProbesPerPod: 12
  minProbePeriod: 2s
`

func webhookObjects(t *testing.T, objects []runtime.Object) (*appsv1.Deployment, *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	return only[*appsv1.Deployment](t, objects), only[*admissionregistrationv1.MutatingWebhookConfiguration](t, objects)
}

// argsOf maps a container's --flag=value arguments (and bare --flag to
// "true").
func argsOf(c v1.Container) map[string]string {
	out := map[string]string{}
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			out[k] = v
		} else {
			out[a] = "true"
		}
	}
	return out
}

// TestChartOffload: offload.enabled renders the webhook: a Deployment of
// `probed webhook` told what the agents do from the DaemonSet's own values
// (the gate, the liveness action and its namespaces, the runtime, the
// egress rule, the limits: what it moves, they run), a PodDisruptionBudget
// and a Service for its pods, and the configuration the issue asks for:
// CREATE and UPDATE of pods in labelled namespaces, never kube-system nor
// the release's, failurePolicy Ignore with a short timeout, sideEffects
// None, reinvocation IfNeeded, no caBundle (the webhook keeps it); RBAC for
// its one Secret and its one configuration. Off, none of it renders.
func TestChartOffload(t *testing.T) {
	for _, o := range render(t, "probed", "probed-system") {
		if kindOf(o) == "MutatingWebhookConfiguration" || kindOf(o) == "Deployment" {
			t.Fatalf("offload off renders %s %s", kindOf(o), name(o))
		}
	}
	objects := render(t, "probed", "probed-system", "-f", valuesFile(t, offloadValues))
	d, cfg := webhookObjects(t, objects)
	ds := only[*appsv1.DaemonSet](t, objects)
	agent, hook := argsOf(ds.Spec.Template.Spec.Containers[0]), argsOf(d.Spec.Template.Spec.Containers[0])
	if d.Spec.Template.Spec.Containers[0].Args[0] != "webhook" {
		t.Fatalf("webhook args %q", d.Spec.Template.Spec.Containers[0].Args)
	}
	for _, flag := range []string{"--readiness-gate", "--liveness-action-namespaces", "--allow-probe-host", "--max-probes-per-pod", "--min-probe-period"} {
		if agent[flag] == "" || hook[flag] != agent[flag] {
			t.Errorf("%s: the agents run with %q, the webhook is told %q", flag, agent[flag], hook[flag])
		}
	}
	if env := envOf(ds.Spec.Template.Spec.Containers[0]); hook["--liveness-action"] != env[envLivenessAction] || hook["--agent-container-runtime"] != "true" ||
		env["PROBED_CONTAINER_RUNTIME_ENDPOINT"] == "" {
		t.Errorf("the webhook's --liveness-action %q and --agent-container-runtime %q; the agents' env %v", hook["--liveness-action"], hook["--agent-container-runtime"], env)
	}
	if hook["--webhook-configuration"] != cfg.Name || hook["--service"] != "probed-webhook" || hook["--tls-secret"] != "probed-webhook-tls" || *d.Spec.Replicas != 3 {
		t.Errorf("webhook args %v, replicas %d", hook, *d.Spec.Replicas)
	}
	pdb := only[*policyv1.PodDisruptionBudget](t, objects)
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget %+v does not keep the webhook's pods", pdb.Spec)
	}
	var svc *v1.Service
	for _, o := range objects {
		if s, ok := o.(*v1.Service); ok {
			svc = s
		}
	}
	if svc == nil || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) || svc.Name != "probed-webhook" {
		t.Fatalf("service %+v", svc)
	}
	if dsSel, _ := metav1.LabelSelectorAsSelector(ds.Spec.Selector); dsSel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Error("the DaemonSet's selector takes the webhook's pods")
	}

	if len(cfg.Webhooks) != 1 {
		t.Fatalf("webhooks %+v", cfg.Webhooks)
	}
	w := cfg.Webhooks[0]
	if *w.FailurePolicy != admissionregistrationv1.Ignore || *w.SideEffects != admissionregistrationv1.SideEffectClassNone || *w.TimeoutSeconds != 3 ||
		*w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy || len(w.ClientConfig.CABundle) != 0 ||
		w.ClientConfig.Service == nil || w.ClientConfig.Service.Name != svc.Name || *w.ClientConfig.Service.Path != webhook.PathMutate {
		t.Errorf("webhook %+v", w)
	}
	if r := w.Rules; len(r) != 1 || !reflect.DeepEqual(r[0].Operations, []admissionregistrationv1.OperationType{"CREATE", "UPDATE"}) || !reflect.DeepEqual(r[0].Resources, []string{"pods"}) {
		t.Errorf("rules %+v", w.Rules)
	}
	sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[string]bool{"shop": true, "kube-system": false, "probed-system": false} {
		set := labels.Set{offload.NamespaceLabel: "enabled", "kubernetes.io/metadata.name": ns}
		if sel.Matches(set) != want {
			t.Errorf("namespace %s labelled: selected %v", ns, !want)
		}
	}
	if sel.Matches(labels.Set{"kubernetes.io/metadata.name": "shop"}) {
		t.Error("an unlabelled namespace is selected")
	}

	if d.Spec.Template.Spec.HostNetwork || hook["--listen"] != ":8443" {
		t.Errorf("by default the webhook's pod has a network of its own and listens on 8443: hostNetwork %v, args %v", d.Spec.Template.Spec.HostNetwork, hook)
	}
	hn, _ := webhookObjects(t, render(t, "probed", "probed-system", "--set", "offload.enabled=true", "--set", "offload.hostNetwork=true", "--set", "offload.port=9443"))
	if c := hn.Spec.Template.Spec.Containers[0]; !hn.Spec.Template.Spec.HostNetwork || argsOf(c)["--listen"] != ":9443" || c.Ports[0].ContainerPort != 9443 {
		t.Errorf("offload.hostNetwork and .port: hostNetwork %v, container %+v", hn.Spec.Template.Spec.HostNetwork, c)
	}

	// A release named like a YAML 1.1 boolean keeps its name in every label.
	for _, o := range render(t, "off", "probed-system", "--set", "offload.enabled=true") {
		if m, ok := o.(metav1.Object); ok && m.GetLabels()["app.kubernetes.io/instance"] != "off" {
			t.Errorf("release off: %s %s labelled %v", kindOf(o), name(o), m.GetLabels())
		}
	}

	var rulesOf []rbacv1.PolicyRule
	for _, o := range objects {
		switch r := o.(type) {
		case *rbacv1.ClusterRole:
			if r.Name == "probed-webhook" {
				rulesOf = append(rulesOf, r.Rules...)
			}
		case *rbacv1.Role:
			rulesOf = append(rulesOf, r.Rules...)
		}
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, ResourceNames: []string{cfg.Name}, Verbs: []string{"get", "list", "watch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"probed-webhook-tls"}, Verbs: []string{"get", "list", "watch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
	}
	if !reflect.DeepEqual(rulesOf, want) {
		t.Errorf("webhook rules\n got %+v\nwant %+v", rulesOf, want)
	}
}

// TestChartOffloadCertManager: with offload.certManager.enabled the
// webhook serves cert-manager's certificate (a Certificate for the
// Service's names, from a self-signed Issuer of the chart's or the given
// issuerRef, mounted from its Secret) and the configuration asks
// cert-manager's CA injector for its caBundle; the webhook may then touch
// neither Secrets nor the configuration.
func TestChartOffloadCertManager(t *testing.T) {
	out := helm(t, "template", "probed", chartDir, "--namespace", "probed-system", "--set", "offload.enabled=true", "--set", "offload.certManager.enabled=true")
	var builtin []byte
	var issuer, cert map[string]any
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil || m == nil {
			continue
		}
		switch m["kind"] {
		case "Issuer":
			issuer = m
		case "Certificate":
			cert = m
		default:
			builtin = append(append(builtin, doc...), []byte("\n---\n")...)
		}
	}
	if issuer == nil || cert == nil {
		t.Fatalf("no Issuer (%v) or Certificate (%v)", issuer, cert)
	}
	spec, _ := cert["spec"].(map[string]any)
	if spec["secretName"] != "probed-webhook-cert" || !reflect.DeepEqual(spec["dnsNames"], []any{"probed-webhook.probed-system.svc", "probed-webhook.probed-system.svc.cluster.local"}) {
		t.Errorf("certificate %v", spec)
	}
	objects, err := deploy.Decode("helm template", builtin)
	if err != nil {
		t.Fatal(err)
	}
	d, cfg := webhookObjects(t, objects)
	args := argsOf(d.Spec.Template.Spec.Containers[0])
	if args["--tls-cert-file"] != "/tls/tls.crt" || args["--tls-secret"] != "" || args["--webhook-configuration"] != "" {
		t.Errorf("args %v", args)
	}
	if cfg.Annotations["cert-manager.io/inject-ca-from"] != "probed-system/probed-webhook" {
		t.Errorf("configuration annotations %v", cfg.Annotations)
	}
	for _, o := range objects {
		if r, ok := o.(*rbacv1.Role); ok {
			t.Errorf("a Role with cert-manager: %+v", r)
		}
		if r, ok := o.(*rbacv1.ClusterRole); ok && r.Name == "probed-webhook" && len(r.Rules) != 1 {
			t.Errorf("webhook rules with cert-manager: %+v", r.Rules)
		}
	}
	issued := helm(t, "template", "probed", chartDir, "--namespace", "probed-system", "--set", "offload.enabled=true", "--set", "offload.certManager.enabled=true",
		"--set", "offload.certManager.issuerRef.name=corp-ca", "--set", "offload.certManager.issuerRef.kind=ClusterIssuer")
	if bytes.Contains(issued, []byte("kind: Issuer\n")) || !bytes.Contains(issued, []byte("kind: ClusterIssuer")) {
		t.Errorf("with an issuerRef the chart renders its own Issuer or not the given one:\n%s", issued)
	}
}

// TestChartOffloadRoleRunsTheWebhook (a real API server): as the
// webhook's ServiceAccount bound to the chart's rendered ClusterRole and
// Role, `probed webhook` provisions its Secret, publishes its CA into its
// configuration and reads the namespaces (it turns ready), and a pod of a
// labelled namespace is moved; the same identity may not read another
// Secret nor update another webhook configuration.
func TestChartOffloadRoleRunsTheWebhook(t *testing.T) {
	admin := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	release := "o" + ns[len(ns)-8:] // cluster-scoped names of its own
	objects := render(t, release, ns, "--set", "offload.enabled=true")
	saName := release + "-probed-webhook"
	cfgName := release + "-probed-offload"
	ctx := kubetest.Context(t)
	for _, o := range objects {
		var err error
		switch r := o.(type) {
		case *v1.ServiceAccount:
			if r.Name == saName {
				_, err = admin.CoreV1().ServiceAccounts(ns).Create(ctx, r, metav1.CreateOptions{})
			}
		case *rbacv1.ClusterRole:
			if r.Name == saName {
				_, err = admin.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{})
				deleteAtEnd(t, func(c context.Context) error {
					return admin.RbacV1().ClusterRoles().Delete(c, r.Name, metav1.DeleteOptions{})
				})
			}
		case *rbacv1.ClusterRoleBinding:
			if r.Name == saName {
				_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, r, metav1.CreateOptions{})
				deleteAtEnd(t, func(c context.Context) error {
					return admin.RbacV1().ClusterRoleBindings().Delete(c, r.Name, metav1.DeleteOptions{})
				})
			}
		case *rbacv1.Role:
			_, err = admin.RbacV1().Roles(ns).Create(ctx, r, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, r, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("create %s %s: %v", kindOf(o), name(o), err)
		}
	}
	shop := kubetest.Namespace(t)
	kubetest.LabelNamespace(t, shop, map[string]string{offload.NamespaceLabel: "enabled"})
	_, cfg := webhookObjects(t, objects)

	sa := kubetest.ServiceAccountConfig(t, ns, saName)
	c := kubetest.ClientFor(t, sa)
	kubetest.Eventually(t, "the webhook's role in force", func() bool {
		_, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil
	})
	keeper, err := servingcert.New(servingcert.Options{Client: c, Namespace: ns, Secret: saName + "-tls",
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, WebhookConfiguration: cfgName})
	if err != nil {
		t.Fatal(err)
	}
	addr := make(chan net.Addr, 1)
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		if err := webhook.Run(runCtx, webhook.Options{Client: c, OwnNamespace: ns, Listen: "127.0.0.1:0", Certificates: keeper,
			Offload: offload.Config{Policy: podprobes.Cluster(customprobe.Options{}, ""), ReadinessGate: "probed.io/ready"},
			Ready:   func(a net.Addr) { addr <- a }}); err != nil {
			t.Errorf("webhook.Run: %v", err)
		}
	})
	url := "https://" + (<-addr).String() + webhook.PathMutate
	// The chart's configuration, pointed at the webhook on loopback and at
	// the test's namespace only (the server is shared).
	cfg.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
	cfg.Webhooks[0].NamespaceSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{shop}}}
	kubetest.CreateMutatingWebhookConfiguration(t, cfg)
	kubetest.Eventually(t, "the webhook ready with its CA published", func() bool {
		got, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, cfgName, metav1.GetOptions{})
		return keeper.Ready() && err == nil && len(got.Webhooks[0].ClientConfig.CABundle) > 0
	})
	pod := kubetest.NewPod(shop, "web", kubetest.NodeName(t), "app")
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}
	if got := kubetest.CreatePod(t, admin, pod); got.Spec.Containers[0].ReadinessProbe != nil || !offload.Offloaded(got) {
		t.Fatalf("the pod was not moved: %+v", got.Spec.Containers[0])
	}

	if _, err := c.CoreV1().Secrets(ns).Get(ctx, "other", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("get another Secret: %v, want forbidden", err)
	}
	other := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "other-" + release}}
	kubetest.CreateMutatingWebhookConfiguration(t, other)
	got, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, other.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("update another configuration: %v, want forbidden", err)
	}
}

func deleteAtEnd(t *testing.T, del func(context.Context) error) {
	t.Cleanup(func() {
		if err := del(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}
