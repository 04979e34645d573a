package deploy

import (
	"encoding/json"
	"io/fs"
	"reflect"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	"github.com/probed/probed/deploy"
)

// TestChartCRIRendersThePlainPatch: with cri.enabled the chart renders the
// plain DaemonSet patched as the operator patches it (options/daemonset-cri.yaml,
// a strategic-merge patch: `kubectl patch --patch-file`, which merges by name
// and mount path, nothing positional), and that is the least privilege that
// opens the socket: the socket file alone, read-only (a hostPath of type
// Socket), the endpoint naming its one path in the container, the socket's
// group as a supplemental group of the still non-root agent, no capability.
// The node's socket is named once (cri.socket: the volume). Without
// cri.enabled nothing of it is rendered (the default, held by
// TestChartDefaultsRenderThePlainManifests).
func TestChartCRIRendersThePlainPatch(t *testing.T) {
	want := patchedDaemonSet(t, deploy.CRIPatchFile)
	got := only[*appsv1.DaemonSet](t, render(t, "probed", "probed-system", "--set", "cri.enabled=true"))
	if d := diffIgnoringLabels(inNameOrder(got), inNameOrder(want)); d != "" {
		t.Fatalf("chart with cri.enabled and the patched plain DaemonSet differ:\n%s", d)
	}

	spec := got.Spec.Template.Spec
	c := spec.Containers[0]
	if env := envOf(c); env[envCRI] != "unix:///run/cri/cri.sock" {
		t.Errorf("env %v: want %s naming the mounted socket", env, envCRI)
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
		mounted = mounted || (m.Name == "cri-socket" && m.MountPath == "/run/cri/cri.sock" && m.ReadOnly)
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
	ospec := other.Spec.Template.Spec
	if ospec.Volumes[len(ospec.Volumes)-1].HostPath.Path != "/var/run/crio/crio.sock" ||
		!reflect.DeepEqual(ospec.SecurityContext.SupplementalGroups, []int64{992}) || envOf(ospec.Containers[0])[envCRI] != "unix:///run/cri/cri.sock" {
		t.Errorf("cri.socket/socketGroup not applied: %+v, %v", ospec.Volumes, ospec.SecurityContext.SupplementalGroups)
	}
}

// The variables that switch the plain DaemonSet's options (cmd/probed's
// flag defaults).
const (
	envCRI            = "PROBED_CONTAINER_RUNTIME_ENDPOINT"
	envExecMode       = "PROBED_EXEC_MODE"
	envLivenessAction = "PROBED_LIVENESS_ACTION"
)

// patchedDaemonSet is deploy/kubernetes' DaemonSet with the strategic-merge
// patch of deploy/kubernetes/FILE applied, as `kubectl patch --patch-file`
// applies it, and then each env variable of set (name=value) set as `kubectl
// set env` sets it.
func patchedDaemonSet(t *testing.T, file string, set ...string) *appsv1.DaemonSet {
	t.Helper()
	ds := only[*appsv1.DaemonSet](t, plain(t, deploy.DaemonSetFile))
	if file != "" {
		raw, err := fs.ReadFile(deploy.Kubernetes, file)
		if err != nil {
			t.Fatal(err)
		}
		patch, err := yaml.YAMLToJSON(raw)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		doc, err := json.Marshal(ds)
		if err != nil {
			t.Fatal(err)
		}
		patched, err := strategicpatch.StrategicMergePatch(doc, patch, appsv1.DaemonSet{})
		if err != nil {
			t.Fatalf("%s does not apply to %s: %v", file, deploy.DaemonSetFile, err)
		}
		ds = &appsv1.DaemonSet{}
		if err := json.Unmarshal(patched, ds); err != nil {
			t.Fatal(err)
		}
	}
	c := &ds.Spec.Template.Spec.Containers[0]
	for _, kv := range set {
		k, v, _ := strings.Cut(kv, "=")
		c.Env = append(c.Env, v1.EnvVar{Name: k, Value: v})
	}
	return ds
}

// inNameOrder sorts the DaemonSet's env, volumes and mounts by name (mount
// path): a strategic-merge patch puts the items it adds first, `kubectl set
// env` last, the chart where its template has them; their order means
// nothing here (no variable refers to another).
// Both sides go through JSON, as the patched side did (a quantity decoded
// from YAML and one from JSON differ inside while equal).
func inNameOrder(in *appsv1.DaemonSet) *appsv1.DaemonSet {
	b, err := json.Marshal(in)
	if err != nil {
		panic(err)
	}
	ds := &appsv1.DaemonSet{}
	if err := json.Unmarshal(b, ds); err != nil {
		panic(err)
	}
	spec := &ds.Spec.Template.Spec
	sort.Slice(spec.Volumes, func(i, j int) bool { return spec.Volumes[i].Name < spec.Volumes[j].Name })
	for i := range spec.Containers {
		c := &spec.Containers[i]
		sort.Slice(c.Env, func(i, j int) bool { return c.Env[i].Name < c.Env[j].Name })
		sort.Slice(c.VolumeMounts, func(i, j int) bool { return c.VolumeMounts[i].MountPath < c.VolumeMounts[j].MountPath })
	}
	return ds
}

// envOf is a container's literal env values by name.
func envOf(c v1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// TestChartRestartRBACFollowsTheLivenessAction: namespaces get (the label
// that allows restarts) is rendered exactly with livenessAction restart,
// equal to deploy/kubernetes/options/clusterrole-restart.yaml.
func TestChartRestartRBACFollowsTheLivenessAction(t *testing.T) {
	ns := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}}
	if off := rules(render(t, "probed", "probed-system", "--set", "cri.enabled=true")); hasRule(off, ns) {
		t.Errorf("livenessAction=event renders the restart rule: %+v", off)
	}
	on := rules(render(t, "probed", "probed-system", "--set", "cri.enabled=true", "--set", "livenessAction=restart"))
	if want := rules(plain(t, "02-clusterrole.yaml", deploy.RestartFile)); !reflect.DeepEqual(on, want) {
		t.Errorf("chart rules %+v, deploy/kubernetes %+v", on, want)
	}
}

// TestChartCRIExecMode: cri.execMode resident sets PROBED_EXEC_MODE=resident
// with the runtime, as `kubectl set env` does on the plain DaemonSet; the
// default (execsync) sets nothing, as the plain DaemonSet; any other value is
// refused by the chart's schema.
func TestChartCRIExecMode(t *testing.T) {
	ds := func(sets ...string) *appsv1.DaemonSet {
		return only[*appsv1.DaemonSet](t, render(t, "probed", "probed-system", append([]string{"--set", "cri.enabled=true"}, sets...)...))
	}
	if env := envOf(ds().Spec.Template.Spec.Containers[0]); env[envExecMode] != "" {
		t.Errorf("default: %v", env)
	}
	got := ds("--set", "cri.execMode=resident")
	want := patchedDaemonSet(t, deploy.CRIPatchFile, envExecMode+"=resident")
	if d := diffIgnoringLabels(inNameOrder(got), inNameOrder(want)); d != "" {
		t.Errorf("cri.execMode=resident and the plain DaemonSet with %s=resident differ:\n%s", envExecMode, d)
	}
	if _, err := helmRun(t, "template", "x", chartDir, "--set", "cri.enabled=true", "--set", "cri.execMode=fast"); err == nil || !strings.Contains(err.Error(), "execMode") {
		t.Errorf("cri.execMode=fast: %v, want the schema's refusal", err)
	}
}
