package deploy

import (
	"io/fs"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/probed/probed/deploy"
)

// TestManifestsDecodeStrictly: every file of deploy/kubernetes decodes
// strictly into the typed objects the install needs, and a misspelled field
// would be caught (the decoder is strict, not lenient). The directory's root
// is exactly the default install, deploy.Base, in the order `kubectl apply -f
// deploy/kubernetes/` applies files (by name): the namespace before
// everything in it, the admission policy before the agent it limits, and no
// opt-in role (a plain apply grants the rights of --liveness-action=event
// alone); the opt-in roles are in options/.
func TestManifestsDecodeStrictly(t *testing.T) {
	root, err := fs.ReadDir(deploy.Kubernetes, ".")
	if err != nil {
		t.Fatal(err)
	}
	var applied []string
	for _, e := range root {
		if !e.IsDir() {
			applied = append(applied, e.Name())
		}
	}
	sort.Strings(applied) // kubectl's order
	if !slices.Equal(applied, deploy.Base) {
		t.Errorf("kubectl apply -f deploy/kubernetes/ applies %v, want deploy.Base %v", applied, deploy.Base)
	}
	var kinds []string
	for _, f := range append(applied, deploy.EvictionFile, deploy.RestartFile) {
		objects, err := deploy.File(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objects {
			kinds = append(kinds, f+":"+kindOf(obj))
		}
	}
	want := []string{
		"00-namespace.yaml:Namespace", "01-serviceaccount.yaml:ServiceAccount", "02-clusterrole.yaml:ClusterRole",
		"03-clusterrolebinding.yaml:ClusterRoleBinding",
		"04-admissionpolicy.yaml:ValidatingAdmissionPolicy", "04-admissionpolicy.yaml:ValidatingAdmissionPolicyBinding",
		"05-daemonset.yaml:DaemonSet",
		"options/clusterrole-eviction.yaml:ClusterRole", "options/clusterrole-eviction.yaml:ClusterRoleBinding",
		"options/clusterrole-restart.yaml:ClusterRole", "options/clusterrole-restart.yaml:ClusterRoleBinding",
	}
	if !slices.Equal(kinds, want) {
		t.Errorf("deploy/kubernetes holds %v, want %v", kinds, want)
	}
	options, err := fs.ReadDir(deploy.Kubernetes, "options")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range options {
		names = append(names, "options/"+e.Name())
	}
	if want := []string{deploy.EvictionFile, deploy.RestartFile, deploy.CRIPatchFile}; !slices.Equal(names, want) {
		t.Errorf("deploy/kubernetes/options holds %v, want %v", names, want)
	}
	// The DaemonSet, where kubectl applies it, comes after the namespace and the policy.
	if i, j := slices.Index(applied, deploy.DaemonSetFile), slices.Index(applied, deploy.PolicyFile); i < j || slices.Index(applied, deploy.NamespaceFile) != 0 {
		t.Errorf("apply order %v: the namespace first, the policy before the DaemonSet", applied)
	}

	data, _ := fs.ReadFile(deploy.Kubernetes, "05-daemonset.yaml")
	bad := strings.Replace(string(data), "hostNetwork:", "hostNetwrk:", 1)
	if _, err := deploy.Decode("05-daemonset.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "hostNetwrk") {
		t.Errorf("misspelled hostNetwork decoded with error %v, want an unknown-field error naming it", err)
	}
}

func kindOf(obj runtime.Object) string {
	return reflect.TypeOf(obj).Elem().Name()
}

// TestManifestsDaemonSetIsANodeAgent holds the DaemonSet of deploy/kubernetes
// to the node agent's shape (see checkDaemonSet).
func TestManifestsDaemonSetIsANodeAgent(t *testing.T) {
	checkDaemonSet(t, only[*appsv1.DaemonSet](t, plain(t, "05-daemonset.yaml")), agentWant{
		gate: "probed.io/ready", action: "event", listen: "127.0.0.1:8089", priorityClass: "system-node-critical",
	})
}

type agentWant struct {
	gate, action, listen, priorityClass string
	plugins                             bool
}

// checkDaemonSet: hostNetwork (probes leave from the node as the kubelet's
// do) with ClusterFirstWithHostNet, NODE_NAME from the downward API, the
// cluster-mode arguments, non-root, read-only root filesystem, no privilege
// escalation, no capabilities, every taint tolerated, linux nodes, the
// priority class, requests and a memory limit, probed's own probes on
// /healthz of its port, plugins (when any: want.plugins) from a read-only
// volume, a writable /tmp. The liveness action is PROBED_LIVENESS_ACTION's
// (unset: event), the flag's default.
func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet, want agentWant) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.DNSPolicy != v1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v dnsPolicy %q, want true ClusterFirstWithHostNet", spec.HostNetwork, spec.DNSPolicy)
	}
	if spec.PriorityClassName != want.priorityClass {
		t.Errorf("priorityClassName %q, want %q", spec.PriorityClassName, want.priorityClass)
	}
	if spec.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("nodeSelector %v, want kubernetes.io/os: linux", spec.NodeSelector)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != v1.TolerationOpExists || spec.Tolerations[0].Key != "" {
		t.Errorf("tolerations %+v, want one {operator: Exists}", spec.Tolerations)
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("pod securityContext %+v, want runAsNonRoot, runAsUser 65532", psc)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("containers %d, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	args := strings.Join(c.Args, " ")
	for _, a := range []string{"run", "--in-cluster", "--readiness-gate=" + want.gate,
		"--listen=" + want.listen, "--status-qps=", "--status-burst="} {
		if !strings.Contains(args, a) {
			t.Errorf("args %q lack %q", args, a)
		}
	}
	if strings.Contains(args, "--liveness-action=") || strings.Contains(args, "--exec-mode=") || strings.Contains(args, "--container-runtime-endpoint=") {
		t.Errorf("args %q: the options are the env's (a flag would win over kubectl set env)", args)
	}
	if got := envOf(c)[envLivenessAction]; got != want.action && (got != "" || want.action != "event") {
		t.Errorf("%s=%q, want %q", envLivenessAction, got, want.action)
	}
	if strings.Contains(args, "--plugin-dir=/plugins") != want.plugins {
		t.Errorf("args %q: --plugin-dir=/plugins %v, want %v", args, !want.plugins, want.plugins)
	}
	env := map[string]v1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME %+v, want fieldRef spec.nodeName", e)
	}
	if _, ok := env["OTEL_TRACES_EXPORTER"]; !ok {
		t.Errorf("no OTEL_TRACES_EXPORTER in %v", c.Env)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []v1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v, want readOnlyRootFilesystem, no privilege escalation, drop ALL", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v, want cpu and memory requests and a memory limit", c.Resources)
	}
	port := c.Ports[0].ContainerPort
	if !strings.HasSuffix(want.listen, ":"+strconv.Itoa(int(port))) {
		t.Errorf("container port %d is not the --listen port of %s", port, want.listen)
	}
	for name, p := range map[string]*v1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.IntValue() != int(port) {
			t.Errorf("%s probe %+v, want httpGet /healthz on port %d", name, p, port)
			continue
		}
		if strings.HasPrefix(want.listen, "127.0.0.1:") && p.HTTPGet.Host != "127.0.0.1" {
			t.Errorf("%s probe host %q: probed listens on the node's loopback, the kubelet must probe 127.0.0.1", name, p.HTTPGet.Host)
		}
	}
	mounts := map[string]v1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	volumes := map[string]v1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	if m, ok := mounts["/plugins"]; ok != want.plugins || (ok && !m.ReadOnly) {
		t.Errorf("/plugins mount %+v (want one: %v, read-only)", c.VolumeMounts, want.plugins)
	} else if v := volumes[m.Name]; ok && v.EmptyDir == nil && (v.HostPath == nil || *v.HostPath.Type != v1.HostPathDirectory) {
		t.Errorf("plugins volume %+v, want an emptyDir or a hostPath that must exist (nothing created on the node)", v)
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && v.HostPath.Type != nil && (*v.HostPath.Type == v1.HostPathDirectoryOrCreate || *v.HostPath.Type == v1.HostPathFileOrCreate) {
			t.Errorf("volume %s creates %s on the node: left behind by an uninstall", v.Name, v.HostPath.Path)
		}
	}
	if m, ok := mounts["/tmp"]; !ok || volumes[m.Name].EmptyDir == nil {
		t.Errorf("no emptyDir on /tmp (go-plugin's sockets; the root filesystem is read-only)")
	}
}

