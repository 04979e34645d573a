package deploy

import (
	"os"
	"reflect"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/probed/probed/deploy"
)

// The plain install's switch to the container runtime: a JSON patch of the
// DaemonSet (kubectl patch --type json --patch-file).
const criPatch = "../../deploy/kubernetes/patches/daemonset-cri.json"

// TestChartCRIRendersThePlainPatch (issue 19): with cri.enabled the chart
// renders the plain DaemonSet with patches/daemonset-cri.json applied, and
// that is the least privilege that opens the socket: the socket file alone,
// read-only (a hostPath of type Socket), the flag naming it, the socket's
// group as a supplemental group of the still non-root agent, no capability.
// Without cri.enabled nothing of it is rendered (the default, held by
// TestChartDefaultsRenderThePlainManifests).
func TestChartCRIRendersThePlainPatch(t *testing.T) {
	data, err := os.ReadFile(criPatch)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(data)
	if err != nil {
		t.Fatalf("%s: %v", criPatch, err)
	}
	raw, err := deploy.Kubernetes.(interface{ ReadFile(string) ([]byte, error) }).ReadFile("daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := patch.Apply(doc)
	if err != nil {
		t.Fatalf("%s does not apply to daemonset.yaml: %v", criPatch, err)
	}
	objects, err := deploy.Decode("daemonset.yaml + "+criPatch, patched)
	if err != nil {
		t.Fatal(err)
	}
	want := only[*appsv1.DaemonSet](t, objects)
	got := only[*appsv1.DaemonSet](t, render(t, "probed", "probed-system", "--set", "cri.enabled=true"))
	if d := diffIgnoringLabels(got, want); d != "" {
		t.Fatalf("chart with cri.enabled and the patched plain DaemonSet differ:\n%s", d)
	}

	spec := got.Spec.Template.Spec
	c := spec.Containers[0]
	if !slicesContain(c.Args, "--container-runtime-endpoint=unix:///run/containerd/containerd.sock") {
		t.Errorf("args %q", c.Args)
	}
	sc := spec.SecurityContext
	if *sc.RunAsUser != 65532 || !*sc.RunAsNonRoot || !reflect.DeepEqual(sc.SupplementalGroups, []int64{0}) {
		t.Errorf("pod security context %+v: want non-root 65532 with group 0 supplemental", sc)
	}
	if len(c.SecurityContext.Capabilities.Add) != 0 || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("container security context %+v", c.SecurityContext)
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "cri-socket" && m.MountPath == "/run/containerd/containerd.sock" && m.ReadOnly)
	}
	var volume bool
	for _, v := range spec.Volumes {
		volume = volume || (v.Name == "cri-socket" && v.HostPath != nil && v.HostPath.Path == "/run/containerd/containerd.sock" &&
			*v.HostPath.Type == "Socket")
	}
	if !mounted || !volume {
		t.Errorf("socket mount %v, volume %v: want the socket alone, read-only", mounted, volume)
	}

	other := only[*appsv1.DaemonSet](t, render(t, "probed", "probed-system", "--set", "cri.enabled=true",
		"--set", "cri.socket=/var/run/crio/crio.sock", "--set", "cri.socketGroup=992"))
	if args := strings.Join(other.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--container-runtime-endpoint=unix:///var/run/crio/crio.sock") ||
		!reflect.DeepEqual(other.Spec.Template.Spec.SecurityContext.SupplementalGroups, []int64{992}) {
		t.Errorf("cri.socket/socketGroup not applied: %s, %v", args, other.Spec.Template.Spec.SecurityContext.SupplementalGroups)
	}
}

// TestChartRestartRBACFollowsTheLivenessAction: namespaces get (the label
// that allows restarts) is rendered exactly with livenessAction restart,
// equal to deploy/kubernetes/clusterrole-restart.yaml.
func TestChartRestartRBACFollowsTheLivenessAction(t *testing.T) {
	ns := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}}
	if off := rules(render(t, "probed", "probed-system", "--set", "cri.enabled=true")); hasRule(off, ns) {
		t.Errorf("livenessAction=event renders the restart rule: %+v", off)
	}
	on := rules(render(t, "probed", "probed-system", "--set", "cri.enabled=true", "--set", "livenessAction=restart"))
	if want := rules(plain(t, "clusterrole.yaml", deploy.RestartFile)); !reflect.DeepEqual(on, want) {
		t.Errorf("chart rules %+v, deploy/kubernetes %+v", on, want)
	}
}

func slicesContain(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestChartCRIExecMode (issue 21): cri.execMode resident passes
// --exec-mode=resident with the runtime; the default (execsync) passes
// nothing, as the plain DaemonSet; any other value is refused by the
// chart's schema.
func TestChartCRIExecMode(t *testing.T) {
	args := func(sets ...string) string {
		ds := only[*appsv1.DaemonSet](t, render(t, "probed", "probed-system", append([]string{"--set", "cri.enabled=true"}, sets...)...))
		return strings.Join(ds.Spec.Template.Spec.Containers[0].Args, " ")
	}
	if a := args(); strings.Contains(a, "--exec-mode") {
		t.Errorf("default: %s", a)
	}
	if a := args("--set", "cri.execMode=resident"); !strings.Contains(a, "--container-runtime-endpoint=unix:///run/containerd/containerd.sock --exec-mode=resident") {
		t.Errorf("cri.execMode=resident: %s", a)
	}
	if _, err := helmRun(t, "template", "x", chartDir, "--set", "cri.enabled=true", "--set", "cri.execMode=fast"); err == nil || !strings.Contains(err.Error(), "execMode") {
		t.Errorf("cri.execMode=fast: %v, want the schema's refusal", err)
	}
}
