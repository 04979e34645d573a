package kubetest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/probed/probed/deploy"
)

// AgentConfig returns a rest.Config authenticated as the agent's real
// identity with exactly the RBAC of deploy/kubernetes (without eviction): a
// ServiceAccount named as in deploy/kubernetes/01-serviceaccount.yaml, in a fresh
// namespace of its own (so that tests never share rights), bound to the
// ClusterRole of deploy/kubernetes/02-clusterrole.yaml — applied as the file has
// it — by a copy of 03-clusterrolebinding.yaml whose subject is that
// ServiceAccount. It returns once the server authorizes the identity to list
// pods. The token is bound to no pod and no admission policy limits it: for
// package tests of what RBAC allows (AgentConfigForNode adds the rest).
func AgentConfig(t testing.TB) *rest.Config {
	t.Helper()
	return agentConfig(t, "")
}

// AgentConfigWithEviction is AgentConfig plus
// deploy/kubernetes/options/clusterrole-eviction.yaml (pods/eviction create), what
// --liveness-action=evict needs.
func AgentConfigWithEviction(t testing.TB) *rest.Config {
	t.Helper()
	return agentConfig(t, "", deploy.EvictionFile)
}

// AgentConfigForNode is the agent of node as the DaemonSet runs it: the RBAC
// of AgentConfig, a token bound to a pod on node (PodBoundConfig: the
// ServiceAccount's namespace gains the Pod agent-NODE, which a watch of the
// node's pods sees), and the admission policy of
// deploy/kubernetes/04-admissionpolicy.yaml installed for that ServiceAccount
// alone (InstallAgentPolicy). The end-to-end tests run the probed binary
// under it, which proves the agent never needs more than the policy allows.
func AgentConfigForNode(t testing.TB, node string) *rest.Config {
	t.Helper()
	return agentConfig(t, node)
}

// AgentConfigForNodeWithEviction is AgentConfigForNode plus
// options/clusterrole-eviction.yaml. The policy allows evictions only in namespaces
// labelled probed.io/liveness-actions=enabled.
func AgentConfigForNodeWithEviction(t testing.TB, node string) *rest.Config {
	t.Helper()
	return agentConfig(t, node, deploy.EvictionFile)
}

// AgentConfigWithRestart is AgentConfig plus
// deploy/kubernetes/options/clusterrole-restart.yaml, what
// --liveness-action=restart needs.
func AgentConfigWithRestart(t testing.TB) *rest.Config {
	t.Helper()
	return agentConfig(t, "", deploy.RestartFile)
}

// agentConfig binds the RBAC of deploy/kubernetes (plus the extra role
// files) to a fresh ServiceAccount; with a node, its token is bound to a pod
// on node and the admission policy is installed for it.
func agentConfig(t testing.TB, node string, extra ...string) *rest.Config {
	c := Client(t)
	ns := Namespace(t)
	files := append([]string{"02-clusterrole.yaml", "03-clusterrolebinding.yaml"}, extra...)
	saName := ""
	var check []authorizationv1.ResourceAttributes
	for _, file := range files {
		objects, err := deploy.File(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objects {
			switch o := obj.(type) {
			case *rbacv1.ClusterRole:
				applyClusterRole(t, c, o)
				for _, rule := range o.Rules {
					check = append(check, firstAttributes(rule))
				}
			case *rbacv1.ClusterRoleBinding:
				name := bindTo(t, c, o, ns)
				if saName != "" && name != saName {
					t.Fatalf("deploy/kubernetes/%s binds service account %q, 03-clusterrolebinding.yaml %q", file, name, saName)
				}
				saName = name
			default:
				t.Fatalf("deploy/kubernetes/%s: unexpected %T", file, obj)
			}
		}
	}
	var cfg *rest.Config
	if node == "" {
		cfg = ServiceAccountConfig(t, ns, saName)
	} else {
		cfg = PodBoundConfig(t, ns, saName, node)
	}
	waitAuthorized(t, c, "system:serviceaccount:"+ns+":"+saName, check)
	if node != "" {
		InstallAgentPolicy(t, ClientFor(t, cfg), ns, saName)
	}
	return cfg
}

// applyClusterRole creates the ClusterRole or sets its rules (the RBAC of
// deploy/kubernetes is cluster-wide and the same for every test).
func applyClusterRole(t testing.TB, c kubernetes.Interface, role *rbacv1.ClusterRole) {
	ctx := Context(t)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		_, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		have, err := c.RbacV1().ClusterRoles().Get(ctx, role.Name, metav1.GetOptions{})
		if err != nil || reflect.DeepEqual(have.Rules, role.Rules) {
			return err
		}
		have.Rules = role.Rules
		_, err = c.RbacV1().ClusterRoles().Update(ctx, have, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("apply ClusterRole %s: %v", role.Name, err)
	}
}

// bindTo creates a copy of binding, named after it and ns, whose
// ServiceAccount subject lives in ns; it returns that ServiceAccount's name.
func bindTo(t testing.TB, c kubernetes.Interface, binding *rbacv1.ClusterRoleBinding, ns string) string {
	b := binding.DeepCopy()
	b.Name = binding.Name + "-" + ns
	saName := ""
	for i := range b.Subjects {
		if b.Subjects[i].Kind == rbacv1.ServiceAccountKind {
			b.Subjects[i].Namespace = ns
			saName = b.Subjects[i].Name
		}
	}
	if saName == "" {
		t.Fatalf("ClusterRoleBinding %s has no ServiceAccount subject", binding.Name)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(Context(t), b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterRoleBinding %s: %v", b.Name, err)
	}
	return saName
}

// firstAttributes is the first verb, group and resource a rule allows (a
// "pods/status" resource is resource pods, subresource status).
func firstAttributes(rule rbacv1.PolicyRule) authorizationv1.ResourceAttributes {
	resource, subresource, _ := strings.Cut(rule.Resources[0], "/")
	return authorizationv1.ResourceAttributes{Verb: rule.Verbs[0], Group: rule.APIGroups[0], Resource: resource, Subresource: subresource}
}

// waitAuthorized waits until the server's RBAC authorizer (fed by an
// informer: a new binding takes effect a moment after it is created) allows
// user every one of the attributes, asking with SubjectAccessReviews.
func waitAuthorized(t testing.TB, c kubernetes.Interface, user string, attrs []authorizationv1.ResourceAttributes) {
	groups := []string{"system:serviceaccounts", "system:authenticated"}
	err := wait.PollUntilContextTimeout(Context(t), 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, a := range attrs {
			a := a
			review, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &a},
			}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if !review.Status.Allowed {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s not authorized by the RBAC of deploy/kubernetes: %v", user, fmt.Errorf("%v: %w", attrs, err))
	}
}
