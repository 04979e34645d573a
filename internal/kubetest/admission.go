package kubetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/probed/probed/deploy"
)

// NodeNameExtra is the user-info extra in which the API server names the node
// of a token bound to a pod (or a node): what the admission policy of
// deploy/kubernetes/04-admissionpolicy.yaml compares with a pod's spec.nodeName.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// PodBoundConfig returns a rest.Config authenticated as the ServiceAccount
// ns/sa through a token bound to a pod on node, as the kubelet projects it
// into a DaemonSet's pod: it creates the ServiceAccount when missing and the
// Pod ns/agent-NODE (bound to node, spec.serviceAccountName sa; on the real
// node's server, whose ServiceAccount admission adds a token volume, the
// kubelet mounts it), requests a token with boundObjectRef that pod,
// and checks with a SelfSubjectReview that the server authenticates it with
// node in the NodeNameExtra extra. The pod must stay: the token is valid only
// while it exists. It is one more pod of node for whatever watches the node.
func PodBoundConfig(t testing.TB, ns, sa, node string) *rest.Config {
	t.Helper()
	ensureServiceAccount(t, Client(t), ns, sa)
	pod := NewPod(ns, "agent-"+node, node, "agent")
	pod.Spec.ServiceAccountName = sa
	pod = CreatePod(t, Client(t), pod)
	cfg := tokenConfig(t, ns, sa, &authenticationv1.BoundObjectReference{
		Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID,
	})
	review, err := ClientFor(t, cfg).AuthenticationV1().SelfSubjectReviews().Create(Context(t), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review of the token bound to pod %s/%s: %v", ns, pod.Name, err)
	}
	if got := review.Status.UserInfo.Extra[NodeNameExtra]; len(got) != 1 || got[0] != node {
		t.Fatalf("token bound to pod %s/%s on node %s authenticates with %s=%v, want [%s]", ns, pod.Name, node, NodeNameExtra, got, node)
	}
	return cfg
}

// InstallAgentPolicy applies the ValidatingAdmissionPolicy and its binding of
// deploy/kubernetes/04-admissionpolicy.yaml for the ServiceAccount ns/sa only:
// the file's objects, renamed after ns (policies are cluster-scoped and the
// test server is shared by packages running in parallel), with the username
// of deploy/kubernetes/01-serviceaccount.yaml in the match condition replaced by
// ns/sa's; nothing else is changed. They are deleted when the test ends.
//
// The API server loads a new policy a moment after it is created: the call
// returns once it refuses agent's dry-run Event with a wrong
// reportingController (agent: a client of ns/sa).
func InstallAgentPolicy(t testing.TB, agent kubernetes.Interface, ns, sa string) {
	t.Helper()
	c := Client(t)
	from, to := plainAgentUsername(t), "system:serviceaccount:"+ns+":"+sa
	objects, err := deploy.File(deploy.PolicyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objects {
		switch o := obj.(type) {
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			p := o.DeepCopy()
			p.Name += "-" + ns
			replaced := 0
			for i, mc := range p.Spec.MatchConditions {
				p.Spec.MatchConditions[i].Expression = strings.ReplaceAll(mc.Expression, "'"+from+"'", "'"+to+"'")
				replaced += strings.Count(mc.Expression, "'"+from+"'")
			}
			if replaced != 1 {
				t.Fatalf("deploy/kubernetes/%s: the match conditions name '%s' %d times, want once", deploy.PolicyFile, from, replaced)
			}
			if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(Context(t), p, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create ValidatingAdmissionPolicy %s: %v", p.Name, err)
			}
			deleteAtEnd(t, "ValidatingAdmissionPolicy "+p.Name, func(ctx context.Context) error {
				return c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, p.Name, metav1.DeleteOptions{})
			})
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			b := o.DeepCopy()
			b.Name += "-" + ns
			b.Spec.PolicyName += "-" + ns
			if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(Context(t), b, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create ValidatingAdmissionPolicyBinding %s: %v", b.Name, err)
			}
			deleteAtEnd(t, "ValidatingAdmissionPolicyBinding "+b.Name, func(ctx context.Context) error {
				return c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, b.Name, metav1.DeleteOptions{})
			})
		default:
			t.Fatalf("deploy/kubernetes/%s: unexpected %T", deploy.PolicyFile, obj)
		}
	}
	waitPolicyActive(t, agent, ns)
}

// deleteAtEnd runs del (bounded by Timeout) when the test ends, before the
// test's connections are closed (cleanups run last in, first out).
func deleteAtEnd(t testing.TB, what string, del func(context.Context) error) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		defer cancel()
		if err := del(ctx); err != nil {
			t.Errorf("delete %s: %v", what, err)
		}
	})
}

// plainAgentUsername is the username of the ServiceAccount of
// deploy/kubernetes/01-serviceaccount.yaml.
func plainAgentUsername(t testing.TB) string {
	objects, err := deploy.File("01-serviceaccount.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objects {
		if sa, ok := obj.(*v1.ServiceAccount); ok {
			return "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
		}
	}
	t.Fatal("deploy/kubernetes/01-serviceaccount.yaml holds no ServiceAccount")
	return ""
}

// waitPolicyActive polls, as agent, a dry-run create of an Event of another
// reportingController in ns until an admission policy refuses it (before the
// server has loaded the policy, RBAC lets it through).
func waitPolicyActive(t testing.TB, agent kubernetes.Interface, ns string) {
	probe := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: ns, Name: "policy-probe.1"},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: "probed.io/policy-probe",
		ReportingInstance:   "policy-probe",
		Action:              "Probe",
		Reason:              "PolicyProbe",
		Type:                v1.EventTypeNormal,
		Regarding:           v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: "policy-probe"},
	}
	var last error
	err := wait.PollUntilContextTimeout(Context(t), 50*time.Millisecond, Timeout, true, func(ctx context.Context) (bool, error) {
		_, last = agent.EventsV1().Events(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return DeniedByPolicy(last), nil
	})
	if err != nil {
		t.Fatalf("the admission policy of the agent did not take effect: %v (last dry run: %v)", err, last)
	}
}

// DeniedByPolicy reports whether err is a ValidatingAdmissionPolicy's denial
// (403 Forbidden, "ValidatingAdmissionPolicy '...' with binding '...' denied
// request: ..."), not RBAC's.
func DeniedByPolicy(err error) bool {
	var status apierrors.APIStatus
	return apierrors.IsForbidden(err) && errors.As(err, &status) &&
		strings.Contains(status.Status().Message, "ValidatingAdmissionPolicy") &&
		strings.Contains(status.Status().Message, "denied request")
}

// CreateMutatingWebhookConfiguration creates cfg (cluster-scoped: name it
// after the test's namespace, and select only the test's namespaces, since
// the server is shared by packages running in parallel) and deletes it when
// the test ends.
func CreateMutatingWebhookConfiguration(t testing.TB, cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	c := Client(t)
	if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(Context(t), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create MutatingWebhookConfiguration %s: %v", cfg.Name, err)
	}
	deleteAtEnd(t, "MutatingWebhookConfiguration "+cfg.Name, func(ctx context.Context) error {
		return c.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, cfg.Name, metav1.DeleteOptions{})
	})
}