// only returns the one object of type T among objects.
func only[T runtime.Object](t *testing.T, objects []runtime.Object) T {
	t.Helper()
	var found []T
	for _, o := range objects {
		if x, ok := o.(T); ok {
			found = append(found, x)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}

// rules returns the rules of every ClusterRole among objects, sorted (helm
// renders the templates in file-name order, not the install's).
func rules(objects []runtime.Object) []rbacv1.PolicyRule {
	var r []rbacv1.PolicyRule
	for _, o := range objects {
		if role, ok := o.(*rbacv1.ClusterRole); ok {
			r = append(r, role.Rules...)
		}
	}
	sort.Slice(r, func(i, j int) bool { return r[i].String() < r[j].String() })
	return r
}

// TestManifestsPolicyBindsTheAgent holds deploy/kubernetes/04-admissionpolicy.yaml
// to the admission policy (see checkPolicy), for the ServiceAccount of
// 01-serviceaccount.yaml and the DaemonSet's --readiness-gate.
func TestManifestsPolicyBindsTheAgent(t *testing.T) {
	sa := only[*v1.ServiceAccount](t, plain(t, "01-serviceaccount.yaml"))
	gate := ""
	for _, a := range only[*appsv1.DaemonSet](t, plain(t, "05-daemonset.yaml")).Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--readiness-gate="); ok {
			gate = v
		}
	}
	checkPolicy(t, plain(t, deploy.PolicyFile), policyWant{
		name: "probed-agent", username: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name,
		gate: gate, evictionLabel: "probed.io/liveness-actions", evictionValue: "enabled",
	})
}

