package deploy

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/probed/probed/deploy"
	"github.com/probed/probed/internal/kubetest"
)

var dryRun = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict}

// TestManifestsAcceptedByTheAPIServer: every object of deploy/kubernetes is
// accepted by the real API server (server-side dry run: validation,
// defaulting and admission, nothing stored), and so is a Pod made from the
// DaemonSet's template (the admission a pod meets: its priority class exists,
// Pod Security of its namespace). The namespace is created for real under a
// fresh name (with 00-namespace.yaml's labels) and cluster-scoped objects get a
// suffix, so the test can run again on the same server.
func TestManifestsAcceptedByTheAPIServer(t *testing.T) {
	c := kubetest.Client(t)
	var objects []runtime.Object
	for _, f := range append(deploy.Base, deploy.EvictionFile, deploy.RestartFile) {
		objects = append(objects, plain(t, f)...)
	}
	dryRunInstall(t, c, objects)
}

// TestChartAcceptedByTheAPIServer: the same for the chart's output, with the
// default values and with non-default ones (eviction, plugin image and
// config, namespace object, no priority class, OTLP; the container runtime
// and restarts; the offload webhook).
func TestChartAcceptedByTheAPIServer(t *testing.T) {
	c := kubetest.Client(t)
	ns := kubetest.Namespace(t)
	dryRunInstall(t, c, render(t, "probed", ns))
	dryRunInstall(t, c, render(t, "edge", ns, "-f", valuesFile(t, nonDefault)))
	dryRunInstall(t, c, render(t, "cri", ns, "--set", "cri.enabled=true", "--set", "livenessAction=restart"))
	dryRunInstall(t, c, render(t, "offload", ns, "-f", valuesFile(t, offloadValues)))
}

// dryRunInstall dry-runs every object: namespaced ones into a namespace made
// from the Namespace among objects (or a fresh one), cluster-scoped ones
// renamed after it.
func dryRunInstall(t *testing.T, c kubernetes.Interface, objects []runtime.Object) {
	t.Helper()
	ctx := kubetest.Context(t)
	target := kubetest.Namespace(t)
	suffix := "-" + target[len(target)-8:] // its random part: names stay DNS labels
	for _, obj := range objects {
		var err error
		switch o := obj.DeepCopyObject().(type) {
		case *v1.Namespace:
			// Dry-run the Namespace under a new name, then label the real test namespace
			// like it: the pods below meet its Pod Security level.
			created := o.DeepCopy()
			created.Name = o.Name + suffix
			if _, err = c.CoreV1().Namespaces().Create(ctx, created, dryRun); err == nil {
				err = labelNamespace(ctx, c, target, o.Labels)
			}
		case *v1.ServiceAccount:
			o.Namespace = target
			_, err = c.CoreV1().ServiceAccounts(target).Create(ctx, o, dryRun)
		case *v1.ConfigMap:
			o.Namespace = target
			_, err = c.CoreV1().ConfigMaps(target).Create(ctx, o, dryRun)
		case *rbacv1.ClusterRole:
			o.Name += suffix
			_, err = c.RbacV1().ClusterRoles().Create(ctx, o, dryRun)
		case *rbacv1.ClusterRoleBinding:
			o.Name += suffix
			o.RoleRef.Name += suffix
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, dryRun)
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			// The server compiles every CEL expression: one that does not compile is refused here.
			o.Name += suffix
			_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, dryRun)
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			o.Name += suffix
			o.Spec.PolicyName += suffix
			_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, dryRun)
		case *rbacv1.Role:
			o.Namespace = target
			_, err = c.RbacV1().Roles(target).Create(ctx, o, dryRun)
		case *rbacv1.RoleBinding:
			o.Namespace = target
			_, err = c.RbacV1().RoleBindings(target).Create(ctx, o, dryRun)
		case *v1.Service:
			o.Namespace = target
			_, err = c.CoreV1().Services(target).Create(ctx, o, dryRun)
		case *policyv1.PodDisruptionBudget:
			o.Namespace = target
			_, err = c.PolicyV1().PodDisruptionBudgets(target).Create(ctx, o, dryRun)
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			o.Name += suffix
			for i := range o.Webhooks {
				o.Webhooks[i].ClientConfig.Service.Namespace = target
			}
			_, err = c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, o, dryRun)
		case *appsv1.Deployment:
			o.Namespace = target
			if _, err = c.AppsV1().Deployments(target).Create(ctx, o, dryRun); err != nil {
				break
			}
			pod := &v1.Pod{ObjectMeta: *o.Spec.Template.ObjectMeta.DeepCopy(), Spec: *o.Spec.Template.Spec.DeepCopy()}
			pod.Name, pod.Namespace = o.Name+"-pod", target
			_, err = c.CoreV1().Pods(target).Create(ctx, pod, dryRun)
		case *appsv1.DaemonSet:
			o.Namespace = target
			if _, err = c.AppsV1().DaemonSets(target).Create(ctx, o, dryRun); err != nil {
				break
			}
			pod := &v1.Pod{ObjectMeta: *o.Spec.Template.ObjectMeta.DeepCopy(), Spec: *o.Spec.Template.Spec.DeepCopy()}
			pod.Name, pod.Namespace = o.Name+"-pod", target
			pod.Spec.NodeName = kubetest.NodeName(t)
			_, err = c.CoreV1().Pods(target).Create(ctx, pod, dryRun)
		default:
			t.Fatalf("no dry run for %T", obj)
		}
		if err != nil {
			t.Errorf("%s %s refused by the API server: %v", kindOf(obj), name(obj), err)
		}
	}
}

func labelNamespace(ctx context.Context, c kubernetes.Interface, ns string, labels map[string]string) error {
	have, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for k, v := range labels {
		if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
			have.Labels[k] = v
		}
	}
	_, err = c.CoreV1().Namespaces().Update(ctx, have, metav1.UpdateOptions{})
	return err
}
