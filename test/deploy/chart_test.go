package deploy

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// nonDefault exercises every value that changes the rendered objects.
const nonDefault = `
livenessAction: evict
livenessActionNamespaces: example.com/evictable=yes
readinessGate: example.com/probed
statusQPS: 20
statusBurst: 40
allowProbeHost: ["10.0.0.0/8", "fd00::/64"]
listen:
  address: $(HOST_IP)
  port: 9089
priorityClassName: ""
createNamespace: true
plugins:
  image: registry.example.com/probed-plugins:1
  config:
    plugins:
    - name: http-match
      maxInFlight: 32
otel:
  tracesExporter: otlp
  endpoint: otel-collector.monitoring:4317
  protocol: grpc
  resourceAttributes: k8s.cluster.name=prod
extraArgs: ["--history=20"]
probing:
  schedulerCoalesce: 5ms
  httpKeepAlive: true
apiServer:
  host: 10.0.0.10
  port: 6443
podAnnotations:
  example.com/team: platform
`

func valuesFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestChartLints: helm lint (strict: warnings fail) with the defaults and with
// non-default values.
func TestChartLints(t *testing.T) {
	helm(t, "lint", "--strict", chartDir)
	helm(t, "lint", "--strict", chartDir, "-f", valuesFile(t, nonDefault))
}

// TestChartDefaultsRenderThePlainManifests: with release name probed in
// namespace probed-system, the chart renders deploy/kubernetes object for
// object (labels aside): the plain manifests and the chart are one install,
// so the RBAC rules and the agent's pod spec cannot drift apart.
func TestChartDefaultsRenderThePlainManifests(t *testing.T) {
	for _, tc := range []struct {
		name, files string
		set         []string
	}{
		{"event", "00-namespace.yaml 01-serviceaccount.yaml 02-clusterrole.yaml 03-clusterrolebinding.yaml 04-admissionpolicy.yaml 05-daemonset.yaml",
			[]string{"--set", "createNamespace=true"}},
		{"evict", "00-namespace.yaml 01-serviceaccount.yaml 02-clusterrole.yaml 03-clusterrolebinding.yaml 04-admissionpolicy.yaml options/clusterrole-eviction.yaml 05-daemonset.yaml",
			[]string{"--set", "createNamespace=true", "--set", "livenessAction=evict"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := plain(t, strings.Fields(tc.files)...)
			got := render(t, "probed", "probed-system", tc.set...)
			if tc.name == "evict" {
				// The plain install switches the action by kubectl set env.
				ds := only[*appsv1.DaemonSet](t, want)
				*ds = *patchedDaemonSet(t, "", envLivenessAction+"=evict")
			}
			if len(got) != len(want) {
				t.Errorf("chart renders %d objects, deploy/kubernetes has %d", len(got), len(want))
			}
			for _, w := range want {
				g := find(got, w)
				if g == nil {
					t.Errorf("chart renders no %s %s", kindOf(w), name(w))
					continue
				}
				if d := diffIgnoringLabels(g, w); d != "" {
					t.Errorf("%s %s: chart and deploy/kubernetes differ:\n%s", kindOf(w), name(w), d)
				}
			}
		})
	}
}

// TestChartEvictionRBACFollowsTheLivenessAction: the pods/eviction rule is
// rendered exactly when livenessAction is evict, and the chart's rules equal
// the plain manifests' (base role; base and eviction role).
func TestChartEvictionRBACFollowsTheLivenessAction(t *testing.T) {
	eviction := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}}
	off := rules(render(t, "probed", "probed-system"))
	if hasRule(off, eviction) {
		t.Errorf("livenessAction=event renders the eviction rule: %+v", off)
	}
	if want := rules(plain(t, "02-clusterrole.yaml")); !reflect.DeepEqual(off, want) {
		t.Errorf("chart rules %+v, deploy/kubernetes/02-clusterrole.yaml %+v", off, want)
	}
	on := rules(render(t, "probed", "probed-system", "-f", valuesFile(t, nonDefault)))
	if !hasRule(on, eviction) {
		t.Errorf("livenessAction=evict renders no eviction rule: %+v", on)
	}
	if want := rules(plain(t, "02-clusterrole.yaml", "options/clusterrole-eviction.yaml")); !reflect.DeepEqual(on, want) {
		t.Errorf("chart rules %+v, deploy/kubernetes %+v", on, want)
	}
}

func hasRule(rules []rbacv1.PolicyRule, want rbacv1.PolicyRule) bool {
	for _, r := range rules {
		if reflect.DeepEqual(r, want) {
			return true
		}
	}
	return false
}