type policyWant struct {
	name, username, gate, evictionLabel, evictionValue string
}

// checkPolicy: one ValidatingAdmissionPolicy and one binding of it, named
// want.name; the policy fails closed (failurePolicy Fail), matches only the
// agent's user (its one match condition compares request.userInfo.username
// with want.username), and its variables name the readiness gate and the
// eviction label as CEL string literals; the binding denies (Deny only).
func checkPolicy(t *testing.T, objects []runtime.Object, want policyWant) {
	t.Helper()
	p := only[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objects)
	b := only[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, objects)
	if p.Name != want.name || b.Name != want.name || b.Spec.PolicyName != want.name {
		t.Errorf("policy %s, binding %s of policy %s, want all %s", p.Name, b.Name, b.Spec.PolicyName, want.name)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", p.Spec.FailurePolicy)
	}
	if !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("validationActions %v, want [Deny]", b.Spec.ValidationActions)
	}
	match := "request.userInfo.username == '" + want.username + "'"
	if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != match {
		t.Errorf("match conditions %+v, want one: %s", p.Spec.MatchConditions, match)
	}
	variables := map[string]string{}
	for _, v := range p.Spec.Variables {
		variables[v.Name] = v.Expression
	}
	for name, value := range map[string]string{"gate": want.gate, "evictionLabel": want.evictionLabel, "evictionValue": want.evictionValue} {
		if got := variables[name]; got != "'"+value+"'" {
			t.Errorf("variables.%s = %s, want '%s'", name, got, value)
		}
	}
}