// TestChartNonDefaultValues: every value reaches the object it configures.
func TestChartNonDefaultValues(t *testing.T) {
	objects := render(t, "edge", "probed-edge", "-f", valuesFile(t, nonDefault))
	ds := only[*appsv1.DaemonSet](t, objects)
	checkDaemonSet(t, ds, agentWant{gate: "example.com/probed", action: "evict", listen: "$(HOST_IP):9089", plugins: true})
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, a := range []string{"--status-qps=20", "--status-burst=40", "--allow-probe-host=10.0.0.0/8,fd00::/64", "--plugin-config=/etc/probed/plugins.yaml", "--history=20",
		"--liveness-action-namespaces=example.com/evictable=yes", "--scheduler-coalesce=5ms", "--http-keep-alive"} {
		if !strings.Contains(args, a) {
			t.Errorf("args %q lack %q", args, a)
		}
	}
	if c.LivenessProbe.HTTPGet.Host != "" {
		t.Errorf("probe host %q with listen on the node IP, want empty (the pod IP: the node's)", c.LivenessProbe.HTTPGet.Host)
	}
	if len(spec.InitContainers) != 1 || spec.InitContainers[0].Image != "registry.example.com/probed-plugins:1" {
		t.Errorf("init containers %+v, want one copying the plugins image", spec.InitContainers)
	} else if cmd := strings.Join(spec.InitContainers[0].Command, " "); !strings.Contains(cmd, "mkdir -m 0755 /plugins/bin") {
		t.Errorf("init container %q does not copy into a directory of its own (the emptyDir is world-writable)", cmd)
	}
	for _, m := range c.VolumeMounts {
		if m.Name == "plugins" && (m.MountPath != "/plugins" || m.SubPath != "bin" || !m.ReadOnly) {
			t.Errorf("plugins mount %+v, want /plugins from subPath bin, read-only", m)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] != "10.0.0.10" || env["KUBERNETES_SERVICE_PORT"] != "6443" {
		t.Errorf("apiServer: env %v, want KUBERNETES_SERVICE_HOST 10.0.0.10 and _PORT 6443", env)
	}
	if env["OTEL_TRACES_EXPORTER"] != "otlp" || env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "otel-collector.monitoring:4317" ||
		env["OTEL_EXPORTER_OTLP_PROTOCOL"] != "grpc" || !strings.HasSuffix(env["OTEL_RESOURCE_ATTRIBUTES"], ",k8s.cluster.name=prod") {
		t.Errorf("OTEL env %v", env)
	}
	if ds.Spec.Template.Annotations["example.com/team"] != "platform" || ds.Spec.Template.Annotations["checksum/plugin-config"] == "" {
		t.Errorf("pod annotations %v, want the given one and the plugin config's checksum", ds.Spec.Template.Annotations)
	}
	cm := only[*v1.ConfigMap](t, objects)
	if !strings.Contains(cm.Data["plugins.yaml"], "name: http-match") {
		t.Errorf("plugin config %q", cm.Data["plugins.yaml"])
	}
	ns := only[*v1.Namespace](t, objects)
	if ns.Name != "probed-edge" || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %s labels %v", ns.Name, ns.Labels)
	}
	checkPolicy(t, objects, policyWant{name: "edge-probed-agent", username: "system:serviceaccount:probed-edge:edge-probed",
		gate: "example.com/probed", evictionLabel: "example.com/evictable", evictionValue: "yes"})
}

// TestChartSchemaRejectsBadValues: values.schema.json refuses a liveness
// action probed does not have, restart without the container runtime and a
// port out of range, naming the value.
func TestChartSchemaRejectsBadValues(t *testing.T) {
	for set, names := range map[string]string{
		"livenessAction=kill":                 "livenessAction",
		"livenessAction=restart":              "cri/enabled",
		"listen.port=70000":                   "listen",
		"readinessGate=not a condition":       "readinessGate",
		"livenessActionNamespaces=no-value":   "livenessActionNamespaces",
		"livenessActionNamespaces=a=b'||true": "livenessActionNamespaces",
		"allowProbeHost={10.0.0.1}":           "allowProbeHost",
		"serviceAccount.name=a'||true||'":     "serviceAccount",
		"serviceAccount.name=Probed":          "serviceAccount",
		"apiServer.host=a b":                  "apiServer",
		"probing.schedulerCoalesce=soon":      "probing",
	} {
		_, err := helmRun(t, "template", "x", chartDir, "--set", set)
		if err == nil || !strings.Contains(err.Error(), names) {
			t.Errorf("--set %s: %v, want a schema error naming %s", set, err, names)
		}
	}
}

func name(o runtime.Object) string {
	m, _ := o.(metav1.Object)
	return m.GetNamespace() + "/" + m.GetName()
}

func find(objects []runtime.Object, like runtime.Object) runtime.Object {
	for _, o := range objects {
		if kindOf(o) == kindOf(like) && name(o) == name(like) {
			return o
		}
	}
	return nil
}

// diffIgnoringLabels compares two objects after removing the labels Helm adds
// (every label but the pod-security ones; the pod template's selector labels
// are compared through the selector) and the release's OTEL resource
// attribute spelling; it returns both as YAML-ish text when they differ.
func diffIgnoringLabels(got, want runtime.Object) string {
	g, w := got.DeepCopyObject(), want.DeepCopyObject()
	for _, o := range []runtime.Object{g, w} {
		m := o.(metav1.Object)
		m.SetLabels(keepPodSecurity(m.GetLabels()))
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			ds.Spec.Selector = nil
			ds.Spec.Template.Labels = nil
		}
	}
	if reflect.DeepEqual(g, w) {
		return ""
	}
	return "chart:           " + dump(g) + "\ndeploy/kubernetes: " + dump(w)
}

func keepPodSecurity(labels map[string]string) map[string]string {
	kept := map[string]string{}
	for k, v := range labels {
		if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
			kept[k] = v
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return kept
}
